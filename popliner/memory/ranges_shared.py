"""Layer parts: the profile's once, and each training option set's delta on top (the only way they are made).

Every scenario's range state builds each layer's parts
(:class:`popliner.memory.running.LayerParts`): its programs' code and state,
its counted variables, their liveness events on the grid and their stash
columns. Most of that does not depend on the options: the programs are the
profile's, and an option set changes the live steps (or bytes) of a minority
of variables (optimizer state off chip, recomputed activations), leaving the
others exactly as profiled.

:class:`SharedParts` (one per profile base: :attr:`popliner.base.ProfileBase.shared`)
keeps what the options cannot change: each layer's programs part and counted
variables, and the events and stash columns of a set of variables *as
profiled* (on the profile's own grid). :class:`EngineShare` adapts them to
one engine: the events move to the engine's grid (its segments refine the
profile's: a what-if profile only adds liveness classes, so its segment ends
include the profile's), and the option set's delta is added for the
variables its options change: their what-if events or columns, minus their
profiled ones. An engine whose options change nothing (inference, or the
options the profile was compiled with) adds no delta. ``popliner plan``
builds one engine per option set (recomputation x head placement x
optimizer state) on the same parts; a single solve builds one. Liveness
grids and stash entries are integer sums, so the parts plus the delta give
every figure to the byte (tests/test_shared_parts.py holds them against the
direct model and an independent per-variable sum).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from popliner.arrays import expand_ranges
from popliner.memory.liveness import SegmentGrid, variable_steps
from popliner.memory.liveness.grid import cell_dtype
from popliner.memory.program_part import ProgramPart, program_part
from popliner.memory.stash_row import candidate_columns
from popliner.memory.variable_tables import VariableTable
from popliner.memory.variable_tables import changed_variables as _changed  # tests replace it by this name
from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts

__all__ = ["EngineShare", "ProgramPart", "SharedParts"]

Events = dict[str, np.ndarray]


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
        self._merged: dict[bytes, Events] = {}
        self._owned: dict[bytes, Events] = {}
        self._stash: dict[tuple[bytes, bool], Events] = {}
        self._grid: SegmentGrid | None = None
        self._columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._dtypes: list[tuple[np.ndarray, np.ndarray, type[np.signedinteger]]] = []
        #: Cleared grid buffers (diff, run, block max, block sum) by shape and type, for the next engine's grids.
        self._buffers: dict[tuple[object, ...], list[tuple[np.ndarray, ...]]] = {}
        #: The option-free memo every option set's memory facts share (:attr:`popliner.memory.facts.MemoryFacts.memo`):
        #: their training views' roles, layer spans, constants, forward-cut profiles and layer variables.
        self.view_memo: dict[bytes, Any] = {}
        #: Each distinct variable table met (what-if and forward-cut profiles), and never-stashed set.
        #: Each distinct variable table met (what-if and forward-cut profiles), and never-stashed set; None once
        #: forgotten (:meth:`forget_deltas`: its number is not given again).
        self._tables: list[VariableTable | None] = []
        self._never: list[np.ndarray | None] = []
        #: Range figures by what they depend on (:meth:`RangeState.other_figure`): (worst, stash, total, peak).
        self.range_figures: dict[tuple[object, ...], tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = {}
        #: Parts already corrected for a variable table: (table, what, variables) -> pieces.
        self.corrected: dict[tuple[int, str, bytes], tuple[Events, ...]] = {}
        #: Per variable table and layer variables, their digest (:meth:`EngineShare.fingerprint`).
        self.fingerprints: dict[tuple[object, ...], bytes] = {}
        #: One bytes object per distinct variable set (:meth:`key`).
        self._keys: dict[bytes, bytes] = {}

    def key(self, var: np.ndarray) -> bytes:
        """``var``'s bytes, the key its parts are found by: one object per distinct set, however often asked.

        Every option set's engine asks again for each layer; its parts stay
        under the first object, so that the plan keeps one copy of the key
        (at 1x BERT-Large the copies were 225 MB, more than the parts).
        """
        made = var.tobytes()
        return self._keys.setdefault(made, made)

    def table(self, profile: Profile, changed: np.ndarray) -> int:
        """A number per distinct variable table (classes, intervals, bytes, tiles): equal numbers, equal tables.

        ``changed``: the variables whose class or bytes differ from the
        profiled ones (:func:`_changed`), the only ones a table keeps.
        Option sets often give the same table (off-chip state whatever the
        recomputation; the same forward cut whatever the head placement), and
        then share its corrected parts too.
        """
        table = VariableTable.of(profile, changed)
        for k, known in enumerate(self._tables):
            if known is not None and known.same(table):
                return k
        self._tables.append(table)
        return len(self._tables) - 1

    def never_stash(self, never: np.ndarray) -> int:
        """A number per distinct never-stashed set (``every-layer``'s recomputed variables)."""
        for k, known in enumerate(self._never):
            if known is not None and (known is never or np.array_equal(known, never)):
                return k
        self._never.append(never)
        return len(self._never) - 1

    @property
    def grid(self) -> SegmentGrid:
        """The profile's own liveness grid: only its segments are used (events are made on it, never added)."""
        if self._grid is None:
            self._grid = SegmentGrid.of(self.profile)
        return self._grid

    @property
    def stash_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(stash candidate, first live step, last live step) per variable, as profiled (no option applied)."""
        if self._columns is None:
            first, last = variable_steps(self.profile)
            always = self.profile.always_live_classes()[self.profile.variables.klass]
            self._columns = (np.asarray(~always), first, last)
        return self._columns

    def take_buffers(self, grid: SegmentGrid) -> None:
        """Give a new grid zeroed buffers of its shape that another engine's grid gave back, if any.

        Each engine's grids are tens of MB that a plan would otherwise fault
        in again for every option set (most of its system time).
        """
        found = self._buffers.get(_buffer_key(grid))
        if found:
            grid.diff, grid.run, grid.block_max, grid.block_sum = found.pop()

    def give_buffers(self, grid: SegmentGrid) -> None:
        """Take a grid's buffers back, cleared; the grid is left with empty ones (reading it again fails)."""
        grid.clear()  # every cell written is in a touched block: all zero again
        self._buffers.setdefault(_buffer_key(grid), []).append((grid.diff, grid.run, grid.block_max, grid.block_sum))
        empty = np.zeros((0, grid.block, grid.tiles), grid.dtype)
        grid.diff, grid.run, grid.block_max, grid.block_sum = empty, empty, empty[:, 0], empty[:, 0]

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

    def merged(self, var: np.ndarray, key: bytes) -> Events:
        """:meth:`SegmentGrid.merged` of ``var`` (``key``: its bytes) on the profile's grid."""
        found = self._merged.get(key)
        if found is None:
            found = self._merged[key] = self.grid.merged(var)
        return found

    def forget_deltas(self) -> None:
        """Drop what the option sets made so far; the profile's own parts stay.

        For a caller whose next option sets change other variables (``popliner
        plan`` between recomputation and optimizer-state groups): their deltas,
        range figures, variable tables, grid buffers and what-if profiles
        (gigabytes on a large profile). What it drops is made again if asked
        for, the same to the byte. Table numbers are not given again, so an
        engine built before still finds nothing of another table.
        """
        self.corrected.clear()
        self.range_figures.clear()
        self.fingerprints.clear()
        self._buffers.clear()
        self._tables = [None] * len(self._tables)
        self._never = [None] * len(self._never)
        for key in [k for k in self.view_memo if k.startswith(_OPTION_VIEWS)]:
            del self.view_memo[key]

    def piece(self, where: tuple[int, str, bytes], correct: Callable[[], tuple[Events, ...]]) -> tuple[Events, ...]:
        """The piece ``where`` (its variable table first), memoised: the profiled part and the table's delta,
        made by ``correct`` for the first engine of that table to ask."""
        found = self.corrected.get(where)
        if found is None:
            found = self.corrected[where] = correct()
        return found

    def owned(self, var: np.ndarray, key: bytes) -> Events:
        """:meth:`SegmentGrid.events_of` of ``var`` (with owners) on the profile's grid."""
        found = self._owned.get(key)
        if found is None:
            found = self._owned[key] = self.grid.events_of(var, with_owner=True)
        return found

    def stash(self, var: np.ndarray, with_owner: bool, key: bytes) -> Events:
        """The stash columns of ``var`` as profiled (:func:`popliner.memory.stash_row.stash_columns`)."""
        found = self._stash.get((key, with_owner))
        if found is None:
            found = self._stash[(key, with_owner)] = self.columns(var, with_owner)
        return found

    def columns(self, var: np.ndarray, with_owner: bool, sign: int = 1) -> Events:
        candidate, first, last = self.stash_columns
        v = self.profile.variables
        return candidate_columns(var, candidate, first, last, v.tile, v.bytes, self.profile.tiles, with_owner, sign)


def _buffer_key(grid: SegmentGrid) -> tuple[object, ...]:
    return (grid.diff.shape, grid.block_max.shape, np.dtype(grid.dtype).str)


class _GridShare:
    """The shared events of the profile's grid, moved to one engine's grid, and the correction for changed variables.

    ``profile`` is the grid's profile (the engine's what-if profile, or its
    forward-cut profile); ``changed`` marks the variables whose live steps or
    bytes there differ from the profiled ones.
    """

    def __init__(self, shared: SharedParts, grid: SegmentGrid, changed: np.ndarray) -> None:
        self.shared = shared
        self.grid = grid
        self.changed = changed
        # Grids of equal tables have equal segments: their corrected parts are the same.
        self.table = shared.table(grid.p, changed)
        self.tag = f"{grid.block}:{grid.ends.size}:{grid.dtype}:{grid.cell_dtype}"
        base = shared.grid
        # Column of each profiled segment start in this grid (its ends include the profile's).
        self.colmap = np.searchsorted(grid.ends, base.ends)
        self.same = grid.ends.size == base.ends.size and grid.block == base.block and (
            grid.dtype == base.dtype and grid.cell_dtype == base.cell_dtype)
        self.base_start = self.colmap[base.col_start]
        self.base_end = self.colmap[base.col_end]

    @classmethod
    def of(cls, shared: SharedParts, grid: SegmentGrid, changed: np.ndarray) -> _GridShare:
        """The adapter of ``grid``, whose segments refine the profile's (a what-if profile only adds classes)."""
        base = shared.grid.ends
        at = np.searchsorted(grid.ends, base)
        if grid.tiles != shared.grid.tiles or (at >= grid.ends.size).any() or not np.array_equal(grid.ends[at], base):
            raise AssertionError("a what-if grid's segments do not refine the profile's")  # with_live_steps appends
        return cls(shared, grid, changed)

    def merged(self, var: np.ndarray, key: bytes) -> tuple[Events, ...]:
        """The variables' net change on this grid: the profiled one moved here, plus the changed ones' delta.

        ``key`` is ``var.tobytes()``, made once per layer (hashing it is most of a lookup's cost).
        """
        return self.shared.piece((self.table, "merged:" + self.tag, key), lambda: self._merged(var, key))

    def owned(self, var: np.ndarray, key: bytes) -> tuple[Events, ...]:
        """:meth:`SegmentGrid.events_of` with owners (positions in ``var``), as a profiled part and a delta."""
        return self.shared.piece((self.table, "owned:" + self.tag, key), lambda: self._owned(var, key))

    def _merged(self, var: np.ndarray, key: bytes) -> tuple[Events, ...]:
        out = [self._moved(self.shared.merged(var, key))]
        pick = var[self.changed[var]]
        if pick.size:  # the change: from every interval, as profiled and as this grid's profile has them
            s0, e0, t0, b0, _ = self._intervals(pick)
            s1, e1, t1, b1, _ = self._profiled(pick)
            out.append(self.grid.net_change(np.concatenate((s0, s1)), np.concatenate((e0, e1)),
                                            np.concatenate((t0, t1)), np.concatenate((b0, -b1))))
        return tuple(out)

    def _owned(self, var: np.ndarray, key: bytes) -> tuple[Events, ...]:
        out = [self._moved(self.shared.owned(var, key))]
        at = np.flatnonzero(self.changed[var])
        if at.size:
            s0, e0, t0, b0, o0 = self._intervals(var[at])
            s1, e1, t1, b1, o1 = self._profiled(var[at])
            tiles = self.grid.tiles
            out.append({"start": self._cells(np.concatenate((s0, s1)) * tiles + np.concatenate((t0, t1))),
                        "end": self._cells(np.concatenate((e0, e1)) * tiles + np.concatenate((t0, t1))),
                        "nbytes": np.concatenate((b0, -b1)).astype(self.grid.dtype),
                        "owner": at[np.concatenate((o0, o1))]})
        return tuple(out)

    def _cells(self, cells: np.ndarray) -> np.ndarray:
        return cells.astype(self.grid.cell_dtype)

    def _intervals(self, var: np.ndarray) -> tuple[np.ndarray, ...]:
        """(start column, end column, tile, bytes, owner) of every interval of ``var`` in this grid's profile."""
        p = self.grid.p
        iv, owner = _expand(p, var)
        v = p.variables
        return (self.grid.col_start[iv], self.grid.col_end[iv], v.tile[var].astype(np.int64)[owner],
                v.bytes[var].astype(np.int64)[owner], owner)

    def _profiled(self, var: np.ndarray) -> tuple[np.ndarray, ...]:
        """The same as profiled, in this grid's columns."""
        p = self.shared.profile
        iv, owner = _expand(p, var)
        v = p.variables
        return (self.base_start[iv], self.base_end[iv], v.tile[var].astype(np.int64)[owner],
                v.bytes[var].astype(np.int64)[owner], owner)

    def _moved(self, events: Events) -> Events:
        """Events of the profile's grid in this grid's columns (the same when the segments are the same)."""
        if self.same:
            return events
        tiles, grid = self.grid.tiles, self.grid
        if "rows" in events:
            rows = self.colmap[events["rows"]]
            return {"rows": rows, "dense": events["dense"].astype(grid.dtype, copy=False),
                    "blocks": np.unique(rows // grid.block)}
        if "cells" in events:
            cols = self.colmap[events["cells"] // tiles]
            return {"cells": self._cells(cols * tiles + events["cells"] % tiles),
                    "delta": events["delta"].astype(grid.dtype, copy=False),
                    "blocks": np.unique(cols // grid.block)}
        start = self.colmap[events["start"] // tiles] * tiles + events["start"] % tiles
        end = self.colmap[events["end"] // tiles] * tiles + events["end"] % tiles
        return {"start": self._cells(start), "end": self._cells(end),
                "nbytes": events["nbytes"].astype(grid.dtype, copy=False), "owner": events["owner"]}


def _changed_from(profile: Profile, base: Profile) -> np.ndarray:
    """:func:`popliner.memory.variable_tables.changed_variables` of a what-if (or forward-cut) profile of ``base``."""
    changed = _changed(profile, base)
    if changed is None:  # with_live_steps only appends classes and keeps the tiles
        raise AssertionError("a what-if profile's class table does not extend the profile's")
    return changed


def _digest_changed(digest: Any, profile: Profile, var: np.ndarray) -> None:
    """Feed ``digest`` the variables, each one's number of intervals, the intervals and the bytes."""
    v = profile.variables
    cls = v.klass[var]
    first = profile.class_ptr[cls]
    counts = profile.class_ptr[cls + 1] - first
    iv = expand_ranges(first, counts)
    for part in (var, counts, profile.iv_start[iv], profile.iv_end[iv], v.bytes[var]):
        _digest_part(digest, part)


def _digest_part(digest: Any, part: np.ndarray) -> None:
    """Feed ``digest`` an array's length, then its values (as int64): no two sequences of parts feed the same."""
    digest.update(len(part).to_bytes(8, "little"))
    digest.update(np.asarray(part, np.int64).tobytes())


def _expand(profile: Profile, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Interval indices of the variables' classes, and each interval's position in ``var``."""
    cls = profile.variables.klass[var]
    counts = profile.class_ptr[cls + 1] - profile.class_ptr[cls]
    return expand_ranges(profile.class_ptr[cls], counts), np.repeat(np.arange(len(var)), counts)


class EngineShare:
    """One engine's view of the shared parts: which variables its options change, and its grids' adapters."""

    def __init__(self, shared: SharedParts, engine: MemoryFacts, grid: SegmentGrid,
                 cut_grid: SegmentGrid | None) -> None:
        self.shared = shared
        base = shared.profile
        changed = _changed_from(engine.profile, base)
        self.grid = _GridShare.of(shared, grid, changed)
        self.cut_grid = None if cut_grid is None else _GridShare.of(shared, cut_grid, _changed_from(cut_grid.p, base))
        self.stash_changed: np.ndarray | None = None
        self.stash_table, self.stash_key = -1, ""
        if engine.training:
            # A variable whose class and bytes are as profiled has the profiled steps and always-live flag
            # (the class table extends the profile's): only every-layer's never-stashed ones change besides.
            self.stash_changed = np.asarray(changed | engine.view.never_stash)
            self.stash_table = shared.table(engine.profile, changed)
            self.stash_key = f"stash:{shared.never_stash(engine.view.never_stash)}"
        self.engine_columns = engine
        p = engine.profile
        # Per class of the engine's profile: first and last live step, always live (a handful of classes).
        nonempty = np.diff(p.class_ptr) > 0
        self._class_first = np.full(p.num_classes, -1, np.int64)
        self._class_last = np.full(p.num_classes, -1, np.int64)
        self._class_first[nonempty] = p.iv_start[p.class_ptr[:-1][nonempty]]
        self._class_last[nonempty] = p.iv_end[p.class_ptr[1:][nonempty] - 1] - 1
        self._class_always = p.always_live_classes()

    def signature(self, engine: MemoryFacts) -> tuple[object, ...]:
        """What a range's figure reads besides its layers' operations, counted flags and variables: the training
        rules, by value. Ranges of equal operations, equal signatures and equal layer fingerprints
        (:meth:`fingerprint`) have equal figures.
        """
        view = engine.view
        return (engine.training, view.recompute, view.stash_inputs, view.inputs_only, self.cut_grid is not None,
                np.asarray(view.is_backward, bool).tobytes())

    def fingerprint(self, engine: MemoryFacts, private: np.ndarray, shared: np.ndarray, layer: bytes) -> bytes:
        """A digest of what this option set makes of one layer's variables (``private`` and ``shared``: the
        counted variables of its operations, which ``layer`` names: their indices and counted flags): the live
        intervals and bytes of those whose class or bytes it changes, on its grid and on its forward-cut grid,
        and which of them are never stashed.

        A range's figure reads nothing else of its variables (the unchanged ones are as profiled), so two
        option sets whose variable tables differ elsewhere (``every-layer`` with the head placed first and
        last: only the head's variables differ) share the figures of the ranges of equal fingerprints.
        Memoised per variable table, as the layer's parts are.
        """
        where = (self.grid.table, self.cut_grid.table if self.cut_grid is not None else -1, self.stash_key, layer)
        found = self.shared.fingerprints.get(where)
        if found is None:
            digest = hashlib.blake2b(digest_size=32)
            # Private and shared apart, each sorted (so are their parts): no sort of the layer's variables.
            for var in (private, shared):
                for share in (self.grid, self.cut_grid):
                    if share is not None:
                        _digest_changed(digest, share.grid.p, var[share.changed[var]])
                if engine.training:
                    _digest_part(digest, var[np.asarray(engine.view.never_stash)[var]])
            found = self.shared.fingerprints[where] = digest.digest()
        return found

    def stash(self, var: np.ndarray, key: bytes, with_owner: bool = False) -> tuple[Events, ...] | None:
        """The stash columns of ``var``: the profiled ones, plus the changed variables' own minus their profiled."""
        if not self.engine_columns.training:
            return None
        return self.shared.piece((self.stash_table, f"{self.stash_key}:{with_owner}", key),
                                 lambda: self._stash(var, with_owner, key))

    def _stash(self, var: np.ndarray, with_owner: bool, key: bytes) -> tuple[Events, ...]:
        out = [self.shared.stash(var, with_owner, key)]
        assert self.stash_changed is not None  # stash() took the shared path
        at = np.flatnonzero(self.stash_changed[var])
        if at.size:
            mine = self._columns(var[at], with_owner)
            theirs = self.shared.columns(var[at], with_owner, sign=-1)
            if with_owner:  # positions in var, not in var[at]
                mine["owner"], theirs["owner"] = at[mine["owner"]], at[theirs["owner"]]
            out += [mine, theirs]
        return tuple(out)

    def _columns(self, var: np.ndarray, with_owner: bool) -> Events:
        """:func:`popliner.memory.stash_row.stash_columns` of a few variables, from their classes."""
        engine = self.engine_columns
        v = engine.profile.variables
        cls = v.klass[var]
        candidate = ~self._class_always[cls] & ~engine.view.never_stash[var]
        at = np.arange(len(var))
        return candidate_columns(at, candidate, self._class_first[cls], self._class_last[cls], v.tile[var],
                                 v.bytes[var], engine.tiles, with_owner)
