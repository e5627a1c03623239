"""Training as engineers run it: recomputation, optimizer state, sharding and head placement.

The definitions are in docs/solvers.md ("Training options: exact
definitions"). This module holds the options and what they change, as plain
data: which operations are weight updates or recompute clones, which
variables are optimizer state, which unlayered operations form the head,
and a *what-if profile*: the profile's variables with the bytes and live
steps the options give them. Every change that does not depend on the split
(off-chip state, sharding, ``every-layer`` recomputation) is applied there
once, so the memory engine needs no special case for it; what does depend on
the stage (the stash rule, ``pipeline`` recomputation, re-run cycles) is
described by :class:`TrainingView` for the engine to apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from popliner.errors import UsageProblem
from popliner.ops.layers import LayerAssignment, compile_regex
from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile

__all__ = [
    "DEFAULT_UPDATE_REGEX",
    "HEAD_PLACEMENTS",
    "OPTIMIZER_STATES",
    "RECOMPUTE_MODES",
    "EMBEDDING_GROUP",
    "HEAD_GROUP",
    "TrainingOptions",
    "TrainingView",
    "build_training_view",
    "head_groups",
    "optimizer_state_variables",
    "recompute_operations",
    "update_operations",
]

Recompute = Literal["none", "pipeline", "every-layer", "auto"]
OptimizerState = Literal["on-chip", "off-chip"]
HeadPlacement = Literal["first", "last", "wrap"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "pipeline", "every-layer", "auto")
OPTIMIZER_STATES: tuple[str, ...] = ("on-chip", "off-chip")
HEAD_PLACEMENTS: tuple[str, ...] = ("first", "last", "wrap")
#: Names of weight-update operations (a call site counts when its body matches).
DEFAULT_UPDATE_REGEX = r"(?i)varupdate|updater|sgd|adam|lamb|momentum|optimi[sz]er"
#: Names given to the unlayered groups when they become layers of their own.
EMBEDDING_GROUP = "embedding"
HEAD_GROUP = "head"
#: A tensor written by a PopART recompute clone: ``<id>__re``, then the end or a non-word character.
_RE_TENSOR = re.compile(r"__re(?![A-Za-z0-9_])")


@dataclass(frozen=True)
class TrainingOptions:
    """How the model is trained; the defaults give today's figures."""

    recompute: Recompute = "none"
    optimizer_state: OptimizerState = "on-chip"
    replication_factor: int = 1
    sharded_optimizer_state: bool = False
    head_placement: HeadPlacement = "first"
    update_regex: str = DEFAULT_UPDATE_REGEX
    optimizer_state_regex: str | None = None

    def __post_init__(self) -> None:
        _choice("--recompute", self.recompute, RECOMPUTE_MODES)
        _choice("--optimizer-state", self.optimizer_state, OPTIMIZER_STATES)
        _choice("--head-placement", self.head_placement, HEAD_PLACEMENTS)
        if not isinstance(self.replication_factor, int) or self.replication_factor < 1:
            raise UsageProblem(f"--replication-factor {self.replication_factor!r}: expected an integer >= 1")
        if self.sharded_optimizer_state and self.replication_factor < 2:
            raise UsageProblem("--sharded-optimizer-state needs --replication-factor 2 or more")
        compile_regex(self.update_regex, "--update-regex")
        if self.optimizer_state_regex is not None:
            compile_regex(self.optimizer_state_regex, "--optimizer-state-regex")

    @property
    def shard(self) -> int:
        """Divisor of optimizer-state bytes (1 without sharding)."""
        return self.replication_factor if self.sharded_optimizer_state else 1

    def with_recompute(self, mode: Recompute) -> TrainingOptions:
        return replace(self, recompute=mode)

    def as_dict(self) -> dict[str, object]:
        """The options as recorded in the ``--solve`` JSON and the pipeline config."""
        return {
            "recompute": self.recompute,
            "optimizer_state": self.optimizer_state,
            "replication_factor": self.replication_factor,
            "sharded_optimizer_state": self.sharded_optimizer_state,
            "head_placement": self.head_placement,
        }


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageProblem(f"{flag} {value!r}: expected one of {', '.join(allowed)}")


