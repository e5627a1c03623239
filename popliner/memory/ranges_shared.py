"""Layer parts: the profile's once, and each training option set's own on top (the only way they are made).

Every scenario's range state builds each layer's parts
(:class:`popliner.memory.running.LayerParts`): its programs' code and state,
its counted variables, their liveness events on the grid and their stash
columns. Most of that does not depend on the options: the programs are the
profile's, and an option set changes the live steps (or bytes) of a minority
of variables (optimizer state off chip, recomputed activations), leaving the
others exactly as profiled.

:class:`SharedParts` (one per profile base: :attr:`popliner.base.ProfileBase.shared`)
keeps what the options cannot change: each layer's programs part, and the
events and stash columns of the layer's variables that an option set leaves
*as profiled*, made on the profile's own grid, in two pieces: its
activations (variables not always live) and its always-live variables
(those off-chip state and sharding leave alone; they are no stash
candidates). An option set's parts of a layer are those pieces, moved to its
grid (its segments refine the profile's: a what-if profile only adds liveness
classes, so its segment ends include the profile's), plus its own piece: the
layer's changed variables, made once on its own grid
(:meth:`VarSet.split`). No variable is read twice, so a single solve reads
each once, as the direct model would. The profiled piece is found by its
exact variables, so that option sets whose changes leave the same
activations share it: ``popliner plan`` builds one engine per option set
(recomputation x head placement x optimizer state) on the same parts, and
off-chip state, which changes always-live variables only, shares the
activations' piece of on-chip state's. Liveness grids and stash entries are integer
sums, so the pieces give every figure to the byte (tests/test_shared_parts.py
holds them against the direct model).

Sharing is asked for (:meth:`SharedParts.share_between_option_sets`) by a
caller that builds several option sets on one base. An option set alone (a
single solve) has nothing to share with: its split takes no variable as
profiled (every one is made on its own grids, by the same functions), and
nothing is digested, memoised here or offered to other option sets. Whether
to share decides only what is kept, never how a figure is computed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from popliner.arrays import content_key, rank_by_table, unique_inverse
from popliner.memory.figure_share import GridView, TableView
from popliner.memory.liveness import SegmentGrid, class_steps
from popliner.memory.liveness.grid import Columns, cell_dtype
from popliner.memory.program_part import ProgramPart, program_part
from popliner.memory.stash_row import class_columns, stash_columns
from popliner.memory.variable_tables import changed_variables as _changed  # tests replace it by this name
from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts
    from popliner.memory.whatif import Delta

__all__ = ["EngineShare", "ProgramPart", "SharedParts", "VarSet"]

Events = dict[str, np.ndarray]


class Pick:
    """Some variables of a set taken as profiled: the key of their flags (or positions) and their positions.

    Given by their flags, the positions are found when first asked: a piece is found by its key
    (:meth:`SharedParts.base`), and an option set whose pieces as profiled another made already reads none.
    """

    __slots__ = ("key", "_flags", "_at")

    def __init__(self, key: bytes, flags: np.ndarray | None = None, at: np.ndarray | None = None) -> None:
        self.key, self._flags, self._at = key, flags, at

    @property
    def at(self) -> np.ndarray:
        """The positions in the set."""
        if self._at is None:
            assert self._flags is not None  # given by positions or flags
            self._at = _positions(self._flags)
        return self._at

    @property
    def empty(self) -> bool:
        """Does the pick hold no variable? (From the flags when given: no positions found for it.)"""
        return not self._flags.any() if self._at is None and self._flags is not None else not self.at.size


class Split(NamedTuple):
    """The sides of a set of a layer's variables (:meth:`VarSet.split`): two pieces taken as profiled, the
    variables not always live and those always live, then the positions of those made on the option set's
    grid."""

    taken: Pick
    always: Pick
    made: np.ndarray


#: The sides :meth:`VarSet.picked` names: those of :class:`Split`, in order.
TAKEN, ALWAYS, MADE = 0, 1, 2


#: The keys of :attr:`SharedParts.view_memo` that hold what some training options made (what-if and forward-cut
#: profiles, :mod:`popliner.memory.whatif`, :meth:`popliner.memory.engine.MemoryEngine.forward_cut_profile`),
#: as opposed to what every option set reads (the roles, the layering's variables).
_OPTION_VIEWS = (b"whatif", b"cut-profiles")


class SharedParts:
    """Per profile (as loaded, before any option's what-if), the option-free parts of every layer.

    Keyed by exact contents (the operations and their counted flags, the
    variable indices), never by position, so a layer whose operations differ
    between head placements gets parts of its own.
    """

    def __init__(self, profile: Profile, ops: OperationTable) -> None:
        self.profile = profile
        self.ops = ops
        self._programs: dict[bytes, ProgramPart] = {}
        #: The unchanged variables' pieces as profiled, by (what, the layer's variables, which of them); and the
        #: keys of those asked for since the last :meth:`forget_deltas` (the others go then).
        self._base: dict[tuple[str, bytes, bytes], Events] = {}
        self._asked: set[tuple[str, bytes, bytes]] = set()
        #: Which variables of each set of a layer's variables are always live, by the set's key.
        self._always: dict[bytes, np.ndarray] = {}
        #: The classes (distinct, and each variable's rank), tiles and bytes as profiled of each set of a layer's
        #: variables, by the set's key.
        self._profiled: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._grid: SegmentGrid | None = None
        self._columns: tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None
        self._dtypes: list[tuple[np.ndarray, np.ndarray, type[np.signedinteger]]] = []
        #: Cleared grid buffers (diff, block max, block sum) by shape and type, for the next engine's grids.
        self._buffers: dict[tuple[object, ...], list[tuple[np.ndarray, ...]]] = {}
        #: The option-free memo every option set's memory facts share (:attr:`popliner.memory.facts.MemoryFacts.memo`):
        #: their training views' roles, layer spans, constants, forward-cut profiles and layer variables.
        self.view_memo: dict[bytes, Any] = {}
        #: The number of each distinct variable table met (what-if and forward-cut profiles) and never-stashed set,
        #: by digest; numbers forgotten (:meth:`forget_deltas`) are not given again.
        self._tables: dict[bytes, int] = {}
        self._never: dict[bytes, int] = {}
        self._numbers = 0
        #: Range figures by what they depend on (:meth:`RangeState.other_figure`): (worst, stash, total, peak).
        self.range_figures: dict[tuple[object, ...], tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = {}
        #: Each variable table's pieces of a layer's variables: (table, what, variables) -> pieces.
        self.corrected: dict[tuple[int, str, bytes], tuple[Events, ...]] = {}
        #: The option set whose figures the later ones of its group take where they treat a range's variables alike
        #: (:mod:`popliner.memory.figure_share`); the first to ask since :meth:`forget_deltas`.
        self.reference: TableView | None = None
        #: A number per distinct list of live intervals of the what-if profiles' own classes (:meth:`class_ids`).
        self._class_numbers: dict[bytes, int] = {}
        #: Do the option sets built from now on share their parts and range figures?
        self.shares = False

    def share_between_option_sets(self) -> None:
        """Share parts and range figures between the option sets built on these parts from now on.

        For a caller about to build several option sets on one base (``popliner plan``, the head placements of
        ``auto``, ``--recompute auto``, the hint's options). An option set built before keeps to itself.
        """
        self.shares = True

    def key(self, var: np.ndarray, runs: tuple[np.ndarray, np.ndarray] | None = None) -> bytes:
        """The key ``var``'s parts are found by: a SHA-256 digest of its values (variable indices, or flags).

        Indices are digested as their runs of consecutive values (a layer's
        variables come in long runs: tensors laid out tile by tile), flags
        packed eight to a byte. Every option set's engine asks again for each
        layer; a digest keeps no copy of the values (at 1x BERT-Large the
        copies were 225 MB in a plan, more than the parts). ``runs``: the
        indices' runs (first value and length of each, none adjacent to the
        next), when the caller has them (a layer's private variables: no pass
        over the indices then).
        """
        if var.dtype == bool:
            parts = [np.array([var.size]), np.packbits(var)]
        elif not var.size:
            parts = [np.array([0])]
        else:  # the runs' ends in int64, whatever the indices' type (no copy of them)
            if runs is None:
                cut = np.flatnonzero(np.diff(var) != 1) + 1  # each run: first and last value
                first, last = var[np.concatenate(([0], cut))], var[np.concatenate((cut - 1, [var.size - 1]))]
            else:
                first, last = runs[0], runs[0] + runs[1] - 1
            parts = [np.array([var.size]), first.astype(np.int64), last.astype(np.int64)]
        return content_key(b"", b"flags" if var.dtype == bool else b"indices", *parts)

    def profiled(self, part: VarSet) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The distinct classes of the variables of ``part`` as profiled, and each variable's rank among them, tile
        and bytes, kept by the set's key (in the narrowest integer type that holds each: every layer's, some 8
        bytes a variable, for every option set).

        A layer's variables lie spread over the variable columns, so a gather of one column for them is a pass
        over their runs, mostly cache misses; every option set's split sides read these, the variables its
        options change aside (:meth:`VarSet.picked`). The ranks are taken once here: each side's columns come
        ranked (:meth:`Columns.of_ranks`), with no table of their classes again.
        """
        found = self._profiled.get(part.key)
        if found is None:
            v = self.profile.variables
            klass = np.take(v.klass, part.var)
            classes, rank = rank_by_table(klass) or unique_inverse(klass)  # a sort only for classes far apart
            tile, nbytes = (_narrow(np.take(column, part.var)) for column in (v.tile, v.bytes))
            found = self._profiled[part.key] = (classes, _narrow(rank), tile, nbytes)
        return found

    def always_live(self, part: VarSet) -> np.ndarray:
        """Which variables of ``part.var`` are always live as profiled (memoised by the set's key: option-free, and
        a sixth of a layer's at BERT-Large, where a gather of the flags over a layer's variables is a pass over its
        runs for every option set). Flags, not positions: each split's sides are then two plain comparisons."""
        found = self._always.get(part.key)
        if found is None:
            found = self._always[part.key] = part.gathered(self.classes[0])
        return found

    def changes(self, profile: Profile, delta: Delta) -> tuple[np.ndarray, int]:
        """The variables ``profile`` (a what-if or forward-cut profile of this one) changes, and a number per
        distinct variable table (classes, intervals, bytes, tiles): equal numbers, equal tables.

        ``delta``: what the profile's maker says it changes. ``changed``: the
        variables whose class or bytes differ from the profiled ones
        (:func:`_changed`), the only ones a table keeps (read only). The
        number is the delta's key's: option sets often give the same table (off-chip state whatever the
        recomputation; the same forward cut whatever the head placement), made the same way, and
        then share its corrected parts too. No pass over millions of variables to compare and digest.
        """
        changed = _changed(profile, self.profile, delta.changed)
        if changed is None:  # with_live_steps only appends classes and keeps the tiles
            raise AssertionError("a what-if profile's class table does not extend the profile's")
        return changed, self._number(self._tables, delta.key)

    def class_ids(self, profile: Profile) -> np.ndarray:
        """Per liveness class of ``profile`` (a what-if profile of this one): a number that classes of equal live
        intervals share, in every what-if profile (the profiled classes keep theirs).

        A what-if profile numbers its own classes by their rows (:func:`popliner.memory.whatif.with_live_steps`),
        so one variable's class can take another number in another option set with the same intervals.
        """
        n = self.profile.num_classes
        ids = np.arange(profile.num_classes, dtype=np.int64)
        ptr = profile.class_ptr.tolist()
        # Sliced from the columns' bytes: a slice of bytes costs a tenth of an array's slice and its bytes.
        width = profile.iv_start.itemsize
        start, end = profile.iv_start.tobytes(), np.asarray(profile.iv_end, profile.iv_start.dtype).tobytes()
        numbers = self._class_numbers
        for k in range(n, profile.num_classes):
            lo, hi = ptr[k] * width, ptr[k + 1] * width
            ids[k] = numbers.setdefault(start[lo:hi] + end[lo:hi], n + len(numbers))
        return ids

    def never_stash(self, never: np.ndarray) -> int:
        """A number per distinct never-stashed set (``every-layer``'s recomputed variables)."""
        never = np.asarray(never, bool)
        # Most option sets stash every variable: their set is empty, and needs no digest (a pass over millions).
        return self._number(self._never, b"never" + self.key(never) if never.any() else b"never: none")

    def _number(self, known: dict[bytes, int], key: bytes) -> int:
        found = known.get(key)
        if found is None:
            found = known[key] = self._numbers
            self._numbers += 1
        return found

    @property
    def grid(self) -> SegmentGrid:
        """The profile's own liveness grid: only its segments are used (events are made on it, never added)."""
        if self._grid is None:
            self._grid = SegmentGrid.of(self.profile, dtype=self.grid_dtype(self.profile), buffers=False)
        return self._grid

    @property
    def classes(self) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """Always live per variable and (first, last) live step per class, as profiled."""
        if self._columns is None:
            self._columns = (self.profile.always_live_classes()[self.profile.variables.klass],
                             class_steps(self.profile))
        return self._columns

    def take_buffers(self, grid: SegmentGrid) -> None:
        """Give a grid made without buffers zeroed ones of its shape: those another engine's grid gave back, else new.

        Each engine's grids are tens of MB that a plan would otherwise fault
        in again for every option set (most of its system time), and zero
        first: the grid is made without them (``buffers=False``), so that
        a recycled set takes their place at no cost.
        """
        found = self._buffers.get(_buffer_key(grid))
        grid.diff, grid.block_max, grid.block_sum = found.pop() if found else grid.zeroed_buffers()

    def give_buffers(self, grid: SegmentGrid) -> None:
        """Take a grid's buffers back, cleared; the grid is left with empty ones (reading it again fails)."""
        if len(grid.diff) != grid.nblocks:
            return  # none to give: given back already (kept by its shape, empty ones would serve a later grid)
        grid.clear()  # every cell written is in a touched block: all zero again
        self._buffers.setdefault(_buffer_key(grid), []).append((grid.diff, grid.block_max, grid.block_sum))
        empty = np.zeros((0, grid.block, grid.tiles), grid.dtype)
        grid.diff, grid.block_max, grid.block_sum = empty, empty[:, 0], empty[:, 0]

    def grid_dtype(self, profile: Profile) -> type[np.signedinteger]:
        """:func:`popliner.memory.liveness.grid.cell_dtype` of a profile of these variables (their tiles and bytes)."""
        v = profile.variables
        for tile, nbytes, dtype in self._dtypes:
            if tile is v.tile and nbytes is v.bytes:  # the what-if profiles keep the arrays unless sharded
                return dtype
        found = cell_dtype(profile)
        self._dtypes.append((v.tile, v.bytes, found))  # held, so that the identities stay meaningful
        return found

    def programs(self, engine: MemoryFacts, ops: np.ndarray) -> ProgramPart:
        """The layer's programs part (the same for all options)."""
        key = np.asarray(ops, np.int64).tobytes() + engine.model.counted_vars[ops].tobytes()
        found = self._programs.get(key)
        if found is None:
            found = self._programs[key] = program_part(engine, ops)
        return found

    def base(self, what: str, part: VarSet, pick: Pick,
             columns: Callable[[], Columns] | None = None) -> Events:
        """The piece ``what`` of the variables of ``part`` at ``pick`` as profiled, on the profile's grid (memoised).

        ``what``: "merged" (:meth:`SegmentGrid.merged`, ``columns`` given), "owned"
        (:meth:`SegmentGrid.events_of` with owners) or "stash" / "stash-owned"
        (:func:`popliner.memory.stash_row.class_columns`); owners are positions
        in ``part.var``. ``pick``: one side taken as profiled of :meth:`VarSet.split` (the
        stash reads only the side not always live, each a stash candidate as
        profiled); ``columns``: gives the classes, tiles and bytes of those, when the
        caller has them (an unchanged variable's are the profiled ones); read only to make the piece.
        """
        where = (what, part.key, pick.key)
        self._asked.add(where)
        found = self._base.get(where)
        if found is None:
            at = pick.at
            given = None if columns is None else columns()
            if what == "merged":  # from the columns alone: no gather of the variables
                assert given is not None
                found = self.grid.merged(None, given)
                self._base[where] = found
                return found
            sub = _take(part.var, at)
            if what == "owned":
                found = self.grid.events_of(sub, with_owner=True)
            else:
                found = class_columns(self.profile, None, self.classes[1], sub, what == "stash-owned", given)
            if "owner" in found:
                found["owner"] = at[found["owner"]]
            self._base[where] = found
        return found

    def forget_deltas(self) -> None:
        """Drop what the option sets made so far, and the profiled pieces none asked for since the last call.

        For a caller whose next option sets change other variables (``popliner
        plan`` between recomputation and optimizer-state groups): their deltas,
        range figures, variable tables, grid buffers and what-if profiles
        (gigabytes on a large profile). What it drops is made again if asked
        for, the same to the byte. Table numbers are not given again, so an
        engine built before still finds nothing of another table.

        A profiled piece stays while each group of option sets asks for it: the
        two states of one recomputation take the same variables as profiled, and
        the next recomputation's grids often take those of another's (at 120
        BERT-Large layers, every-layer's grids find about 450 of the pieces
        pipeline's made: its on-chip first set's layer parts about 2.4 to 1.3 s).
        A piece the next group does not ask for goes at the call after, so a plan
        holds about one recomputation's pieces (those of two, at 120 layers, were
        0.14 GB more).
        """
        for where in [k for k in self._base if k not in self._asked]:
            del self._base[where]
        self._asked.clear()
        self.corrected.clear()
        self.range_figures.clear()
        self.reference = None
        self._buffers.clear()
        self._tables.clear()
        self._never.clear()
        for key in [k for k in self.view_memo if k.startswith(_OPTION_VIEWS)]:
            del self.view_memo[key]

    def piece(self, where: tuple[int, str, bytes], correct: Callable[[], tuple[Events, ...]]) -> tuple[Events, ...]:
        """The pieces ``where`` (its variable table first), memoised: the profiled piece and the table's own,
        made by ``correct`` for the first engine of that table to ask."""
        found = self.corrected.get(where)
        if found is None:
            found = self.corrected[where] = correct()
        return found


class VarSet:
    """One set of a layer's variables (its private or its shared ones) as the parts read it: its key, and, each
    read once when first needed, its split on an option set's changed variables and each side's columns.

    A layer's variables lie spread over the variable columns (tensors laid out tile by tile: some 3,000 runs of
    about 50 in 18 M variables at 120 BERT-Large layers), so a gather for them costs about a millisecond per
    column and set, mostly cache misses, and the two sides of a split each touch nearly every run of the set.
    The set's classes, tiles and bytes as profiled are therefore gathered once for every option set
    (:meth:`SharedParts.profiled`, by the set's key), and each side's columns taken from that copy; only the
    arrays an option set's profile holds of its own (its classes, sharded bytes) are gathered again, for the
    made side alone. An option set alone gathers its columns itself (nothing is kept).
    """

    def __init__(self, shared: SharedParts, var: np.ndarray, runs: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> None:
        self.var = var
        self.shared = shared
        #: The runs of ``var`` (:meth:`SharedParts.key`), when the caller has them.
        self.runs = runs
        self._key: bytes | None = None
        self._splits: list[tuple[np.ndarray | None, Split]] = []
        self._picked: list[tuple[Profile, np.ndarray | None, int, Columns]] = []
        self._gathered: list[tuple[np.ndarray, np.ndarray]] = []
        self._made: list[tuple[np.ndarray | None, np.ndarray]] = []

    @property
    def key(self) -> bytes:
        """The key the set's parts are found by (:meth:`SharedParts.key`), digested when first asked (sharing)."""
        if self._key is None:
            self._key = self.shared.key(self.var, self.runs)
        return self._key

    def gathered(self, column: np.ndarray) -> np.ndarray:
        """``column[var]`` (a flag per variable: the grids' marks, the always-live flags), gathered once per array."""
        for known, found in self._gathered:
            if known is column:
                return found
        found = np.take(column, self.var)  # take: a plain gather, no index conversion
        self._gathered.append((column, found))
        return found

    def picked(self, profile: Profile, own: np.ndarray | None, side: int) -> Columns:
        """The classes, tiles and bytes in ``profile`` of one side of :meth:`split` (:data:`TAKEN`,
        :data:`ALWAYS`: the variables taken as profiled, :data:`MADE`: those made on the grid).

        One side at a time: a layer's stash columns and grid changes each read the side they make. When shared,
        from the set's columns as profiled (:meth:`SharedParts.profiled`): a variable ``own`` does not mark has
        its class, tile and bytes as profiled in ``profile`` (its changed ones are marked), and every variable
        its tile; the marked side gathers only what ``profile`` holds in other arrays (its own classes).
        """
        for known, mark, which, found in self._picked:
            if known is profile and mark is own and which == side:
                return found
        split = self.split(own)
        at = split.made
        columns = (profile.variables.klass, profile.variables.tile, profile.variables.bytes)
        if own is None:  # alone: nothing kept, every variable on the made side
            var = _take(self.var, at)
            made = Columns(np.take(columns[0], var), np.take(columns[1], var), np.take(columns[2], var))
        else:
            classes, *kept = self.shared.profiled(self)
            if side != MADE:
                where = split.taken.at if side == TAKEN else split.always.at
                made = Columns.of_ranks(classes, *(_take(column, where) for column in kept))
            else:
                v = self.shared.profile.variables
                # Every variable's tile is as profiled (a profile whose tiles differ shares nothing:
                # SharedParts.changes), its class and bytes too unless ``profile`` holds them in arrays of its own.
                tile = _take(kept[1], at)
                nbytes = _take(kept[2], at) if columns[2] is v.bytes else np.take(columns[2], self.made_var(own))
                made = (Columns.of_ranks(classes, _take(kept[0], at), tile, nbytes) if columns[0] is v.klass
                        else Columns(np.take(columns[0], self.made_var(own)), tile, nbytes))
        self._picked.append((profile, own, side, made))
        return made

    def made_var(self, own: np.ndarray | None) -> np.ndarray:
        """The variables :meth:`split` of ``own`` makes on the grid (``var`` at its made positions; memoised)."""
        for mark, found in self._made:
            if mark is own:
                return found
        found = _take(self.var, self.split(own).made)
        self._made.append((own, found))
        return found

    def split(self, own: np.ndarray | None) -> Split:
        """The sides of the set when ``own`` marks the variables an option set makes on its own grid (None: every
        one, for an option set alone): at :data:`TAKEN` and :data:`ALWAYS` the two pieces taken as profiled
        (:class:`Pick`), at :data:`MADE` the positions of the variables made on the grid.

        Taken as profiled: those not marked, in two pieces, those not always
        live and those always live (a sixth of a layer's at BERT-Large), so
        that option sets that change only always-live variables (optimizer
        state) share the large piece with those that change nothing, and so
        do all whose marks agree on a layer's activations. An always-live
        variable no option marks is the same in every option set: its piece
        is made once (on the profile's grid, a few rows moved to each grid),
        not again on each option set's grids.
        """
        for known, found in self._splits:
            if known is own:
                return found
        if own is None:
            none = Pick(b"", at=np.zeros(0, np.int64))
            made = Split(none, none, np.arange(self.var.size))
        else:
            marked = self.gathered(own)
            always = self.shared.always_live(self)  # kept per set
            pick = np.greater(~always, marked)  # neither always live nor marked
            kept = np.greater(always, marked)
            made = Split(Pick(self.shared.key(pick), pick), Pick(b"always:" + self.shared.key(kept), kept),
                         _positions(marked))
        self._splits.append((own, made))
        return made


def _positions(flags: np.ndarray) -> np.ndarray:
    """The positions of the set flags, in the index type: each side's columns are taken at them (np.take converts
    narrower positions to a new array first), and the set's split lives only while its layer's parts are made."""
    return np.flatnonzero(flags)


def _narrow(column: np.ndarray) -> np.ndarray:
    """``column`` (integers) in int16 or int32 when every value, and one more, fits (else as it is): a class
    index plus one is a table's end."""
    for dtype in (np.int16, np.int32):
        if column.dtype.itemsize > np.dtype(dtype).itemsize and (not column.size or (
                int(column.min()) >= np.iinfo(dtype).min and int(column.max()) < np.iinfo(dtype).max)):
            return column.astype(dtype)
    return column


def _take(var: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``var[at]`` (``at``: distinct positions in order, as :meth:`VarSet.split` gives them); ``var`` when all.

    np.take: a plain gather, where an index converts int32 positions to a new int64 array first (twice the time).
    """
    return var if at.size == var.size else np.take(var, at)


def _buffer_key(grid: SegmentGrid) -> tuple[object, ...]:
    # The grid's shape, not its buffers' (a grid is made without them, and takes them here).
    return (grid.nblocks, grid.block, grid.tiles, np.dtype(grid.dtype).str)


class _GridShare:
    """One engine's grid: the profile's pieces moved to it, and the changed variables' own events made on it.

    ``profile`` is the grid's profile (the engine's what-if profile, or its
    forward-cut profile); ``changed`` marks the variables whose live steps or
    bytes there differ from the profiled ones; ``own`` the variables made on
    this grid rather than taken as profiled (the changed ones and any others
    asked). Both None for an option set alone: every variable is made here,
    and nothing is memoised in the shared parts.
    """

    def __init__(self, shared: SharedParts, grid: SegmentGrid, changes: tuple[np.ndarray, int] | None,
                 own: np.ndarray | None = None) -> None:
        self.shared = shared
        self.grid = grid
        # Grids of equal tables have equal segments: their parts are the same (-1: alone, nothing is kept).
        self.changed: np.ndarray | None = None if changes is None else changes[0]
        self.table = -1 if changes is None else changes[1]
        self.own = self.changed if own is None else own
        self.tag = f"{grid.block}:{grid.ends.size}:{grid.dtype}:{grid.cell_dtype}"
        self._colmap: tuple[np.ndarray | None] | None = None
        self._class_ids: np.ndarray | None = None

    @property
    def colmap(self) -> np.ndarray | None:
        """Column of each profiled segment start in this grid, whose segments refine the profile's (a what-if
        profile only adds classes); None when the segments are the same."""
        if self._colmap is None:
            grid, base = self.grid, self.shared.grid
            at = np.searchsorted(grid.ends, base.ends)
            if grid.tiles != base.tiles or (at >= grid.ends.size).any() or not np.array_equal(grid.ends[at], base.ends):
                raise AssertionError("a what-if grid's segments do not refine the profile's")  # with_live_steps appends
            same = grid.ends.size == base.ends.size and grid.block == base.block and (
                grid.dtype == base.dtype and grid.cell_dtype == base.cell_dtype)
            self._colmap = (None if same else at,)
        return self._colmap[0]

    def class_ids(self) -> np.ndarray:
        """:meth:`SharedParts.class_ids` of this grid's profile (memoised)."""
        if self._class_ids is None:
            self._class_ids = self.shared.class_ids(self.grid.p)
        return self._class_ids

    def merged(self, part: VarSet) -> tuple[Events, ...]:
        """The variables' net change on this grid (:meth:`SegmentGrid.merged`), in pieces that add up."""
        return self._kept("merged", part)

    def owned(self, part: VarSet) -> tuple[Events, ...]:
        """:meth:`SegmentGrid.events_of` with owners (positions in ``part.var``), in pieces that add up."""
        return self._kept("owned", part)

    def _kept(self, what: str, part: VarSet) -> tuple[Events, ...]:
        """:meth:`_pieces`, memoised in the shared parts when shared (an option set alone keeps its own)."""
        if self.own is None:
            return self._pieces(what, part)
        return self.shared.piece((self.table, f"{what}:{self.tag}", part.key), lambda: self._pieces(what, part))

    def _pieces(self, what: str, part: VarSet) -> tuple[Events, ...]:
        """The variables taken as profiled (moved here), then the others made here."""
        split = part.split(self.own)
        at = split.made
        merged = what == "merged"
        out = [self._moved(self.shared.base(what, part, pick,
                                            partial(part.picked, self.grid.p, self.own, side) if merged else None))
               for side, pick in ((TAKEN, split.taken), (ALWAYS, split.always)) if not pick.empty]
        if at.size:
            var = part.made_var(self.own)
            if merged:
                out.append(self.grid.merged(var, part.picked(self.grid.p, self.own, MADE)))
            else:
                own = self.grid.events_of(var, with_owner=True)
                own["owner"] = at[own["owner"]]
                out.append(own)
        return tuple(out)

    def _cells(self, cells: np.ndarray) -> np.ndarray:
        return cells.astype(self.grid.cell_dtype)

    def _moved(self, events: Events) -> Events:
        """Events of the profile's grid in this grid's columns (the same when the segments are the same)."""
        colmap = self.colmap
        if colmap is None:
            return events
        tiles, grid = self.grid.tiles, self.grid
        if "rows" in events:
            return grid.row_change(colmap[events["rows"]], events["dense"].astype(grid.dtype, copy=False))
        if "cells" in events:
            cols = colmap[events["cells"] // tiles]
            return {"cells": self._cells(cols * tiles + events["cells"] % tiles),
                    "delta": events["delta"].astype(grid.dtype, copy=False),
                    "blocks": np.unique(cols // grid.block)}
        start = colmap[events["start"] // tiles] * tiles + events["start"] % tiles
        end = colmap[events["end"] // tiles] * tiles + events["end"] % tiles
        return {"start": self._cells(start), "end": self._cells(end),
                "nbytes": events["nbytes"].astype(grid.dtype, copy=False), "owner": events["owner"]}


class EngineShare:
    """One engine's view of the shared parts: which variables its options change, and its grids' adapters.

    ``shares``: the parts' :attr:`SharedParts.shares` when the engine was made. Alone, the engine's grids make
    every variable themselves and it reads no changed variables, tables or fingerprints.
    """

    def __init__(self, shared: SharedParts, engine: MemoryFacts, grid: SegmentGrid,
                 cut_grid: SegmentGrid | None) -> None:
        self.shared = shared
        self.shares = shared.shares
        self.facts = engine
        self.stash_table, self.stash_key = -1, ""
        if not self.shares:
            self.grid = _GridShare(shared, grid, None)
            self.cut_grid = None if cut_grid is None else _GridShare(shared, cut_grid, None)
            return
        changes = shared.changes(engine.profile, engine.view.delta)
        # Every-layer's never-stashed variables are made on the option set's grid too (changed or not), so that
        # one split of a layer's variables serves its events and its stash columns (the others have none: their
        # grid makes the changed variables, no copy of the flags over every variable).
        never = np.asarray(engine.view.never_stash) if engine.training and engine.view.never_stash.any() else None
        self.grid = _GridShare(shared, grid, changes, None if never is None else changes[0] | never)
        # The cut grid is made from the facts' forward-cut profile (popliner.memory.rerun.forward_cut_grid).
        self.cut_grid = None if cut_grid is None else _GridShare(
            shared, cut_grid, shared.changes(cut_grid.p, engine.forward_cut()[1]))
        if engine.training:
            # A variable whose class and bytes are as profiled has the profiled steps and always-live flag
            # (the class table extends the profile's): only every-layer's never-stashed ones change besides,
            # and those the main grid makes on its own already.
            self.stash_table = self.grid.table
            self.stash_key = f"stash:{shared.never_stash(engine.view.never_stash)}"

    def signature(self, engine: MemoryFacts) -> tuple[object, ...]:
        """What a range's figure reads besides its layers' operations, counted flags and variables: the training
        rules, by value. Ranges of equal operations and equal signatures whose layers' variables two option sets
        treat alike (:mod:`popliner.memory.figure_share`) have equal figures.
        """
        view = engine.view
        return (engine.training, view.recompute, view.stash_inputs, view.inputs_only, self.cut_grid is not None,
                np.asarray(view.is_backward, bool).tobytes())

    def view(self, signature: tuple[object, ...]) -> TableView:
        """What this option set's range figures read of its variables (:mod:`popliner.memory.figure_share`)."""
        always = self.shared.classes[0]
        grids = tuple(GridView(always, share.own, share.grid.p.variables.klass, share.class_ids,
                               share.grid.p.variables.bytes)
                      for share in (self.grid, self.cut_grid) if share is not None and share.own is not None)
        never = np.asarray(self.facts.view.never_stash, bool) if self.facts.training else None
        return TableView(signature, grids, never, self.shared.profile.num_classes)

    def stash(self, part: VarSet, with_owner: bool = False) -> tuple[Events, ...] | None:
        """The stash columns of ``part``: those taken as profiled, then the others' own (the main grid's split);
        memoised in the shared parts when shared."""
        if not self.facts.training:
            return None
        if not self.shares:
            return self._stash(part, with_owner)
        return self.shared.piece((self.stash_table, f"{self.stash_key}:{with_owner}", part.key),
                                 lambda: self._stash(part, with_owner))

    def _stash(self, part: VarSet, with_owner: bool) -> tuple[Events, ...]:
        split = part.split(self.grid.own)
        pick, at = split.taken, split.made
        profile, mark = self.facts.profile, self.grid.own
        # The always-live variables taken as profiled are no stash candidates (an option that changes one marks it).
        out = ([self.shared.base("stash-owned" if with_owner else "stash", part, pick,
                                 None if with_owner else partial(part.picked, profile, mark, TAKEN))]
               if not pick.empty else [])
        if at.size:
            given = None if with_owner else part.picked(profile, mark, MADE)
            own = stash_columns(self.facts, part.made_var(mark), with_owner, given)
            assert own is not None  # in training
            if with_owner:  # positions in var, not in var[at]
                own["owner"] = at[own["owner"]]
            out.append(own)
        return tuple(out)
