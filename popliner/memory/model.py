"""The per-tile memory of a set of operations (a "stage") on one IPU: the five components (six with the
compiler's other categories, :mod:`popliner.memory.categories`) of the README's 'How the memory model works'.

Every program belongs to exactly one operation, so a set's distinct programs
are the disjoint union of its operations' programs: exchange code, control
code and vertex state add up over operations, vertex code and variables do not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popliner.arrays import gather_csr, sorted_unique
from popliner.memory.categories import CategorySplit, split_categories
from popliner.memory.liveness import group_peak_totals, window_peak
from popliner.memory.types import ComponentBytes, StageMemory
from popliner.ops.operations import OperationTable
from popliner.profile.model import DO_EXCHANGE, Profile

__all__ = ["MemoryModel", "whole_program_memory"]


class MemoryModel:
    """Memory of operation sets of one profile, memoised per set.

    ``counted_vars`` says which operations' variables count: by default those
    with a layer (``layer_of_op >= 0``).
    """

    def __init__(self, profile: Profile, ops: OperationTable, counted_vars: np.ndarray,
                 program_rows: dict[bytes, tuple[np.ndarray, ...]] | None = None) -> None:
        self.profile = profile
        self.ops = ops
        self.counted_vars = np.asarray(counted_vars, bool)
        progs = profile.programs
        self.tiles = profile.tiles
        #: Per program: a leaf (its control code counts), a ``DoExchange`` (its exchange code counts).
        self.leaf = progs.is_leaf()
        self.exchange = progs.type == DO_EXCHANGE
        vt = profile.vertex_types
        #: Code bytes of each vertex type on each tile, int64 [types, tiles].
        self.code_by_type = np.stack([vt.code.dense(t, self.tiles) for t in range(len(vt.names))]) if vt.names else (
            np.zeros((0, self.tiles), np.int64))
        #: The compiler's other categories, shared out over the operations' programs (None: the profile has none).
        self.categories: CategorySplit | None = split_categories(profile, np.flatnonzero(ops.op_of_program >= 0))
        self._memo: dict[bytes, StageMemory] = {}
        #: Per set of operations, every component but its variables: its programs' alone, so the same for every
        #: model of the profile's operations (the option sets change variables only): ``program_rows``, when given,
        #: is the profile's option-free memo of them (a pod plan's option sets often figure the same sets).
        self._program_rows: dict[bytes, tuple[np.ndarray, ...]] = {} if program_rows is None else program_rows

    @property
    def has_other(self) -> bool:
        """Does every figure carry the sixth component, the compiler's other categories?"""
        return self.categories is not None

    # -- one set -------------------------------------------------------------

    def stage(self, op_idx: np.ndarray | Sequence[int], variables: np.ndarray | None = None) -> StageMemory:
        """Per-tile memory of a set of operations (memoised).

        ``variables``, when given, is the set's variables peak per tile as
        another exact path found it (the range table's liveness grid): it is
        used instead of a new sweep if the set is not memoised yet.
        """
        ops = sorted_unique(np.asarray(op_idx, dtype=np.int64).ravel())  # not np.unique: it imports numpy.ma (7 ms)
        key = np.asarray(ops, np.int64).tobytes()  # one type: equal bytes, equal operations
        hit = self._memo.get(key)
        if hit is None:
            hit = StageMemory(np.stack(self._components(ops, variables)))
            self._memo[key] = hit
        return hit

    def with_variables(self, op_idx: np.ndarray | Sequence[int], variables: np.ndarray) -> StageMemory:
        """The set's figure with ``variables`` as its variables peak per tile (not memoised): a stage whose
        variables peak is not the set's plain one (a re-run stage, :func:`popliner.memory.stages.stage_memory`).

        The other components are :meth:`stage`'s, to the byte; the figure's rows keep their type.
        """
        ops = sorted_unique(np.asarray(op_idx, dtype=np.int64).ravel())
        hit = self._memo.get(ops.tobytes())
        rows = hit.per_tile.copy() if hit is not None else np.stack(self._components(ops, np.asarray(variables)))
        rows[0] = variables
        return StageMemory(rows)

    def _components(self, ops: np.ndarray, variables: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        key = np.asarray(ops, np.int64).tobytes()  # one type: equal bytes, equal operations
        rows = self._program_rows.get(key)
        if rows is None:
            p = self.ops.programs_of_set(ops)
            rows = self.program_code(p)
            if self.categories is not None:
                rows = (*rows, self.categories.per_tile(self.categories.units(self.profile, p)))
            for row in rows:
                row.flags.writeable = False  # shared by every model of the profile's operations
            self._program_rows[key] = rows
        return (self.variables(ops) if variables is None else variables, *rows)

    def program_code(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Vertex code, vertex state, exchange code and control code per tile of a set of distinct programs."""
        progs = self.profile.programs
        control = progs.control.sum_rows(p[self.leaf[p]], self.tiles)
        exchange = progs.exchange.sum_rows(p[self.exchange[p]], self.tiles)
        code, state = self._vertex_memory(progs.vertices.runs_of(p))
        return code, state, exchange, control

    def _vertex_memory(self, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        verts = self.profile.programs.vertices
        sizes = self.profile.vertex_types.size
        if runs.size == 0:
            zero = np.zeros(self.tiles, np.int64)
            return zero, zero.copy()
        assert verts.key is not None  # the loader always keys vertex counts by type
        vtype = verts.key[runs].astype(np.int64)
        state = verts.sum_runs(runs, self.tiles, weights=sizes[vtype])
        # Presence of each type on each tile: a difference array per type.
        width = self.tiles + 1
        diff = np.zeros(len(sizes) * width, np.int64)
        np.add.at(diff, vtype * width + verts.first[runs], 1)
        np.add.at(diff, vtype * width + verts.stop[runs], -1)
        present = np.cumsum(diff.reshape(len(sizes), width), axis=1)[:, : self.tiles] > 0
        code = (self.code_by_type * present).sum(axis=0)
        return code, state

    def window(self, ops: np.ndarray) -> tuple[int, int]:
        """First and last step of the set (``(0, -1)`` when it runs at no step)."""
        first = self.ops.first_step[ops]
        first = first[first >= 0]
        if first.size == 0:
            return 0, -1
        return int(first.min()), int(self.ops.last_step[ops].max())

    def counted_variables(self, ops: np.ndarray) -> np.ndarray:
        return self.ops.vars_of_set(ops[self.counted_vars[ops]])

    def variables(self, ops: np.ndarray) -> np.ndarray:
        lo, hi = self.window(ops)
        return window_peak(self.profile, self.counted_variables(ops), lo, hi)

    # -- many sets at once ----------------------------------------------------

    def per_operation_totals(self) -> list[ComponentBytes]:
        """Each operation alone, every component summed over tiles."""
        n = self.ops.count
        progs = self.profile.programs
        owner = self.ops.op_of_program
        control = _owner_sum(progs.control.row_totals(), owner, self.leaf, n)
        exchange = _owner_sum(progs.exchange.row_totals(), owner, self.exchange, n)
        state, code = self._per_op_vertex_totals(n)
        variables = self._per_op_variable_totals(n)
        other = self._per_op_other_totals(n)
        return [
            ComponentBytes(int(variables[i]), int(code[i]), int(state[i]), int(exchange[i]), int(control[i]),
                           int(other[i]))
            for i in range(n)
        ]

    def _per_op_other_totals(self, n: int) -> np.ndarray:
        """Each operation's share of the other categories, summed over tiles (the fixed part is no one's).

        The share on a tile is the operation's driver units times the
        category's bytes per unit there; rounded once per operation, not per
        tile, since the row only sums over tiles.
        """
        cats = self.categories
        if cats is None:
            return np.zeros(n, np.int64)
        rate = cats.per_program_rate()
        prefix = np.concatenate((np.zeros((len(rate), 1)), np.cumsum(rate, axis=1)), axis=1)
        progs = self.profile.programs
        owner = self.ops.op_of_program
        total = np.zeros(n, np.float64)
        tables = ((0, progs.vertices, np.ones(len(owner), bool)), (1, progs.control, cats.copies),
                  (2, progs.control, cats.streams), (3, progs.control, cats.leaf))
        for d, table, mask in tables:
            rows = table.run_rows()
            keep = mask[rows] & (owner[rows] >= 0)
            runs = np.flatnonzero(keep)
            share = table.value[runs] * (prefix[d, table.stop[runs]] - prefix[d, table.first[runs]])
            total += np.bincount(owner[rows[runs]], weights=share, minlength=n)
        return np.rint(total).astype(np.int64)

    def _per_op_vertex_totals(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        verts = self.profile.programs.vertices
        if verts.value.size == 0:
            return np.zeros(n, np.int64), np.zeros(n, np.int64)
        run_op = self.ops.op_of_program[verts.run_rows()]
        keep = run_op >= 0
        run_op = run_op[keep]
        assert verts.key is not None  # the loader always keys vertex counts by type
        vtype = verts.key[keep].astype(np.int64)
        first, stop = verts.first[keep].astype(np.int64), verts.stop[keep].astype(np.int64)
        length = stop - first
        sizes = self.profile.vertex_types.size
        state = np.bincount(run_op, weights=verts.value[keep] * length * sizes[vtype], minlength=n)
        # Code: union of each (op, type)'s tile runs, then prefix sums of code.
        group = run_op * len(sizes) + vtype
        m_group, m_first, m_stop = _merge_runs(group, first, stop)
        prefix = np.concatenate((np.zeros((len(sizes), 1), np.int64), np.cumsum(self.code_by_type, axis=1)), axis=1)
        t = m_group % len(sizes)
        code_bytes = prefix[t, m_stop] - prefix[t, m_first]
        code = np.bincount(m_group // len(sizes), weights=code_bytes, minlength=n)
        return state.astype(np.int64), code.astype(np.int64)

    def _per_op_variable_totals(self, n: int) -> np.ndarray:
        totals = np.zeros(n, np.int64)
        counted = np.flatnonzero(self.counted_vars & (self.ops.first_step >= 0))
        # Chunks keep the sweep's sort key in 62 bits and its memory bounded.
        for chunk in np.array_split(counted, max(1, len(counted) // 2048 + 1)):
            if chunk.size == 0:
                continue
            lens = self.ops.var_ptr[chunk + 1] - self.ops.var_ptr[chunk]
            group = np.repeat(np.arange(len(chunk)), lens)
            var_idx = gather_csr(self.ops.var_ptr, self.ops.var_idx, chunk)
            totals[chunk] = group_peak_totals(self.profile, group, var_idx, self.ops.first_step[chunk],
                                              self.ops.last_step[chunk])
        return totals


def whole_program_memory(profile: Profile, ops: OperationTable) -> StageMemory:
    """Every operation with every one of its variables: the whole single-IPU program, per tile.

    Unlike a stage's figure, the variables of operations without a layer
    count too, so it compares with the profile's own totals.
    """
    return MemoryModel(profile, ops, np.ones(ops.count, bool)).stage(np.arange(ops.count))


def _owner_sum(per_program: np.ndarray, owner: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    keep = mask & (owner >= 0)
    return np.bincount(owner[keep], weights=per_program[keep], minlength=n).astype(np.int64)


def _merge_runs(group: np.ndarray, first: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of tile runs within each group: disjoint, sorted runs per group."""
    if len(group) == 0:  # e.g. a profile without operations
        return group, first, stop
    order = np.lexsort((first, group))
    group, first, stop = group[order], first[order], stop[order]
    offset = group * (int(stop.max()) + 1)
    reach = np.maximum.accumulate(stop + offset) - offset
    new = np.ones(len(group), bool)
    new[1:] = (group[1:] != group[:-1]) | (first[1:] > reach[:-1])
    ids = np.cumsum(new) - 1
    m_stop = np.zeros(int(ids[-1]) + 1, np.int64)
    np.maximum.at(m_stop, ids, stop)
    return group[new], first[new], m_stop