# -- operations -------------------------------------------------------------------


def _called_op(profile: Profile, ops: OperationTable, op: int) -> int:
    """The operation a call site calls: the owner of the first attributed program below its programs."""
    progs = profile.programs
    stack = [int(c) for p in ops.programs_of(op).tolist() for c in progs.children(p).tolist()]
    seen: set[int] = set()
    while stack:
        p = stack.pop(0)
        if p in seen:
            continue
        seen.add(p)
        owner = int(ops.op_of_program[p])
        if owner >= 0 and owner != op:
            return owner
        stack.extend(int(c) for c in progs.children(p).tolist())
    return -1


def update_operations(profile: Profile, ops: OperationTable, update_regex: str = DEFAULT_UPDATE_REGEX) -> np.ndarray:
    """Bool per operation: a weight update (by name, or a call site whose body is one)."""
    regex = compile_regex(update_regex, "--update-regex")
    named = np.array([bool(regex.search(n)) for n in ops.names], bool)
    out = named.copy()
    for op in np.flatnonzero(ops.is_call & ~named).tolist():
        body = _called_op(profile, ops, op)
        out[op] = body >= 0 and bool(named[body])
    return np.asarray(out, bool)


def optimizer_state_variables(
    profile: Profile, ops: OperationTable, always_live_var: np.ndarray, is_update: np.ndarray,
    state_regex: str | None = None,
) -> np.ndarray:
    """Bool per variable: optimizer state (see docs/solvers.md)."""
    v = profile.variables
    if state_regex is not None:
        regex = compile_regex(state_regex, "--optimizer-state-regex")
        names = np.array([bool(regex.search(v.name(i))) for i in range(v.count)], bool)
        return np.asarray(names & always_live_var, bool)
    lens = ops.var_ptr[1:] - ops.var_ptr[:-1]
    owner = np.repeat(np.arange(ops.count), lens)
    used = np.zeros(v.count, bool)
    used[ops.var_idx] = True
    by_other = np.zeros(v.count, bool)
    by_other[ops.var_idx[~is_update[owner]]] = True
    return always_live_var & used & ~by_other


def recompute_operations(profile: Profile, ops: OperationTable, backward_named: np.ndarray) -> np.ndarray:
    """Bool per operation: a PopART recompute clone (forward name, writes a ``__re`` tensor)."""
    out = np.zeros(ops.count, bool)
    v = profile.variables
    re_var = np.array([bool(_RE_TENSOR.search(v.name(i))) for i in range(v.count)], bool)
    data = profile.contexts.data
    for op in np.flatnonzero(~backward_named).tolist():
        d = data[int(ops.context[op])] or {}
        outputs = d.get("outputs")
        if isinstance(outputs, list) and outputs:
            out[op] = any(_RE_TENSOR.search(str(name)) for name in outputs)
        else:
            out[op] = bool(re_var[ops.vars_of(op)].any())
    return out


# -- units: layers and the two unlayered groups --------------------------------------------


def _unit_backward_start(unit: np.ndarray, first_step: np.ndarray, backward_named: np.ndarray,
                         num_units: int) -> np.ndarray:
    """First step of each unit's backward part (a large number when it has none)."""
    big = np.iinfo(np.int64).max
    start = np.full(num_units, big, np.int64)
    pick = backward_named & (first_step >= 0) & (unit >= 0)
    np.minimum.at(start, unit[pick], first_step[pick])
    return start


