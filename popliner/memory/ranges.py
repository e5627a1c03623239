"""The incremental range facts: per-tile memory of every contiguous layer range, grown one layer at a time.

A stage is a contiguous range ``i..j`` of layers (in layer order); the first
stage also holds the operations without a layer, as PopLiner did. A stage's
memory is the memory model applied to all its operations, never the sum of
its layers' figures (code is shared, liveness peaks do not add up), so the
table evaluates ranges: for each start ``i`` it extends ``j`` one layer at a
time, adding the new layer's programs and variables to running state, and
stops once the range no longer fits the largest budget of interest (memory
only grows as a range grows).

The figures are the same as :func:`popliner.memory.stages.stage_memory`
and :func:`~popliner.memory.stages.stash_entry_per_tile` of the
range's operations, to the byte (a property test holds the two against each
other on every fixture, in pieces of several sizes).

Liveness goes through a dense (tile x liveness segment) grid
(:mod:`popliner.memory.liveness.grid`). The running sets are :mod:`popliner.memory.running`
(``pieces``: the sizes they work in, for tests);
what the tables of one scenario share is its range memo
(:mod:`popliner.memory.range_state`).

:class:`ProfileRanges` offers what a solver reads (see
:class:`popliner.pipeline.RangeCosts`); the pipeline rules (stash depth, copy
buffers) are applied by :mod:`popliner.pipeline`, not here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from popliner.deadline import check_deadline
from popliner.errors import UsageProblem
from popliner.hardware import DEFAULT_LINK_BANDWIDTH, MAX_CYCLES
from popliner.memory.cycles import range_cycles
from popliner.memory.running import PIECES, Pieces, RunningStage
from popliner.memory.stages import pipeline_rerun_window, stage_memory
from popliner.memory.types import StageMemory
from popliner.memory.work import RangeWork, check_range_tables

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts
    from popliner.memory.range_state import RangeMemo

__all__ = ["OVERFLOW", "Front", "ProfileRanges", "front_memory", "release", "transfer_cycles", "worst_tiles"]

#: A range that does not fit (or was not evaluated because a shorter one did not).
OVERFLOW = math.inf


class ProfileRanges:
    """The range table of a profile's memory facts, evaluated lazily and memoised.

    ``limit`` is the largest worst-tile figure of interest: a range over it
    reads as :data:`OVERFLOW`, and no longer range from the same start is
    evaluated. Tables of the same scenario (a solve builds several: the asked
    budget, relaxed budgets for a best-effort split) share what does not
    depend on the limit: per-layer parts, crossing bytes and every range
    figure already evaluated, so a second table only evaluates ranges the
    first did not.

    ``deadline`` (a ``time.monotonic()`` value, or None) bounds the work of
    extending a row: past it, reading a range not evaluated yet raises
    :class:`popliner.deadline.OutOfTime`. What was evaluated before stays
    memoised and correct, so a solver can still read it after clearing the
    deadline (set the attribute to None).

    ``work``: a pod plan's account of the ranges its tables evaluate (:class:`popliner.memory.work.RangeWork`),
    charged once for each range a table of the scenario evaluates or takes from another option set.

    ``lazy`` extends a row only as far as it is read (``i..j`` evaluates
    ``i..i`` to ``i..j`` and no further), for a solver that reads rows in
    order and knows where to stop; reading the row further grows its
    running set from where it stopped. Figures are the same either way.

    ``regrow``: keep each finished row's running set, for a table of a higher limit on the same scenario to grow it
    (a pod plan builds none: without, its rows' sets go as they finish, hundreds of MB on a large profile).
    """

    def __init__(self, facts: MemoryFacts, memo: RangeMemo, limit: int,
                 link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH, pieces: Pieces = PIECES,
                 deadline: float | None = None, lazy: bool = False, work: RangeWork | None = None,
                 regrow: bool = True) -> None:
        self.facts = facts
        self.limit = limit
        # A wrapped head is no layer the solvers place: it goes with the range at position 0.
        self._wraps = facts.layout.wraps
        self._names = facts.layout.placed_names
        check_range_tables(facts.profile, len(self._names))  # before any row is built
        self._wrapped: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
        self._bytes_per_cycle = link_bytes_per_second / facts.profile.target.clock_hz
        self._training = facts.training
        self._ranges: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self._done_from: set[int] = set()
        #: Per range read: the tiles that can be the worst at some stash depth (:func:`worst_tiles`).
        self._fronts: dict[tuple[int, int], Front] = {}
        self._positions: np.ndarray | None = None
        self._shared = memo.state(facts, pieces)
        self._cycle_facts = facts.cycles
        self._cross: list[int] = facts.boundaries.crossing.tolist()  # Python integers: the solvers read each often
        self._boundaries = len(self._cross)  # read at every crossing(): hundreds of thousands of times a plan
        self._layers = len(self._names)
        self.deadline = deadline
        self.lazy = lazy
        self._work = work
        self._regrow = regrow

    # -- what a solver reads ------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return self._layers

    @property
    def layer_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def tiles(self) -> int:
        return self.facts.tiles

    @property
    def training(self) -> bool:
        return self._training

    @property
    def has_unlayered(self) -> bool:
        return self.facts.has_unlayered

    @property
    def has_cycles(self) -> bool:
        return self._cycle_facts.has_cycles

    @property
    def head_wraps(self) -> bool:
        return self._wraps

    def memory(self, i: int, j: int, extra_stash: int) -> float:
        """Worst-tile bytes of the range with ``extra_stash`` (>= 0) stash entries beyond the profile's one.

        :data:`OVERFLOW` when over the limit; then every longer range from
        ``i`` overflows too. Copy buffers are not included: see
        :func:`popliner.pipeline.position_memory`. A few additions over the
        range's :meth:`front` (no memo per depth: the solvers read hundreds of
        thousands of (range, depth) pairs, most of them once).
        """
        front = self._fronts.get((i, j))
        if front is None:
            front = self.front(i, j)
        return front_memory(front, extra_stash, self.limit)

    def front(self, i: int, j: int) -> Front:
        """The range's tiles that can be its worst at some stash depth (:func:`worst_tiles`), memoised; () over the
        limit."""
        front = self._fronts.get((i, j))
        if front is None:
            entry = self._wrapped_range(j) if self._wraps and i == 0 else self._range(i, j)
            front = self._fronts[(i, j)] = () if entry is None else worst_tiles(*entry)
        return front

    def compute(self, i: int, j: int) -> int:
        """Cycles of one micro-batch through the range (a wrapped head's with the range at position 0)."""
        # Two differences of running sums, not memoised: the solvers read each range's once (objective 1's values,
        # popliner.solvers.dp.RangeValues), and a memo's keys woke the garbage collector.
        return range_cycles(self._cycle_facts, i, j, with_head=self._wraps and i == 0)

    def crossing(self, j: int) -> int:
        # After the last layer placed: 0, or what a wrapped head receives.
        return self._cross[j] if 0 <= j < self._boundaries else 0

    def transfer(self, nbytes: int) -> int:
        return transfer_cycles(nbytes, self._bytes_per_cycle)

    def forbidden_splits(self, keep_shared_together: bool) -> frozenset[int]:
        """Boundaries inside the span of an always-live variable several layers use (when asked).

        A wrapped head is on IPU 0: a variable it shares with layer ``a``
        keeps layers ``0..a`` on IPU 0.
        """
        if not keep_shared_together:
            return frozenset()
        forbidden: set[int] = set()
        for a, b in self.facts.boundaries.always_live_spans:
            if self._wraps and b == self.facts.head_layer:
                forbidden.update(range(0, a))
            else:
                forbidden.update(range(a, b))
        return frozenset(forbidden)

    # -- per-tile figures ---------------------------------------------------------

    def per_tile(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(total per tile, one stash entry per tile) of the range, incrementally; None if over the limit."""
        return self._range(i, j)

    def stage_ops(self, i: int, j: int) -> np.ndarray:
        """Operations of the range's IPU (a wrapped head's with the range at position 0)."""
        positions = self.op_positions()
        return np.flatnonzero((positions >= i) & (positions <= j))

    def op_positions(self) -> np.ndarray:
        """Per operation, the first layer of a range whose IPU holds it: range ``i..j`` holds those from ``i`` to ``j``.

        Its own layer, but 0 for the operations without one (they go with
        the first stage) and for a wrapped head's (with the range at position
        0; the head is no layer of the table).
        """
        if self._positions is None:
            facts = self.facts
            positions = np.maximum(facts.layer_of_op, 0)
            if self._wraps:
                positions[facts.layer_of_op == facts.head_layer] = 0
            self._positions = positions
        return self._positions

    def stash_entry(self, i: int, j: int) -> np.ndarray | None:
        """One stash entry per tile of the range's own operations (no wrapped head's), when the table has it.

        The same figure as :func:`popliner.memory.stages.stash_entry_per_tile` of
        :func:`popliner.memory.stages.range_ops` (tests/test_range_paths.py); None in
        inference or for a range not evaluated yet.
        """
        known = self._shared.figures.get((i, j))
        return None if known is None or not self._training else known[1].copy()

    def stage_memory(self, i: int, j: int) -> StageMemory:
        """The direct model's figure of the range (memoised by the facts).

        Its variables peak comes from the running set of the range's layers
        (a few layer additions and one reading of the liveness grid) rather
        than from a sweep over all the range's variable intervals: the same
        figure, to the byte (tests/test_range_paths.py).
        """
        ops = self.stage_ops(i, j)
        wrapped = self._wraps and i == 0  # with the head's operations too
        key = (i, j, wrapped)
        if key in self._shared.staged:
            return stage_memory(self.facts, ops)
        peak = None if wrapped else self._shared.peaks.get((i, j))
        if peak is not None:  # read when the range was evaluated: the peak its figure took, re-run or not
            self._shared.staged.add(key)
            if pipeline_rerun_window(self.facts, ops) is not None:
                return stage_memory(self.facts, ops, rerun_variables=peak)
            return stage_memory(self.facts, ops, variables=peak)
        state = self._shared.running_set()
        if wrapped:
            head = self.facts.head_layer
            state.add(self._shared.layer_parts(head), kept=self._shared.private_variables(head))
        for k in range(i, j + 1):
            state.add(self._shared.layer_parts(k))
        self._shared.staged.add(key)
        rerun_peak = self._rerun_peak(state)  # a re-run set's figure reads no plain peak
        return stage_memory(self.facts, ops, variables=state.variables_peak() if rerun_peak is None else None,
                            rerun_variables=rerun_peak)

    # -- incremental evaluation -----------------------------------------------

    def _range(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        if i not in self._done_from and not (self.lazy and (i, j) in self._ranges):
            self._extend_from(i, j if self.lazy else self.num_layers - 1)
        return self._ranges.get((i, j))

    def _wrapped_range(self, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(total per tile, stash entry per tile) of range ``0..j`` with the wrapped head; None over the limit.

        The total is the model of the union of both stages' operations; the
        stash entry is the range's alone (the head stashes nothing).
        """
        if self._wrapped is None:
            wrapped: dict[int, tuple[np.ndarray, np.ndarray]] = {}
            # The plain ranges first: they give the stash entries and use the shared grid themselves.
            plain = [self._range(0, k) for k in range(self.num_layers)]
            state = self._shared.running_set()
            # The head runs forward and backward back to back: under pipeline recomputation its variables
            # keep their live steps in IPU 0's re-run forward window.
            head = self.facts.head_layer
            state.add(self._shared.layer_parts(head), kept=self._shared.private_variables(head))
            for k, entry in enumerate(plain):
                if entry is None:
                    break  # the range alone is over the limit: with the head too
                check_deadline(self.deadline)
                if self._work is not None:
                    self._work.charge()
                state.add(self._shared.layer_parts(k))
                total = state.total_per_tile(self._rerun_peak(state))
                if int(total.max()) > self.limit:
                    break
                wrapped[k] = (total, entry[1])
            self._wrapped = wrapped  # only once complete: an interrupted pass leaves nothing half-built
        return self._wrapped.get(j)

    def _extend_from(self, i: int, upto: int) -> None:
        """Evaluate ``i..j`` for growing ``j`` up to ``upto`` or until the range overflows the limit."""
        shared = self._shared
        state: RunningStage | None = None
        for j in range(i, upto + 1):
            known = shared.figures.get((i, j))
            if known is None and self._work is not None:
                self._work.charge()  # a range this scenario has no figure of yet: evaluated or taken
            if known is None:
                known = shared.other_figure(i, j)  # another option set's, when the same
            if known is None:
                # One clock reading per layer added: noise next to the per-tile sums below.
                check_deadline(self.deadline)
                if state is None:
                    state = self._running_set(i, j)
                state.add(shared.layer_parts(j))
                window = shared.rerun_window(i, j)  # the set holds layers i..j, no wrapped head
                rerun = None if window is None else state.rerun_variables_peak(window[0])
                peak = state.variables_peak() if rerun is None else rerun
                total = state.total_per_tile(peak)
                shared.peaks[(i, j)] = peak  # stage_memory's, if this range is chosen
                # Same figure as stages.stash_entry_per_tile, from the running set of variables. Taken
                # over the limit too: a table with a higher limit (a best effort) then needs no second
                # reading of this range's total, only the running set to grow it further.
                stash = state.stash_entry() if self._training else np.zeros_like(total)
                known = shared.figures[(i, j)] = (int(total.max()), stash, total)
                shared.keep_figure(i, j, known, peak)
            elif state is not None:
                check_deadline(self.deadline)
                state.add(shared.layer_parts(j))
            worst, stash, total = known
            if worst > self.limit:
                break  # memory only grows with j: no longer range fits either
            self._ranges[(i, j)] = (total, stash)
        else:
            if upto < self.num_layers - 1:  # a lazy read: the row goes on when read further
                self._keep(i, state)
                return
        if state is not None and self._regrow:
            # A table with a higher limit (a best effort) grows the row further from here.
            shared.resume[i] = state
        # Only once the row is complete: a row interrupted by the deadline is extended again when read.
        self._done_from.add(i)

    def _rerun_peak(self, state: RunningStage) -> np.ndarray | None:
        """Under ``--recompute pipeline``, the variables peak of a re-run stage (None: the plain peak).

        The facts say from its operations whether the set is re-run and
        where its backward starts; the running set reads both windows.
        """
        if state.forward_cut is None:
            return None
        rerun = pipeline_rerun_window(self.facts, np.concatenate(state.ops))
        return None if rerun is None else state.rerun_variables_peak(rerun[0])

    def _keep(self, i: int, state: RunningStage | None) -> None:
        """Keep the running set of a row a lazy read stopped, to grow it when the row is read further."""
        if state is not None:
            self._shared.resume[i] = state

    def _running_set(self, i: int, j: int) -> RunningStage:
        """The running set of layers ``i..j-1``: the one a lower limit's table left, else rebuilt."""
        shared = self._shared
        # Taken out while it grows: a row interrupted by the deadline leaves none half-grown behind.
        state = shared.resume.pop(i, None)
        if state is not None and i + len(state.ops) <= j:
            if not state.holds_grids:
                state.restore_grid()  # another set used the grids since: put this one back
        else:
            state = shared.running_set(shared.layer_ops[i:] if self._training else None)
        for k in range(i + len(state.ops), j):  # figures known: grow the running set only
            check_deadline(self.deadline)
            state.add(shared.layer_parts(k))
        return state



