"""Operations: the programs of a profile grouped by the debug context that made them.

The rule, each operation's name, steps and order: docs/profile-format.md
('What popliner derives'). Each distinct operation context is one operation,
stored once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from popliner.arrays import gather_csr, overwrite_slices, row_slices, sorted_unique
from popliner.profile.model import Profile

__all__ = ["DEFAULT_OP_LAYERS", "OperationTable", "derive_operations", "reachable_programs"]

DEFAULT_OP_LAYERS: tuple[str, ...] = ("popart", "poptorch", "xla_op", "popxl")


@dataclass(frozen=True, eq=False)
class OperationTable:
    """Distinct operations in order of first step (ties by context id).

    Programs and variables per operation are CSR arrays (``*_ptr`` of length
    ``count + 1``). ``first_step``/``last_step`` are -1 for an operation whose
    programs run at no liveness step.
    """

    names: tuple[str, ...]
    context: np.ndarray  # int64 context index of each operation
    op_type: tuple[str, ...]
    inputs: tuple[tuple[str, ...], ...]
    is_call: np.ndarray  # bool: a call site (its layer may come from the next op)
    is_tensor: np.ndarray  # bool: a tensor initialiser rather than an op (no layer)
    first_step: np.ndarray
    last_step: np.ndarray
    prog_ptr: np.ndarray
    prog_idx: np.ndarray
    var_ptr: np.ndarray
    var_idx: np.ndarray  # int32 while every variable's index fits (half the bytes of the largest column), else int64
    op_of_program: np.ndarray  # int64 per program, -1 unattributed or unreachable
    op_of_step: np.ndarray  # int64 per step, -1 when its program is unattributed
    unattributed_programs: int  # reachable programs with no debug context
    reachable_programs: int
    num_variables: int  # variables in the profile (the range of ``var_idx``)

    @property
    def count(self) -> int:
        return len(self.names)

    def programs_of(self, op: int) -> np.ndarray:
        return self.prog_idx[self.prog_ptr[op] : self.prog_ptr[op + 1]]

    def vars_of(self, op: int) -> np.ndarray:
        return self.var_idx[self.var_ptr[op] : self.var_ptr[op + 1]]

    def programs_of_set(self, ops: np.ndarray | Sequence[int]) -> np.ndarray:
        return gather_csr(self.prog_ptr, self.prog_idx, ops)

    def vars_of_set(self, ops: np.ndarray | Sequence[int]) -> np.ndarray:
        """Distinct variables used by any of ``ops`` (sorted, int64).

        Each operation's list is sorted, so a merge sort of the runs; a mask over every variable made no whole
        command 20 % faster (docs/benchmarks.md, issue 35).
        """
        entries = gather_csr(self.var_ptr, self.var_idx, ops)
        return np.asarray(sorted_unique(entries, nearly_sorted=True), np.int64)

    @cached_property
    def first_user(self) -> np.ndarray:
        """Per variable, the operation that uses it at the earliest step, ties to the lowest index (-1: none runs).

        Kept with the table: it depends on nothing else, and every memory
        facts value of the profile (one per training option set) asks for it.
        int16 while the operations fit, else int32 (a quarter or half of int64's pages to fill).
        """
        # Each operation's rank by (first step, index): the smallest rank among a variable's users is its first.
        order = np.lexsort((np.arange(self.count), self.first_step))
        ran = order[self.first_step[order] >= 0]
        dtype = np.int16 if self.count < 2**15 else np.int32 if self.count < 2**31 else np.int64
        # Plain scatters (np.minimum.at over every entry took 1.5 s at 10x, 13 k operations over 63 M entries; the
        # loop stays under 0.6 s at 300 k operations, docs/benchmarks.md): from the last rank to the first, each
        # operation writes its number over its variables, so the first user's is written last. Every value one
        # scatter writes is the same, so repeated indices cannot matter.
        first = np.full(self.num_variables, -1, dtype)
        last_first = np.asarray(ran[::-1], np.int64)
        overwrite_slices(first, self.var_idx, row_slices(self.var_ptr, last_first, last_first))
        return first


def reachable_programs(profile: Profile) -> np.ndarray:
    """Bool per program: reachable from ``controlPrograms``; each visited once."""
    progs = profile.programs
    seen = np.zeros(progs.count, bool)
    ptr, idx = progs.child_ptr.tolist(), progs.child_idx.tolist()
    stack = [int(p) for p in profile.control_programs]
    while stack:
        p = stack.pop()
        if seen[p]:
            continue
        seen[p] = True
        stack.extend(c for c in idx[ptr[p] : ptr[p + 1]] if not seen[c])
    return seen


def _operation_context(profile: Profile, op_layers: frozenset[str]) -> np.ndarray:
    """For every debug context, the context index of its operation."""
    ctx = profile.contexts
    parent = ctx.parent.tolist()
    layer = ctx.layer
    result = [-2] * ctx.count  # -2 = not computed yet
    for start in range(ctx.count):
        path = []
        node = start
        found = -1
        while node != -1:
            if result[node] != -2:
                found = result[node]
                break
            path.append(node)
            if layer[node] in op_layers:
                found = node
                break
            node = parent[node]
        if found == -1:
            # No operation layer on the way up to a root (path[-1]): the outermost ancestor is the op.
            found = path[-1]
        for n in path:
            # Nodes below the op context share its answer; the op context itself
            # maps to itself by the loop above.
            result[n] = found
    return np.asarray(result, dtype=np.int64)


#: What an operation's description takes from the nearest context (itself first, then up) that gives it.
_NEAREST: tuple[tuple[str, ...], ...] = (("opName", "op_name"), ("opType", "op_type"), ("inputs",), ("tensorId",),
                                         ("instanceId",))


def _nearest_data(profile: Profile, contexts: Sequence[int]) -> dict[int, dict[str, Any]]:
    """For each of ``contexts``, the nearest non-empty value of each :data:`_NEAREST` group on its chain.

    Memoised along the chains, so that every context is looked at once: a
    walk to the root per operation took quadratic time on a long chain of
    operation contexts (20,000 in one chain: 21 s).
    """
    ctx = profile.contexts
    parent = ctx.parent.tolist()
    memo: dict[int, dict[str, Any]] = {}
    for c in contexts:
        path = []
        node = c
        while node != -1 and node not in memo:
            path.append(node)
            node = parent[node]
        found = memo[node] if node != -1 else {}
        for n in reversed(path):  # from the top down: a nearer context overrides
            d = ctx.data[n]
            if d:
                own = {}
                for keys in _NEAREST:
                    value = next((d.get(k) for k in keys if d.get(k) not in (None, "")), None)
                    if value is not None:
                        own[keys[0]] = value
                if own:
                    found = {**found, **own}
            memo[n] = found
    return memo


def _describe(profile: Profile, c: int, nearest: dict[str, Any]) -> tuple[str, str, tuple[str, ...], bool, bool]:
    """Name, op type, inputs, is-call, is-tensor of the operation at context ``c`` (``nearest``: its chain's data)."""
    name = nearest.get("opName")
    name = str(name) if name is not None else profile.contexts.name[c]
    op_type = str(nearest.get("opType") or "")
    inputs_raw = nearest.get("inputs")
    inputs = tuple(str(s) for s in inputs_raw) if isinstance(inputs_raw, list) else ()
    tensor_id = nearest.get("tensorId")
    instance_id = nearest.get("instanceId")
    is_call = name == "Call" or op_type == "Call" or name.startswith("Call(")
    is_tensor = False
    if name in ("", "Call") and tensor_id is not None:
        name, is_tensor = f"Tensor/{tensor_id}", True
    elif name in ("", "Call") and instance_id is not None:
        name, is_call = f"Call({instance_id})", True
    elif name == "":
        name = "Anonymous"
    return name, op_type, inputs, is_call, is_tensor


def derive_operations(profile: Profile, op_layers: Sequence[str] = DEFAULT_OP_LAYERS) -> OperationTable:
    """Walk the program tree and attribute every reachable program to an operation."""
    progs = profile.programs
    reach = reachable_programs(profile)
    op_ctx_of_ctx = _operation_context(profile, frozenset(op_layers))
    prog_ctx = progs.context
    attributed = reach & (prog_ctx >= 0)
    # One spare slot (-1) so that a profile with no debug contexts at all indexes something (then masked).
    lookup = np.append(op_ctx_of_ctx, -1)
    prog_op_ctx = np.where(attributed, lookup[np.where(prog_ctx >= 0, prog_ctx, -1)], -1)

    op_contexts = np.unique(prog_op_ctx[prog_op_ctx >= 0])
    # Temporary op numbering by context index, re-ordered by first step below.
    tmp_of_ctx = np.full(profile.contexts.count + 1, -1, np.int64)  # the spare slot again
    tmp_of_ctx[op_contexts] = np.arange(len(op_contexts))
    tmp_of_prog = tmp_of_ctx[prog_op_ctx]  # -1 picks the spare slot

    n = len(op_contexts)
    tmp_of_step = tmp_of_prog[profile.steps] if profile.num_steps else np.zeros(0, np.int64)
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    last = np.full(n, -1, np.int64)
    has = tmp_of_step >= 0
    step_idx = np.arange(profile.num_steps, dtype=np.int64)
    np.minimum.at(first, tmp_of_step[has], step_idx[has])
    np.maximum.at(last, tmp_of_step[has], step_idx[has])
    first[last < 0] = -1

    # Order: by first step, operations without steps last; ties by context id.
    no_step = first < 0
    order = np.lexsort((profile.contexts.ids[op_contexts], first, no_step))
    # One spare slot: with no operations at all the lookups below still index something (then masked).
    new_of_tmp = np.full(n + 1, -1, np.int64)
    new_of_tmp[order] = np.arange(n)
    op_of_program = np.where(tmp_of_prog >= 0, new_of_tmp[np.maximum(tmp_of_prog, 0)], -1)
    op_of_step = np.where(tmp_of_step >= 0, new_of_tmp[np.maximum(tmp_of_step, 0)], -1)

    prog_ptr, prog_idx = _csr_by_owner(op_of_program, n)
    var_ptr, var_idx = _op_variables(profile, op_of_program, n)
    ordered = op_contexts[order].tolist()
    nearest = _nearest_data(profile, ordered)
    described = [_describe(profile, c, nearest[c]) for c in ordered]
    return OperationTable(
        names=tuple(d[0] for d in described),
        context=op_contexts[order],
        op_type=tuple(d[1] for d in described),
        inputs=tuple(d[2] for d in described),
        is_call=np.array([d[3] for d in described], bool),
        is_tensor=np.array([d[4] for d in described], bool),
        first_step=first[order],
        last_step=last[order],
        prog_ptr=prog_ptr,
        prog_idx=prog_idx,
        var_ptr=var_ptr,
        var_idx=var_idx,
        op_of_program=op_of_program,
        op_of_step=op_of_step,
        unattributed_programs=int((reach & (prog_ctx < 0)).sum()),
        reachable_programs=int(reach.sum()),
        num_variables=profile.variables.count,
    )


def _csr_by_owner(owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    items = np.flatnonzero(owner >= 0)
    order = np.argsort(owner[items], kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner[items], minlength=n), out=ptr[1:])
    return ptr, items[order].astype(np.int64)


def _op_variables(profile: Profile, op_of_program: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct variables per operation: the union of its programs' ``vars``."""
    progs = profile.programs
    lens = np.diff(progs.var_ptr)
    owner = np.repeat(op_of_program, lens)
    var = progs.var_idx
    if not bool(owner.min(initial=0) >= 0):  # some programs belong to no operation
        keep = owner >= 0
        owner, var = owner[keep], var[keep]
    count = profile.variables.count
    index = np.int32 if count <= 2**31 else np.int64  # the variables' indices, 0 to count - 1
    if var.size == 0:
        return np.zeros(n + 1, np.int64), np.zeros(0, index)
    # Programs list their variables in order and an operation's programs mostly
    # follow each other, so the keys come nearly sorted (the merge sort's best case).
    # The keys are built and sorted in place: fresh arrays of this size cost page faults.
    key = owner
    key *= count
    key += var
    key.sort(kind="stable")
    repeats = key[1:] == key[:-1]
    if repeats.any():
        keep = np.ones(len(key), bool)
        keep[1:] = ~repeats
        key = key[keep]
    del repeats
    # Operation k's keys lie in [k * count, (k + 1) * count): cut at those bounds
    # rather than dividing every key.
    ptr: np.ndarray = np.searchsorted(key, np.arange(n + 1, dtype=np.int64) * count).astype(np.int64)
    for k in np.flatnonzero(np.diff(ptr)).tolist():
        key[ptr[k] : ptr[k + 1]] -= k * count
    return ptr, key.astype(index, copy=False)