def head_groups(ops: OperationTable, layer_of_op: np.ndarray, num_layers: int, backward_named: np.ndarray,
                is_update: np.ndarray) -> np.ndarray:
    """For each unlayered operation: 0 = embedding, 1 = head (-1 for layered operations).

    The head runs after the last layer's forward part and before its backward
    part; every other unlayered operation belongs to the embedding. Unlayered
    updates of a weight that only the head (not the embedding) uses join the head.
    """
    out = np.where(layer_of_op < 0, 0, -1).astype(np.int64)
    if num_layers == 0:
        return out
    last = num_layers - 1
    first, lstep = ops.first_step, ops.last_step
    mine = layer_of_op == last
    bstart = _unit_backward_start(layer_of_op, first, backward_named, num_layers)[last]
    fwd = mine & (first >= 0) & (first < bstart)
    e = int(lstep[fwd].max()) if fwd.any() else -1
    unl = layer_of_op < 0
    head = unl & (first > e) & (first < bstart)
    out[head] = 1
    # Updates at the end of the step of weights only the head uses.
    head_vars = np.zeros(ops.num_variables, bool)
    emb_vars = np.zeros(ops.num_variables, bool)
    for op in np.flatnonzero(unl & ~is_update).tolist():
        (head_vars if out[op] == 1 else emb_vars)[ops.vars_of(op)] = True
    for op in np.flatnonzero(unl & is_update & ~head).tolist():
        var = ops.vars_of(op)
        if head_vars[var].any() and not emb_vars[var].any():
            out[op] = 1
    return out


def regroup_layers(layers: LayerAssignment, groups: np.ndarray, placement: HeadPlacement) -> LayerAssignment:
    """The layer assignment with the embedding and head as layers of their own (``last``/``wrap``)."""
    if placement == "first":
        return layers
    names = list(layers.names)
    shift = np.where(layers.layer_of_op >= 0, layers.layer_of_op + 1, -1)
    layer_of_op = shift.copy()
    layer_of_op[groups == 0] = 0
    layer_of_op[groups == 1] = len(names) + 1
    notes = tuple(EMBEDDING_GROUP if g == 0 else HEAD_GROUP if g == 1 else n
                  for g, n in zip(groups.tolist(), layers.note))
    return LayerAssignment(layer_of_op, notes, (EMBEDDING_GROUP, *names, HEAD_GROUP))


# -- the what-if view ---------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TrainingView:
    """What the options change, for the engine.

    ``profile`` carries the variables' what-if bytes and live steps.
    ``is_backward`` marks backward operations (recompute clones included).
    ``never_stash`` marks variables the stash entry leaves out (recomputed by
    ``every-layer``); with ``stash_inputs`` the entry also takes variables
    that went live before the stage's forward part (received inputs).
    ``forward_cut`` (``pipeline``) is, per variable, the last step it stays live
    in a stage's forward part, or -1 when it is not cut; ``rerun_cycles`` are
    the re-run cycles each layer adds to a stage's backward (``pipeline``
    leaves the last stage out: see :meth:`stage_rerun_cycles`).
    """

    options: TrainingOptions
    recompute: str  # the mode applied: none, pipeline, every-layer, or "compiled"
    profile: Profile
    layers: LayerAssignment
    is_backward: np.ndarray
    is_update: np.ndarray
    optimizer_state: np.ndarray
    recompute_ops: np.ndarray
    never_stash: np.ndarray
    stash_inputs: bool
    forward_cut: np.ndarray
    rerun_cycles: np.ndarray  # per layer
    notes: tuple[str, ...] = field(default=())

    @property
    def compiled_with_recomputation(self) -> bool:
        return bool(self.recompute_ops.any())

    def stage_rerun_cycles(self, first_layer: int, last_layer: int) -> int:
        """Cycles a stage of layers ``first..last`` adds to its backward for recomputation."""
        if self.recompute == "pipeline" and last_layer == len(self.layers.names) - 1:
            return 0
        return int(self.rerun_cycles[first_layer : last_layer + 1].sum())