#: The tiles of a range that can be its worst at some stash depth: (total, one stash entry) per tile, in bytes
#: (Python integers); () when the range is over its table's limit. :func:`front_memory` reads it at a depth.
Front = tuple[tuple[int, int], ...]


def front_memory(front: Front, extra_stash: int, limit: float) -> float:
    """Worst-tile bytes of a range of ``front`` with ``extra_stash`` (>= 0) stash entries beyond the profile's one:
    the largest ``total + extra_stash * stash`` over its tiles; ``inf`` over ``limit``, or with no front."""
    if not front:
        return math.inf
    if extra_stash < 0:
        raise ValueError(f"extra stash entries {extra_stash}: expected a number >= 0")
    # A plain loop: about twice as fast as max() over a generator (hundreds of thousands of reads).
    worst = front[0][0] + extra_stash * front[0][1]
    for total, stash in front:
        value = total + extra_stash * stash
        if value > worst:
            worst = value
    return worst if worst <= limit else math.inf


def worst_tiles(total: np.ndarray, stash: np.ndarray) -> tuple[tuple[int, int], ...]:
    """(total, stash entry) of the tiles that can be a range's worst at some stash depth, as Python integers.

    A range's memory with ``e >= 0`` extra stash entries is the largest
    ``total + e * stash`` over its tiles. A tile whose total and stash entry
    are both at most another's is never above that one, whatever ``e``: the
    kept tiles are the others, each (total, stash entry) once, by stash entry
    (largest first) and so by total (smallest first). For every ``e`` some
    kept tile is a worst one, so the largest over them is the largest over
    all, to the byte (Python integers: no overflow), and each depth the
    solvers ask about costs a few additions instead of a pass over every tile.

    The last kept tile has the largest total (of those, the largest stash
    entry): only tiles of a larger stash entry can come before it, usually a
    few hundred of the range's tiles. From those, the kept ones are taken
    largest stash entry first (of those, the largest total), each time
    dropping the tiles of no larger total: the few kept tiles cost a few
    passes over fewer and fewer tiles, no sort (a range table reads thousands
    of ranges; numpy calls on small arrays are most of their cost).
    """
    k = int(total.argmax())  # argmax, not max(): a fraction of the call's overhead
    top, low = int(total[k]), int(stash[k])
    inside = stash > low
    totals, stashes = total[inside], stash[inside]
    tied = totals == top
    if tied.any():  # another tile of the largest total has a larger stash entry: the largest of those ends it
        low = int(stashes[tied].max())
        inside = stashes > low
        totals, stashes = totals[inside], stashes[inside]
    kept = []
    while totals.size:
        high = int(stashes[stashes.argmax()])
        first = int(totals[stashes == high].max())
        kept.append((first, high))
        inside = totals > first  # the others are at most this tile in both
        totals, stashes = totals[inside], stashes[inside]
    kept.append((top, low))
    return tuple(kept)


def release(memo: RangeMemo) -> None:
    """Forget what the range tables of a scenario share (its ``memo``), for a caller done with them.

    The running sets kept to grow a row further hold grids of tens of MB;
    a process that tries option set after option set frees each set's at
    once this way, and gives their buffers to the next.
    """
    memo.release()


def transfer_cycles(nbytes: int, bytes_per_cycle: float) -> int:
    """Whole clock cycles to move ``nbytes`` at ``bytes_per_cycle``; refused past :data:`MAX_CYCLES`.

    Within the clock and bandwidth ranges (:mod:`popliner.hardware`) the quotient is finite, but a profile's
    sizes can still make it pass what 64-bit sums hold (a terabyte at 1 kB/s on a 1 THz clock): one line then,
    not an overflow deep in a solver.
    """
    if not nbytes:
        return 0
    cycles = nbytes / bytes_per_cycle
    if not cycles <= MAX_CYCLES:
        raise UsageProblem(
            f"copying {nbytes:,} bytes at {bytes_per_cycle:.3g} bytes per clock cycle takes {cycles:.3g} cycles, "
            f"beyond the {MAX_CYCLES:.3g} popliner counts; raise --link-bandwidth (bytes/s), or check the clock")
    return math.ceil(cycles)
