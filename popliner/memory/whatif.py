"""The what-if rewrite: the profile's variables with the bytes and live steps the training options give them.

Every option that does not depend on the split is applied here, once, to a
copy of the profile (docs/solvers.md, "Training options: exact
definitions"): sharded optimizer state is divided over the replicas,
off-chip optimizer state is live only around its update, and
``every-layer`` recomputation frees each recomputed activation between its
last forward read and its layer's backward part. ``pipeline``
recomputation depends on the stage, so it is only described (``forward_cut``)
for the figures to apply. :mod:`popliner.memory.training` decides which
variables and operations each rule touches; this module rewrites.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from popliner.arrays import content_key, expand_ranges, rank_by_table, widen_span
from popliner.memory.boundaries import counted_layer_span
from popliner.memory.liveness import class_steps
from popliner.ops.operations import OperationTable
from popliner.ops.roles import unit_backward_start
from popliner.profile.model import Profile
from popliner.regexes import compile_bounded

__all__ = ["PROFILED", "Delta", "Roles", "Spread", "WhatIf", "rewrite", "roles_key", "variable_roles",
           "with_live_steps"]

#: The key of the profile as loaded (:class:`Delta`): every table without a change has it.
PROFILED = b"as profiled"
#: A step after every profile's last (int32 range, so sums stay small).
_NEVER = 2**31 - 1


@dataclass(frozen=True, eq=False)
class Roles:
    """What the rewrite reads of the operations and variables (the training view found them)."""

    always_live: np.ndarray  # bool per variable
    optimizer_state: np.ndarray  # bool per variable
    is_update: np.ndarray  # bool per operation
    is_backward: np.ndarray  # bool per operation (call sites of backward bodies and recompute clones included)
    groups: np.ndarray  # per operation: 0 embedding, 1 head, -1 in its layer (popliner.ops.head.head_groups)
    #: A digest of ``always_live``, ``optimizer_state`` and ``is_update`` (:func:`roles_key`): what the memo keys
    #: of the rewrite read of them, made once with them (they are the same for every option set of a profile).
    key: bytes


def roles_key(always_live: np.ndarray, optimizer_state: np.ndarray, is_update: np.ndarray) -> bytes:
    """:attr:`Roles.key`: a digest of the roles every option set of a profile shares."""
    return content_key(b"", *(np.asarray(a, bool) for a in (always_live, optimizer_state, is_update)))


@dataclass(frozen=True, eq=False)
class Delta:
    """What a what-if (or forward-cut) profile changes of the profile as loaded: the variables whose class or bytes
    differ, flagged (read only), and a key that only equal variable tables share.

    The key says how the table was made (the memo keys of the options and cuts that made it), not what it holds:
    no digest of millions of changed variables per option set. Every table without a change has the same key.
    """

    changed: np.ndarray  # bool per variable
    key: bytes

    @classmethod
    def of(cls, changed: np.ndarray, key: bytes) -> Delta:
        """The delta of ``changed`` made as ``key`` says (a change of nothing: the profile's own key)."""
        changed.flags.writeable = False
        return cls(changed, key if changed.any() else PROFILED)


@dataclass(frozen=True, eq=False)
class WhatIf:
    """The rewritten profile, and what a stage's figures still apply (see TrainingView)."""

    profile: Profile
    delta: Delta  # what the profile changes of the one given
    never_stash: np.ndarray  # bool per variable: recomputed by every-layer, never in a stash entry
    forward_cut: Spread  # pipeline: the cut variables, each live in a stage's forward part from step lo to hi only
    rerun_ops: np.ndarray  # bool per operation: forward work a recomputing stage runs again
    forward_cut_key: bytes  # a digest of forward_cut's values (made from the cut variables and steps alone)


def variable_roles(
    profile: Profile, ops: OperationTable, always_live_var: np.ndarray, is_update: np.ndarray,
    is_backward: np.ndarray, state_regex: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(optimizer state, weights): bool per variable (see docs/solvers.md).

    Optimizer state is always live and used, and only by weight updates (``state_regex``: named by it instead, and
    always live); a weight is always live, no state, and used both by a weight update and by a forward operation
    (neither an update nor ``is_backward``): its gradient is all-reduced (:class:`popliner.pod.search.TrafficTable`).
    """
    v = profile.variables
    is_update = np.asarray(is_update, bool)
    # Each operation marks its variables in the mask of its kind (update, forward, other): plain scatters of True
    # (63 M entries at 10x in 0.2 s, where counting every entry took 0.45-0.7 s; docs/benchmarks.md), one pass
    # over the entries for both roles.
    kind = np.where(is_update, 0, np.where(np.asarray(is_backward, bool), 2, 1))
    users = [np.zeros(v.count, bool) for _ in range(3)]
    entries = _entries(ops)
    for op, k in enumerate(kind.tolist()):
        users[k][entries(op)] = True
    by_update, by_forward, by_other = users
    if state_regex is not None:
        regex = compile_bounded(state_regex, "--optimizer-state-regex or training.optimizer_state_regex")
        names = np.array([bool(regex.search(v.name(i))) for i in range(v.count)], bool)
        state = np.asarray(names & always_live_var, bool)
    else:
        # Used, and only by updates: all its uses are update uses.
        state = np.asarray(always_live_var & by_update & ~by_forward & ~by_other, bool)
    return state, np.asarray(always_live_var & ~state & by_update & by_forward, bool)


def rewrite(profile: Profile, ops: OperationTable, layer_of_op: np.ndarray, num_layers: int, roles: Roles,
            shard: int, off_chip: bool, recompute: str, memo: dict[bytes, Any] | None,
            counted: np.ndarray, core: np.ndarray | None = None) -> WhatIf:
    """Apply sharding (``shard`` replicas), off-chip state and ``recompute`` to the profile's variables.

    ``memo``: kept across calls on the same profile and operations (several
    option sets), so that what the recomputation modes read of the layers is
    worked out once per layering; ``counted``: the operations whose variables count, and ``core``: the layering's
    core (:func:`popliner.memory.boundaries.counted_layer_span`, which the modes start from).
    """
    v = profile.variables
    nbytes = v.bytes
    resized = _constant_column(memo, v.count, np.bool_, False)  # the variables whose bytes change
    if shard > 1:
        nbytes = v.bytes.copy()
        nbytes[roles.optimizer_state] = -(-nbytes[roles.optimizer_state] // shard)
        resized = nbytes != v.bytes
    # Steps and unit numbers in int32 when they fit (always, in practice): half the pages to fill.
    steps = _step_dtype(profile.num_steps)
    window = Spread.none()  # off chip: the state keeps only its steps lo..hi
    # The state's window reads the updates and the state; the what-if profile those, the sharding and
    # (every-layer only) the cuts, which read the layering (see _recompute_cuts).
    if off_chip:
        window_key = b"offchip" + roles.key + np.dtype(steps).str.encode()
        found = memo.get(window_key) if memo is not None else None
        if found is None:
            found = _off_chip_window(ops, roles, v.count, steps, window_key)
            if memo is not None:
                memo[window_key] = found  # read only from here on
        window = found
    cuts = _Cuts(Spread.none(), _constant_column(memo, v.count, np.bool_, False), Spread.none(),
                 np.zeros(ops.count, bool), b"none")
    key = b"whatif" + repr((shard, off_chip, recompute == "every-layer")).encode() + roles.key
    if recompute in ("every-layer", "pipeline"):
        # The cuts read the layering and the roles (not where the state lives): one per mode and layering, kept.
        cuts_key, cuts = _recompute_cuts(profile, ops, layer_of_op, num_layers, roles, recompute, steps, memo,
                                         counted, core)
        if recompute == "every-layer":
            key = b"whatif-cuts" + cuts_key + key
    # The memo key says all the what-if profile is made from: its delta's key.
    what_if: tuple[Profile, Delta] | None = memo.get(key) if memo is not None else None
    if what_if is None:
        made, changed = with_live_steps(profile, nbytes, cuts.cut, window, resized, memo, PROFILED)
        what_if = (made, Delta.of(changed, key))
        if memo is not None:
            if recompute == "every-layer":
                # One layering's every-layer what-if profile at a time (the planner goes through the head placements
                # in turn): tens of MB each. The cuts they are made from stay for every layering (_recompute_cuts).
                for old in [k for k in memo if k.startswith(b"whatif-cuts")]:
                    del memo[old]
            memo[key] = what_if
    return WhatIf(*what_if, cuts.never_stash, cuts.forward_cut, cuts.rerun_ops, cuts.forward_cut_key)


def _constant_column(memo: dict[bytes, Any] | None, count: int, dtype: type[np.generic], value: int) -> np.ndarray:
    """A read-only column of ``count`` times ``value``: one per plan in ``memo`` (its option sets share it; a
    fill of tens of MB each), else made here."""
    key = b"constant-column:" + repr((count, np.dtype(dtype).str, value)).encode()
    found: np.ndarray | None = memo.get(key) if memo is not None else None
    if found is None:
        found = np.full(count, value, dtype)
        found.flags.writeable = False
        if memo is not None:
            memo[key] = found
    return found


def _cuts_key(layer_of_op: np.ndarray, num_layers: int, roles: Roles, steps: type[np.signedinteger]) -> bytes:
    """What :func:`_recompute_cuts`'s spans read besides the profile and the operations: the layering (a digest)."""
    return content_key(b"", np.asarray(layer_of_op, np.int64), np.asarray(roles.groups, np.int64),
                       np.asarray(roles.is_backward, bool), str((num_layers, np.dtype(steps).str)).encode())


@dataclass(frozen=True, eq=False)
class Spread:
    """Two steps (``lo``, ``hi``) for each of some variables (``at``, distinct): what a memo keeps, and what
    :func:`with_live_steps` reads.

    A plan keeps one per option kind for the next option sets; columns over
    every variable would hold tens of MB that a single solve then pages in
    again for its layer parts.
    """

    at: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    #: What the three columns are made from (a memo key, or a digest of their values): equal keys, equal columns,
    #: for the variables of one profile (what :func:`with_live_steps` finds a ranking of rows again by).
    key: bytes

    @classmethod
    def none(cls) -> Spread:
        empty = np.zeros(0, np.int64)
        return cls(empty, empty, empty, b"none")


def _off_chip_window(ops: OperationTable, roles: Roles, count: int, steps: type[np.signedinteger],
                     key: bytes) -> Spread:
    """(keep_lo, keep_hi): optimizer state live only from its first update step to its last (never without one);
    ``key``: what it is made from (the roles' and the steps' type)."""
    state = np.flatnonzero(roles.optimizer_state)  # once: a mask over every variable costs a pass per use
    lo, hi = _update_window(ops, roles.is_update, count, steps)
    state_hi = hi[state]
    return Spread(state, np.where(state_hi >= 0, lo[state], _NEVER).astype(steps), state_hi.astype(steps), key)


@dataclass(frozen=True, eq=False)
class _Cuts:
    cut: Spread  # every-layer: the cut variables, each losing the steps strictly between lo and hi
    never_stash: np.ndarray
    forward_cut: Spread  # pipeline: the cut variables, each keeping steps lo..hi in a stage's forward part
    rerun_ops: np.ndarray
    forward_cut_key: bytes


def _recompute_cuts(profile: Profile, ops: OperationTable, layer_of_op: np.ndarray, num_layers: int, roles: Roles,
                    recompute: str, steps: type[np.signedinteger], memo: dict[bytes, Any] | None,
                    counted: np.ndarray, core: np.ndarray | None) -> tuple[bytes, _Cuts]:
    """What ``every-layer`` (cut live steps) or ``pipeline`` (a forward cut per stage) recomputes, and the key it is
    memoised by (the mode, the layering and the roles).

    ``counted``: the operations whose variables count (the figures do not depend on it: the unit span starts from
    their layer span, which the boundaries read too), ``core``: the layering's core (that span's). The memo keeps
    what the mode picks, compactly, for every layering and optimizer state (a plan's option sets come back to each);
    every-layer's never-stashed column is made again from it for each option set.
    """
    count = profile.variables.count
    # The layering, the backward operations and the roles; the same for both modes and wherever the optimizer
    # state lives.
    key = b"cuts" + _cuts_key(layer_of_op, num_layers, roles, steps) + roles.key
    mode_key = b"cuts-" + recompute.encode() + key
    made = memo.get(mode_key) if memo is not None else None
    if made is None:
        made = _mode_cuts(_unit_reads(profile, ops, layer_of_op, num_layers, roles, steps, memo, counted, core,
                                      key), profile, recompute, steps)
        if memo is not None:
            memo[mode_key] = made  # read only from here on
            if all(b"cuts-" + mode.encode() + key in memo for mode in ("every-layer", "pipeline")):
                memo.pop(key, None)  # both modes made: what they read of the layering goes (tens of MB)
    at, lo, hi, rerun, cut_key = made
    if recompute == "every-layer":
        pick = np.zeros(count, bool)
        pick[at] = True
        return mode_key, _Cuts(Spread(at, lo, hi, mode_key), pick, Spread.none(), rerun, cut_key)
    return mode_key, _Cuts(Spread.none(), _constant_column(memo, count, np.bool_, False), Spread(at, lo, hi, cut_key),
                           rerun, cut_key)


def _unit_reads(profile: Profile, ops: OperationTable, layer_of_op: np.ndarray, num_layers: int, roles: Roles,
                steps: type[np.signedinteger], memo: dict[bytes, Any] | None, counted: np.ndarray,
                core: np.ndarray | None, key: bytes) -> tuple[np.ndarray, ...]:
    """What both recomputation modes read of one layering (memoised by ``key``): each operation's unit, each unit's
    backward start, the forward operations, each class's last step, and the variables ``pipeline`` cuts (of those
    a forward operation reads, neither always live nor optimizer state, the ones live before and after their last
    forward read), with their last forward read and their unit (-1 when several units use them).

    ``every-layer`` cuts some of those same variables (one unit's, live up to its backward start): it picks them
    from these, so each mode's test reads only the variables it may cut."""
    found: tuple[np.ndarray, ...] | None = memo.get(key) if memo is not None else None
    if found is None:
        unit = _unit_of_op(layer_of_op, roles.groups, num_layers)
        bstart = unit_backward_start(unit, ops.first_step, roles.is_backward, num_layers + 2)
        forward_op = (ops.first_step >= 0) & ~roles.is_backward
        forward_op &= ops.first_step < bstart[np.maximum(unit, 0)]
        # The counted layer span with the other operations of a unit taken in (the same units: layers, then groups).
        layered = counted_layer_span(ops, layer_of_op, counted, num_layers, memo, core)
        lo_unit, hi_unit = widen_span(layered, ops.var_ptr, ops.var_idx,
                                      np.flatnonzero((unit >= 0) & ~(counted & (layer_of_op >= 0))), unit)
        at, u_at = _pipeline_cut(profile, ops, forward_op, unit >= 0, hi_unit, roles, steps, memo)
        lo_at, hi_at = lo_unit[at], hi_unit[at]
        last = class_steps(profile, steps)[1]
        found = (unit, bstart, forward_op, last, at, u_at, np.where(lo_at == hi_at, lo_at, -1))
        for column in found:
            column.flags.writeable = False  # shared by the modes and option sets of the layering
        if memo is not None:
            # Kept for every layering (a plan's head placements give two or three) until both modes are made
            # (_recompute_cuts).
            memo[key] = found  # read only from here on
    return found


def _pipeline_cut(profile: Profile, ops: OperationTable, forward_op: np.ndarray, in_unit: np.ndarray,
                  hi_unit: np.ndarray, roles: Roles, steps: type[np.signedinteger],
                  memo: dict[bytes, Any] | None) -> tuple[np.ndarray, np.ndarray]:
    """The variables ``pipeline`` cuts, in order, and their last forward read: of the variables a forward operation
    reads, neither always live nor optimizer state, the ones live before and after their last forward read.

    Only variables an operation of a unit uses (``in_unit``, per operation) are cut: those with ``hi_unit`` (their
    unit span's last unit) set. That reads no unit number, so the head placements' layerings, which number some
    operations' units differently but give the same forward operations and units, share it (``memo``): a pass over
    the forward operations' variables and tests over every variable, once per plan.
    """
    key = content_key(b"pipeline-cut", np.asarray(forward_op, bool), np.asarray(in_unit, bool), roles.key,
                      np.dtype(steps).str.encode())
    found: tuple[np.ndarray, np.ndarray] | None = memo.get(key) if memo is not None else None
    if found is None:
        count = profile.variables.count
        u = _last_forward_read(ops, forward_op, count, steps)
        read = (u >= 0) & (hi_unit >= 0) & ~roles.always_live & ~roles.optimizer_state
        read_idx = np.flatnonzero(read).astype(np.int32 if count < 2**31 else np.int64)
        del read
        # Each variable's first and last live steps are its class's: read through the classes where tested.
        first, last = class_steps(profile, steps)
        u_read = u[read_idx]
        cls = profile.variables.klass[read_idx]
        cut = (first[cls] <= u_read) & (last[cls] > u_read)
        found = (read_idx[cut], u_read[cut])
        if memo is not None:
            memo[key] = found  # read only from here on
    return found


def _mode_cuts(found: tuple[np.ndarray, ...], profile: Profile, recompute: str,
               steps: type[np.signedinteger]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bytes]:
    """(variables, lo, hi, rerun operations, forward cut's key) of one mode: ``every-layer``'s cut variables and the
    steps they lose (strictly between lo and hi); ``pipeline``'s forward-cut variables, in order, and the steps they
    keep in a stage's forward part (from 0 to their last forward read): its key digests the variables and reads."""
    # Pipeline's cut variables, their last forward read and their one unit (see _unit_reads).
    unit, bstart, forward_op, class_last, at, u, one_unit = found
    if recompute == "every-layer":
        # Variables of one unit live up to its backward start, which comes after the step after their last forward
        # read: the test on those only (whole columns of int64 steps over millions of variables cost more).
        one = np.flatnonzero(one_unit >= 0)
        near, u_near, lo_near = at[one], u[one], one_unit[one]
        r = bstart[lo_near]  # the unit's backward start
        sel = (r <= class_last[profile.variables.klass[near]]) & (r > u_near + 1)
        # Each layer owning a recomputed variable runs its forward part again.
        made = (near[sel], u_near[sel].astype(steps), r[sel].astype(steps),
                forward_op & np.isin(unit, np.unique(lo_near[sel])))
    else:
        made = (at, np.zeros(at.size, steps), u, forward_op.copy())
    for column in made:
        column.flags.writeable = False  # shared by the option sets of the mode and layering
    cut_key = b"none" if recompute == "every-layer" else content_key(b"cut", made[0], made[2])
    return (*made, cut_key)


def _unit_of_op(layer_of_op: np.ndarray, groups: np.ndarray, num_layers: int) -> np.ndarray:
    """Layer index per operation, the two unlayered groups numbered after the layers."""
    unit = layer_of_op.copy()
    unit[(layer_of_op < 0) & (groups == 0)] = num_layers
    unit[(layer_of_op < 0) & (groups == 1)] = num_layers + 1
    return np.asarray(unit, np.int64)


def _step_dtype(num_steps: int) -> type[np.signedinteger]:
    """int32 for per-variable steps and unit numbers while they (and the "never" marker) fit, else int64."""
    return np.int32 if num_steps < _NEVER - 1 else np.int64


def _last_forward_read(ops: OperationTable, forward_op: np.ndarray, num_vars: int,
                       dtype: type[np.signedinteger] = np.int64) -> np.ndarray:
    """Per variable: the last step of a forward operation that uses it (-1 when none)."""
    u = np.full(num_vars, -1, dtype)
    picked = np.flatnonzero(forward_op)
    # Plain scatters in order of last step: a later (larger) one overwrites.
    entries = _entries(ops)
    for op in picked[np.argsort(ops.last_step[picked], kind="stable")].tolist():
        u[entries(op)] = int(ops.last_step[op])
    return u


def _entries(ops: OperationTable) -> Callable[[int], np.ndarray]:
    """Each operation's variables as native (intp) indices, for a scatter over them.

    numpy scatters through an int32 index by casting it in small buffers, slower than one cast of the slice
    first (over the 40 M entries of the 120-layer BERT profile: 0.25 -> 0.17 s).
    """
    ptr, idx = ops.var_ptr.tolist(), ops.var_idx
    return lambda op: idx[ptr[op]:ptr[op + 1]].astype(np.intp, copy=False)


def _update_window(ops: OperationTable, is_update: np.ndarray, num_vars: int,
                   dtype: type[np.signedinteger] = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: first and last step of the weight updates that use it (-1 when none)."""
    picked = np.flatnonzero(is_update & (ops.first_step >= 0))
    lo = np.full(num_vars, -1, dtype)
    hi = np.full(num_vars, -1, dtype)
    # Plain scatters, one value each: in order of last step (a later one overwrites hi), and of first step
    # from the last (an earlier one overwrites lo); np.minimum.at and np.maximum.at over every entry took 1.3 s
    # on 30 M entries (docs/benchmarks.md).
    entries = _entries(ops)
    for op in picked[np.argsort(ops.last_step[picked], kind="stable")].tolist():
        hi[entries(op)] = ops.last_step[op]
    for op in picked[np.argsort(ops.first_step[picked], kind="stable")][::-1].tolist():
        lo[entries(op)] = ops.first_step[op]
    return lo, hi


def _changed_intervals(profile: Profile, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(new class, start, end) of every interval of the new classes, by class then start.

    ``rows`` are the distinct (class, cut lo, cut hi, keep lo, keep hi): each
    becomes a new class, its old class's intervals clipped to the kept steps
    with the cut steps taken out.
    """
    cls = rows[:, 0]
    counts = profile.class_ptr[cls + 1] - profile.class_ptr[cls]
    rep = np.repeat(np.arange(len(rows)), counts)
    iv = expand_ranges(profile.class_ptr[cls], counts)
    s = np.maximum(profile.iv_start[iv], rows[rep, 3])
    e = np.minimum(profile.iv_end[iv], rows[rep, 4] + 1)
    # Two pieces per interval: up to the cut's start (inclusive), and from its end.
    starts = np.concatenate((s, np.maximum(s, rows[rep, 2])))
    ends = np.concatenate((np.minimum(e, rows[rep, 1] + 1), e))
    own = np.concatenate((rep, rep))
    keep = starts < ends
    own, starts, ends = own[keep], starts[keep], ends[keep]
    order = np.lexsort((starts, own))
    return own[order], starts[order], ends[order]


def _unique_rows(columns: list[np.ndarray], num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of the columns (class, cut lo, cut hi, keep lo, keep hi) and each row's position among them.

    The rows come back in lexicographic order, as a sort on the five columns gives them, in int64; each distinct
    row as its first occurrence has it.
    """
    # Steps fit in few bits once "never" is mapped to num_steps + 1. Each column's values are replaced by their
    # rank among its distinct values, and the rows ranked a column at a time: the rank of (rank of the row so
    # far, next column's rank) pairs, in lexicographic order. Tables over the ranks, no sort of millions of rows
    # (a few thousand distinct rows among millions of changed variables under every-layer).
    cap = num_steps + 2
    inverse: np.ndarray | None = None
    for k, col in enumerate(columns):
        lo, hi = (int(col.min()), int(col.max())) if col.size else (0, 0)
        if inverse is not None and lo == hi:
            # One value (a mode's rows keep or cut nothing): each pair's rank is the row's rank so far. Two or
            # three of the five columns under every option but off-chip state with every-layer.
            continue
        if k and (lo < 0 or hi > cap):
            col = np.minimum(np.where(col < 0, cap, col), cap)  # "never" markers (and -1) past every step
        rank, distinct = _dense_rank(col)
        inverse = rank if inverse is None else _dense_rank(inverse * distinct + rank)[0]
    assert inverse is not None  # five columns
    count = int(inverse.max(initial=-1)) + 1
    first = np.full(count, inverse.size, np.int64)
    np.minimum.at(first, inverse, np.arange(inverse.size))  # each distinct row's first occurrence
    return np.stack([col[first] for col in columns], axis=1).astype(np.int64), inverse


def _dense_rank(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's rank among the distinct values (int64, 0 for the smallest), and how many distinct values."""
    # In int64: numpy gathers and scatters through int64 indices about twice as fast as through int32 ones.
    values = values.astype(np.int64, copy=False)
    if values.size == 0:
        return values, 0
    # A table over the range, no sort, while the range is not far wider than the values (then a sort is cheaper:
    # the few thousand distinct rows of two kinds of change, :func:`_merged_rows`).
    span = min(1 << 24, max(1 << 16, 8 * values.size))
    ranked = rank_by_table(values, span)
    if ranked is not None:
        return ranked[1], len(ranked[0])
    top = int(values.max())
    # "Never" markers sit far above every step: rank them last, the rest through a dense table.
    rest = values[values != top]
    if rest.size == 0:
        return np.zeros(values.size, np.int64), 1
    lo, hi = int(rest.min()), int(rest.max())
    if hi - lo < span:
        present = np.bincount(rest - lo, minlength=hi - lo + 1) > 0
        rank = np.cumsum(present) - 1
        count = int(present.sum())
        return np.asarray(np.where(values == top, count, rank[np.clip(values - lo, 0, hi - lo)]), np.int64), count + 1
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.asarray(inverse.reshape(-1), np.int64), len(distinct)


def with_live_steps(profile: Profile, nbytes: np.ndarray, cut: Spread, keep: Spread, changed: np.ndarray,
                    memo: dict[bytes, Any] | None, classes: bytes) -> tuple[Profile, np.ndarray]:
    """A copy of the profile with new bytes and new live steps where asked, and the flags of its changed variables.

    A variable of ``cut`` loses the steps strictly between its ``lo`` and
    ``hi``; one of ``keep`` (and not of ``cut``) keeps only the steps
    ``lo..hi``. Variables with the same class and the same change
    share one new class, so the number of classes stays small.

    ``changed`` flags the variables whose class or bytes already differ from
    the profile as loaded (those of ``profile``, and those ``nbytes`` resizes):
    the flags returned add the variables given a new class (read only; a new
    class never is one of the profile as loaded), found without a pass over
    every variable's class.

    ``memo``: the plan's option-free memo, where each kind's rows are ranked once (:func:`_ranked_rows`), found by
    ``classes`` (what the variables' classes are made from, as a :class:`Delta` key says: :data:`PROFILED` for the
    profile as loaded, which is the memo's) and each spread's key.
    """
    v = profile.variables
    if cut.at.size and keep.at.size:
        # Both kinds (every-layer with off-chip state): the cut ones are left out of the kept ones.
        taken = np.zeros(v.count, bool)
        taken[cut.at] = True
        alone = np.flatnonzero(~taken[keep.at])
        if alone.size < keep.at.size:
            keep = Spread(keep.at[alone], keep.lo[alone], keep.hi[alone], content_key(b"without", keep.key, cut.key))
    if cut.at.size + keep.at.size == 0:
        if nbytes is v.bytes or np.array_equal(nbytes, v.bytes):
            return profile, changed
        return replace(profile, variables=v.replace(bytes=nbytes.astype(v.bytes.dtype, copy=False))), changed
    # One row (class, cut lo, cut hi, keep lo, keep hi) per changed variable, the cut ones first. Each kind is
    # ranked on its own, where the other kind's two steps are constant (never cut; kept 0..never): fewer columns
    # to rank than in one table of both, and each kind's ranking is found again by the option sets that make the
    # same change (off-chip state under every recomputation, a layering's cuts on or off chip).
    kinds = [spread.at for spread in (cut, keep) if spread.at.size]
    parts = [_ranked_rows(profile, spread, spread is cut, memo, classes) for spread in (cut, keep) if spread.at.size]
    uniq, inverse = _merged_rows(parts, profile.num_steps)
    own, starts, ends = _changed_intervals(profile, uniq)
    new_counts = np.bincount(own, minlength=len(uniq))
    base = int(profile.class_ptr[-1])
    class_ptr = np.concatenate((profile.class_ptr, base + np.cumsum(new_counts)))
    klass = v.klass.copy()
    changed = changed.copy()
    # Each kind's variables (distinct) take their rows' new classes, in the order of the rows.
    for at, offset in zip(kinds, (0, len(kinds[0]))):
        klass[at] = profile.num_classes + inverse[offset:offset + len(at)]
        changed[at] = True
    variables = v.replace(bytes=nbytes.astype(v.bytes.dtype, copy=False),
                          klass=klass.astype(v.klass.dtype, copy=False))  # both already copies, or unchanged
    made = replace(profile, variables=variables, class_ptr=class_ptr.astype(profile.class_ptr.dtype),
                   iv_start=np.concatenate((profile.iv_start, starts)).astype(profile.iv_start.dtype),
                   iv_end=np.concatenate((profile.iv_end, ends)).astype(profile.iv_end.dtype))
    return made, changed


def _ranked_rows(profile: Profile, spread: Spread, cut: bool, memo: dict[bytes, Any] | None,
                 classes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_unique_rows` of one kind's rows: the variables ``spread.at`` with their class and ``lo``, ``hi`` as the
    cut steps (``cut``) or the kept ones, the other two steps constant.

    Memoised in ``memo`` by what the rows are made from: the spread's key and ``classes`` (what the profile's classes
    are made from, :func:`with_live_steps`): a plan's option sets make the same change again on other what-if
    profiles, millions of rows each, and a key of the rows' values took a digest of tens of MB each time.
    """
    key = content_key(b"live-step-rows", classes, spread.key, repr((cut, profile.num_steps)).encode())
    found: tuple[np.ndarray, np.ndarray] | None = memo.get(key) if memo is not None else None
    if found is None:
        steps = _step_dtype(profile.num_steps)
        at = spread.at
        klass = profile.variables.klass[at]
        lo, hi = spread.lo.astype(steps, copy=False), spread.hi.astype(steps, copy=False)
        never, first = np.full(at.size, _NEVER, steps), np.zeros(at.size, steps)
        uniq, inverse = _unique_rows([klass, lo, hi, first, never] if cut else [klass, never, never, lo, hi],
                                     profile.num_steps)
        found = (uniq, inverse.astype(np.int32 if len(uniq) < 2**31 else np.int64))  # kept: half the bytes
        if memo is not None:
            memo[key] = found  # read only from here on
    return found


def _merged_rows(parts: list[tuple[np.ndarray, np.ndarray]], num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_unique_rows` of the rows of ``parts`` one after another, from each part's own: the distinct rows of
    the parts' distinct rows (a few thousand), each part's rows then numbered through them. A row in several parts
    takes its first part's first occurrence, as in one table (each part's distinct row is its first occurrence)."""
    if len(parts) == 1:
        return parts[0]
    table = np.concatenate([uniq for uniq, _ in parts])
    uniq, position = _unique_rows(list(table.T), num_steps)
    offsets = np.cumsum([0] + [len(u) for u, _ in parts])
    # Each part's rows read its own slice of the positions (a few thousand, in cache): no sum over millions first.
    return uniq, np.concatenate([position[offset:offset + len(u)][inverse]
                                 for offset, (u, inverse) in zip(offsets, parts)])