def build_training_view(profile: Profile, ops: OperationTable, layers: LayerAssignment, backward_named: np.ndarray,
                        op_cycles: np.ndarray, options: TrainingOptions, training: bool = True) -> TrainingView:
    """Apply the options that do not depend on the split; describe the rest."""
    v = profile.variables
    always = profile.always_live_classes()[v.klass]
    is_update = update_operations(profile, ops, options.update_regex)
    clones = recompute_operations(profile, ops, backward_named) if training else np.zeros(ops.count, bool)
    is_backward = backward_named | clones
    notes: list[str] = []
    recompute: str = options.recompute
    if clones.any():
        if recompute != "none":
            notes.append(f"the profile was compiled with recomputation ({int(clones.sum())} recompute operations); "
                         f"--recompute {recompute} is not applied again")
        recompute = "compiled"
    if not training:
        recompute = "none"
    groups = head_groups(ops, layers.layer_of_op, len(layers.names), is_backward, is_update)
    layers = regroup_layers(layers, groups, options.head_placement)
    state = optimizer_state_variables(profile, ops, always, is_update, options.optimizer_state_regex)

    first, last = _var_first_last(profile)
    nbytes = v.bytes.copy()
    if options.shard > 1:
        nbytes[state] = -(-nbytes[state] // options.shard)
    # Per-variable live intervals, changed where an option says so.
    changed: dict[int, list[tuple[int, int]]] = {}
    if options.optimizer_state == "off-chip" and training:
        for var, steps in _update_steps(ops, is_update, state).items():
            changed[var] = steps
    unit = _unit_of_op(layers.layer_of_op, groups)
    num_units = int(unit.max()) + 1 if unit.size else 0
    bstart = _unit_backward_start(unit, ops.first_step, is_backward, num_units)
    forward_op = (ops.first_step >= 0) & ~is_backward
    forward_op &= ops.first_step < bstart[np.maximum(unit, 0)]
    u = _last_forward_read(ops, forward_op, v.count)
    lo_unit, hi_unit = _unit_span(ops, unit, v.count)
    never_stash = np.zeros(v.count, bool)
    forward_cut = np.full(v.count, -1, np.int64)
    rerun = np.zeros(len(layers.names), np.int64)
    kept = ~always & (u >= 0) & (lo_unit >= 0)
    if recompute == "every-layer":
        r = np.where(lo_unit >= 0, bstart[np.maximum(lo_unit, 0)], -1)
        pick = kept & (lo_unit == hi_unit) & (first <= u) & (r <= last) & (r > u + 1) & ~state
        for var in np.flatnonzero(pick).tolist():
            changed[var] = _cut(profile, var, int(u[var]), int(r[var]))
        never_stash = pick
        owners = np.unique(lo_unit[pick])
        rerun = _forward_cycles_per_layer(layers, unit, owners, forward_op, op_cycles)
    elif recompute == "pipeline":
        pick = kept & (first <= u) & (last > u) & ~state
        forward_cut[pick] = u[pick]
        layer_ids = np.unique(unit[unit >= 0])
        rerun = _forward_cycles_per_layer(layers, unit, layer_ids, forward_op, op_cycles)
    what_if = _with_variables(profile, nbytes, changed)
    return TrainingView(options, recompute, what_if, layers, is_backward, is_update, state, clones, never_stash,
                        recompute in ("pipeline", "every-layer"), forward_cut, rerun, tuple(notes))


def _unit_of_op(layer_of_op: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Layer index per operation, the two unlayered groups numbered after the layers."""
    n = int(layer_of_op.max()) + 1 if layer_of_op.size and layer_of_op.max() >= 0 else 0
    unit = layer_of_op.copy()
    unit[(layer_of_op < 0) & (groups == 0)] = n
    unit[(layer_of_op < 0) & (groups == 1)] = n + 1
    return np.asarray(unit, np.int64)


def _var_first_last(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    p = profile
    nonempty = np.diff(p.class_ptr) > 0
    starts = np.full(p.num_classes, -1, np.int64)
    ends = np.full(p.num_classes, -1, np.int64)
    starts[nonempty] = p.iv_start[p.class_ptr[:-1][nonempty]]
    ends[nonempty] = p.iv_end[p.class_ptr[1:][nonempty] - 1] - 1
    return starts[p.variables.klass], ends[p.variables.klass]


def _last_forward_read(ops: OperationTable, forward_op: np.ndarray, num_vars: int) -> np.ndarray:
    u = np.full(num_vars, -1, np.int64)
    for op in np.flatnonzero(forward_op).tolist():
        var = ops.vars_of(op)
        np.maximum.at(u, var, int(ops.last_step[op]))
    return u


def _unit_span(ops: OperationTable, unit: np.ndarray, num_vars: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.full(num_vars, np.iinfo(np.int64).max, np.int64)
    hi = np.full(num_vars, -1, np.int64)
    lens = ops.var_ptr[1:] - ops.var_ptr[:-1]
    owner_unit = np.repeat(unit, lens)
    keep = owner_unit >= 0
    np.minimum.at(lo, ops.var_idx[keep], owner_unit[keep])
    np.maximum.at(hi, ops.var_idx[keep], owner_unit[keep])
    lo[hi < 0] = -1
    return lo, hi


def _update_steps(ops: OperationTable, is_update: np.ndarray, state: np.ndarray) -> dict[int, list[tuple[int, int]]]:
    """Off chip: each state variable is live at the steps of the updates that use it."""
    steps: dict[int, list[int]] = {}
    for op in np.flatnonzero(is_update & (ops.first_step >= 0)).tolist():
        for var in ops.vars_of(op).tolist():
            if state[var]:
                steps.setdefault(var, []).extend(range(int(ops.first_step[op]), int(ops.last_step[op]) + 1))
    out: dict[int, list[tuple[int, int]]] = {}
    for var in np.flatnonzero(state).tolist():
        out[var] = _runs(sorted(set(steps.get(var, []))))
    return out


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    """Sorted steps as half-open intervals."""
    out: list[tuple[int, int]] = []
    for s in steps:
        if out and out[-1][1] == s:
            out[-1] = (out[-1][0], s + 1)
        else:
            out.append((s, s + 1))
    return out


def _cut(profile: Profile, var: int, u: int, r: int) -> list[tuple[int, int]]:
    """The variable's intervals without the steps strictly between ``u`` and ``r``."""
    c = int(profile.variables.klass[var])
    a, b = int(profile.class_ptr[c]), int(profile.class_ptr[c + 1])
    out: list[tuple[int, int]] = []
    for s, e in zip(profile.iv_start[a:b].tolist(), profile.iv_end[a:b].tolist()):
        for lo, hi in ((s, min(e, u + 1)), (max(s, r), e)):
            if lo < hi:
                out.append((lo, hi))
    return out


def _forward_cycles_per_layer(layers: LayerAssignment, unit: np.ndarray, owners: np.ndarray, forward_op: np.ndarray,
                              op_cycles: np.ndarray) -> np.ndarray:
    """Forward cycles of the given units, per layer of the assignment.

    With ``--head-placement first`` the unlayered groups are no layer of
    their own: their cycles go to the first layer, whose stage holds them.
    """
    out = np.zeros(len(layers.names), np.int64)
    if out.size == 0:
        return out
    mine = forward_op & np.isin(unit, owners)
    target = np.maximum(layers.layer_of_op[mine], 0)
    np.add.at(out, target, op_cycles[mine])
    return out


def _with_variables(profile: Profile, nbytes: np.ndarray, changed: dict[int, list[tuple[int, int]]]) -> Profile:
    """A copy of the profile with new variable bytes and, for ``changed`` ones, their own live intervals."""
    v = profile.variables
    if not changed and np.array_equal(nbytes, v.bytes):
        return profile
    klass = v.klass.copy()
    ptr = [profile.class_ptr]
    starts = [profile.iv_start]
    ends = [profile.iv_end]
    next_class = profile.num_classes
    total = int(profile.class_ptr[-1])
    extra_ptr: list[int] = []
    for var in sorted(changed):
        ivs = changed[var]
        klass[var] = next_class
        next_class += 1
        starts.append(np.array([s for s, _ in ivs], np.int64))
        ends.append(np.array([e for _, e in ivs], np.int64))
        total += len(ivs)
        extra_ptr.append(total)
    class_ptr = np.concatenate((ptr[0], np.array(extra_ptr, np.int64)))
    variables = replace(v, bytes=nbytes.astype(v.bytes.dtype), klass=klass.astype(v.klass.dtype))
    return replace(profile, variables=variables, class_ptr=class_ptr,
                   iv_start=np.concatenate(starts).astype(profile.iv_start.dtype),
                   iv_end=np.concatenate(ends).astype(profile.iv_end.dtype))
