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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from popliner.arrays import expand_ranges, gather_csr, rank_by_table
from popliner.errors import UsageProblem
from popliner.layout import EMBEDDING_GROUP, HEAD_GROUP, HEAD_PLACEMENTS, HeadPlacement
from popliner.memory.liveness import variable_steps
from popliner.ops.layers import LayerAssignment, compile_regex
from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile

__all__ = [
    "DEFAULT_UPDATE_REGEX",
    "HEAD_PLACEMENTS",
    "OPTIMIZER_STATES",
    "RECOMPUTE_MODES",
    "RECOMPUTE_REQUESTS",
    "AppliedRecompute",
    "Recompute",
    "RecomputeRequest",
    "EMBEDDING_GROUP",
    "HEAD_GROUP",
    "TrainingOptions",
    "TrainingView",
    "build_training_view",
    "place_unlayered",
    "tied_head",
    "with_live_steps",
    "called_operations",
    "head_groups",
    "optimizer_state_variables",
    "recompute_operations",
    "update_operations",
]

#: The recomputation the library models. ``auto`` is no mode: it is a request that only the
#: planner (:func:`popliner.plan.plan_split`) resolves, to one of these.
Recompute = Literal["none", "pipeline", "every-layer"]
#: What a user may ask for: a mode, or ``auto`` (the least recomputation that fits).
RecomputeRequest = Literal["none", "pipeline", "every-layer", "auto"]
#: The mode an engine applied: the one asked for, or ``compiled`` when the profile already recomputes.
AppliedRecompute = Literal["none", "pipeline", "every-layer", "compiled"]
OptimizerState = Literal["on-chip", "off-chip"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "pipeline", "every-layer")
RECOMPUTE_REQUESTS: tuple[str, ...] = (*RECOMPUTE_MODES, "auto")
OPTIMIZER_STATES: tuple[str, ...] = ("on-chip", "off-chip")
#: Names of weight-update operations (a call site counts when its body matches).
DEFAULT_UPDATE_REGEX = r"(?i)varupdate|updater|sgd|adam|lamb|momentum|optimi[sz]er"
#: A tensor written by a PopART recompute clone: ``<id>__re``, then the end or a non-word character.
#: A step after every profile's last (int32 range, so sums stay small).
_NEVER = 2**31 - 1
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
        if self.recompute == "auto":  # type: ignore[comparison-overlap]  # the type says no; callers may not
            raise UsageProblem("recompute 'auto' is a request, not a mode: the planner resolves it "
                               "(popliner.plan.plan_split with SplitRequest(recompute='auto'), or --recompute auto)")
        _choice("--recompute", self.recompute, RECOMPUTE_MODES)
        _choice("--optimizer-state", self.optimizer_state, OPTIMIZER_STATES)
        _choice("--head-placement", self.head_placement, HEAD_PLACEMENTS)
        if not isinstance(self.replication_factor, int) or self.replication_factor < 1:
            raise UsageProblem(f"--replication-factor {self.replication_factor!r}: expected an integer >= 1")
        if self.sharded_optimizer_state and self.replication_factor < 2:
            raise UsageProblem("--sharded-optimizer-state needs --replication-factor 2 or more")
        compile_regex(self.update_regex, "--update-regex or training.update_regex")
        if self.optimizer_state_regex is not None:
            compile_regex(self.optimizer_state_regex, "--optimizer-state-regex or training.optimizer_state_regex")

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


def called_operations(profile: Profile, ops: OperationTable) -> np.ndarray:
    """Per operation: the operation a call site calls (-1 for other operations)."""
    out = np.full(ops.count, -1, np.int64)
    for op in np.flatnonzero(ops.is_call).tolist():
        out[op] = _called_op(profile, ops, op)
    return out


def _through_calls(named: np.ndarray, called: np.ndarray) -> np.ndarray:
    """``named``, plus every call site whose called operation is named."""
    out = named.copy()
    calls = np.flatnonzero(called >= 0)
    out[calls] |= named[called[calls]]
    return np.asarray(out, bool)


def update_operations(profile: Profile, ops: OperationTable, update_regex: str = DEFAULT_UPDATE_REGEX,
                      called: np.ndarray | None = None) -> np.ndarray:
    """Bool per operation: a weight update (by name, or a call site whose body is one)."""
    regex = compile_regex(update_regex, "--update-regex or training.update_regex")
    named = np.array([bool(regex.search(n)) for n in ops.names], bool)
    return _through_calls(named, called_operations(profile, ops) if called is None else called)


def optimizer_state_variables(
    profile: Profile, ops: OperationTable, always_live_var: np.ndarray, is_update: np.ndarray,
    state_regex: str | None = None,
) -> np.ndarray:
    """Bool per variable: optimizer state (see docs/solvers.md)."""
    v = profile.variables
    if state_regex is not None:
        regex = compile_regex(state_regex, "--optimizer-state-regex or training.optimizer_state_regex")
        names = np.array([bool(regex.search(v.name(i))) for i in range(v.count)], bool)
        return np.asarray(names & always_live_var, bool)
    lens = ops.var_ptr[1:] - ops.var_ptr[:-1]
    # One flag per (operation, variable) entry: a bool repeat, not an owner index per entry.
    by_update = np.repeat(np.asarray(is_update, bool), lens)
    used = np.zeros(v.count, bool)
    used[ops.var_idx] = True
    by_other = np.zeros(v.count, bool)
    by_other[ops.var_idx[~by_update]] = True
    return always_live_var & used & ~by_other


def _recompute_tensor_variables(profile: Profile) -> np.ndarray:
    """Bool per variable: its name holds ``__re`` followed by the end of the name or a non-word character.

    Found once when the profile is loaded (and cached with it): reading every name here cost each solve.
    """
    return profile.variables.recompute_tensor


def recompute_operations(profile: Profile, ops: OperationTable, backward_named: np.ndarray) -> np.ndarray:
    """Bool per operation: a PopART recompute clone (forward name, writes a ``__re`` tensor)."""
    out = np.zeros(ops.count, bool)
    re_var = _recompute_tensor_variables(profile)
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
                is_update: np.ndarray, notes: Sequence[str] | None = None,
                called: np.ndarray | None = None) -> np.ndarray:
    """For each operation: 0 = embedding, 1 = head, -1 = it stays in its layer.

    The head runs after the last layer's forward part and before its backward
    part; every other unlayered operation belongs to the embedding. Unlayered
    updates of a weight that only the head (not the embedding) uses join the head.

    With ``notes`` (how each operation's layer was found) two more rules
    apply, so that the groups hold what an engineer would put there:

    - an operation the ``inputs-layer-0`` rule put in the first layer (the
      word embedding's gather and update, a tied LM head's matmuls) counts as
      unlayered: it joins the head inside the head's window, else the embedding;
    - the window is bounded by the last layer's operations found by ``name``
      (and the call sites of such bodies, through ``called``), and the last
      layer's other operations inside it (found by ``inputs``, e.g. GPT-2's
      ``ln_f``, or by ``call``, e.g. the LM head's serialised matmuls) join the head.

    Without ``notes`` every operation of the last layer bounds the window and none moves.
    """
    loose = layer_of_op < 0
    if notes is not None:
        loose = loose | (np.asarray(notes, dtype=object) == "inputs-layer-0")
    out = np.where(loose, 0, -1).astype(np.int64)
    if num_layers == 0:
        return out
    mine = (layer_of_op == num_layers - 1) & ~loose
    bounds = mine & _found_by_name(layer_of_op, notes, called, num_layers - 1) if notes is not None else mine
    e, s = _head_window(bounds, ops.first_step, ops.last_step, backward_named)
    if e < 0:
        # No operation found by name runs in the layer's forward part: the window would open at the
        # start of the step. All of the layer's operations bound it, and none moves.
        bounds = mine
        e, s = _head_window(bounds, ops.first_step, ops.last_step, backward_named)
    window = (ops.first_step > e) & (ops.first_step < s)
    head = loose & window
    if notes is not None:
        head |= mine & ~bounds & window
    out[head] = 1
    _head_only_updates(ops, out, loose & ~head, is_update)
    return out


def _found_by_name(layer_of_op: np.ndarray, notes: Sequence[str], called: np.ndarray | None, layer: int) -> np.ndarray:
    """Operations of ``layer`` found by their own name, and the call sites of such operations."""
    named = (np.asarray(notes, dtype=object) == "name") & (layer_of_op == layer)
    return named if called is None else _through_calls(named, called)


def _head_window(bounds: np.ndarray, first: np.ndarray, last: np.ndarray,
                 backward_named: np.ndarray) -> tuple[int, int]:
    """(e, s): the last step of the bounding operations' forward part and the first of their backward part."""
    unit = np.where(bounds, 0, -1).astype(np.int64)
    s = int(_unit_backward_start(unit, first, backward_named, 1)[0])
    fwd = bounds & (first >= 0) & (first < s)
    return (int(last[fwd].max()) if fwd.any() else -1), s


def _head_only_updates(ops: OperationTable, out: np.ndarray, candidates: np.ndarray, is_update: np.ndarray) -> None:
    """Move to the head (in ``out``) the candidate updates of weights the head uses and the embedding does not."""
    head_vars = np.zeros(ops.num_variables, bool)
    emb_vars = np.zeros(ops.num_variables, bool)
    for op in np.flatnonzero((out >= 0) & ~is_update).tolist():
        (head_vars if out[op] == 1 else emb_vars)[ops.vars_of(op)] = True
    for op in np.flatnonzero(candidates & is_update).tolist():
        var = ops.vars_of(op)
        if head_vars[var].any() and not emb_vars[var].any():
            out[op] = 1


def regroup_layers(layers: LayerAssignment, groups: np.ndarray, placement: HeadPlacement) -> LayerAssignment:
    """The layer assignment with the embedding and head as layers of their own (``last``/``wrap``)."""
    if placement == "first" or EMBEDDING_GROUP in layers.names:
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
    """What the options change, for the memory engine.

    ``profile`` carries the variables' what-if bytes and live steps.
    ``is_backward`` marks backward operations (call sites of backward bodies
    and recompute clones included). ``never_stash`` marks variables the stash
    entry leaves out (recomputed by ``every-layer``); ``stash_inputs`` says the
    entry also takes variables that went live before the stage's forward part
    (received inputs); ``inputs_only`` (``pipeline``) that it takes nothing
    else. ``forward_cut`` (``pipeline``) is, per variable, the last step it
    stays live in a stage's forward part, or -1 when it is not cut.
    ``rerun_ops`` are the operations whose cycles a recomputing stage runs
    again in its backward part.
    """

    options: TrainingOptions
    recompute: AppliedRecompute
    profile: Profile
    is_backward: np.ndarray
    is_update: np.ndarray
    optimizer_state: np.ndarray
    recompute_ops: np.ndarray
    never_stash: np.ndarray
    stash_inputs: bool
    inputs_only: bool
    forward_cut: np.ndarray
    rerun_ops: np.ndarray
    notes: tuple[str, ...] = field(default=())

    @property
    def compiled_with_recomputation(self) -> bool:
        return bool(self.recompute_ops.any())


def place_unlayered(profile: Profile, ops: OperationTable, layers: LayerAssignment, backward_named: np.ndarray,
                    options: TrainingOptions) -> LayerAssignment:
    """The layer assignment for ``--head-placement``: with ``last``/``wrap`` the embedding and head become layers."""
    loose = (layers.layer_of_op < 0) | (np.asarray(layers.note, dtype=object) == "inputs-layer-0")
    if options.head_placement == "first" or not loose.any() or not layers.names:
        return layers
    called = called_operations(profile, ops)
    is_update = update_operations(profile, ops, options.update_regex, called)
    backward = _through_calls(backward_named, called)
    backward |= recompute_operations(profile, ops, backward)
    groups = head_groups(ops, layers.layer_of_op, len(layers.names), backward, is_update, layers.note, called)
    return regroup_layers(layers, groups, options.head_placement)


def tied_head(profile: Profile, ops: OperationTable, layers: LayerAssignment, backward_named: np.ndarray,
              options: TrainingOptions) -> bool:
    """Does the head share a weight with the embedding (a tied LM or MLM head)?

    The operations :func:`place_unlayered` would group as the head (forward
    ones, run after the last layer) use an always-live variable that the
    embedding's forward operations use too.
    """
    loose = (layers.layer_of_op < 0) | (np.asarray(layers.note, dtype=object) == "inputs-layer-0")
    if not loose.any() or not layers.names:
        return False
    called = called_operations(profile, ops)
    is_update = update_operations(profile, ops, options.update_regex, called)
    backward = _through_calls(backward_named, called)
    backward |= recompute_operations(profile, ops, backward)
    groups = head_groups(ops, layers.layer_of_op, len(layers.names), backward, is_update, layers.note, called)
    always = profile.always_live_classes()[profile.variables.klass]
    used = [np.zeros(profile.variables.count, bool) for _ in range(2)]
    for op in np.flatnonzero((groups >= 0) & ~backward & ~is_update).tolist():
        used[int(groups[op])][ops.vars_of(op)] = True
    return bool((used[0] & used[1] & always).any())


def build_training_view(profile: Profile, ops: OperationTable, layer_of_op: np.ndarray, num_layers: int,
                        backward_named: np.ndarray, options: TrainingOptions, training: bool = True) -> TrainingView:
    """Apply the options that do not depend on the split; describe the rest (docs/solvers.md)."""
    v = profile.variables
    if not training:
        # Inference: nothing to stash, recompute or update.
        none = np.zeros(ops.count, bool)
        return TrainingView(options, "none", profile, np.asarray(backward_named, bool), none, np.zeros(v.count, bool),
                            none, np.zeros(v.count, bool), False, False, np.full(v.count, -1, np.int64), none)
    always = profile.always_live_classes()[v.klass]
    called = called_operations(profile, ops)
    is_update = update_operations(profile, ops, options.update_regex, called)
    # A call site is backward when what it calls is (its name, Call(<n>), says nothing).
    backward_named = _through_calls(backward_named, called)
    clones = recompute_operations(profile, ops, backward_named) if training else np.zeros(ops.count, bool)
    is_backward = backward_named | clones
    notes: list[str] = []
    recompute: AppliedRecompute = options.recompute if training else "none"
    if clones.any():
        if recompute != "none":
            notes.append(f"the profile was compiled with recomputation ({int(clones.sum())} recompute operations); "
                         f"--recompute {recompute} is not applied again")
        recompute = "compiled"
    groups = head_groups(ops, layer_of_op, num_layers, is_backward, is_update)
    state = optimizer_state_variables(profile, ops, always, is_update, options.optimizer_state_regex)

    nbytes = v.bytes
    if options.shard > 1:
        nbytes = v.bytes.copy()
        nbytes[state] = -(-nbytes[state] // options.shard)
    # Per variable, -1 where nothing changes. Each mode writes only into its own copies of this,
    # so the others share it (several 8-byte columns over millions of variables cost time to fill).
    # Steps and unit numbers in int32 when they fit (always, in practice): half the pages to fill.
    steps = _step_dtype(profile.num_steps)
    unchanged = np.full(v.count, -1, steps)
    unchanged.flags.writeable = False
    cut_lo = cut_hi = unchanged  # lose the steps strictly between cut_lo and cut_hi
    keep_lo = keep_hi = unchanged  # off chip: keep only steps keep_lo..keep_hi
    if options.optimizer_state == "off-chip" and training:
        keep_lo, keep_hi = unchanged.copy(), unchanged.copy()
        lo, hi = _update_window(ops, is_update, v.count, steps)
        # Live only from its first update step to its last (never, when no update uses it).
        keep_lo[state] = np.where(hi[state] >= 0, lo[state], _NEVER)
        keep_hi[state] = hi[state]
    unit = _unit_of_op(layer_of_op, groups, num_layers)
    bstart = _unit_backward_start(unit, ops.first_step, is_backward, num_layers + 2)
    forward_op = (ops.first_step >= 0) & ~is_backward
    forward_op &= ops.first_step < bstart[np.maximum(unit, 0)]
    never_stash = np.zeros(v.count, bool)
    forward_cut = unchanged
    rerun_ops = np.zeros(ops.count, bool)
    if recompute in ("every-layer", "pipeline"):
        first, last = variable_steps(profile, steps)
        u = _last_forward_read(ops, forward_op, v.count, steps)
        lo_unit, hi_unit = _unit_span(ops, unit, v.count, steps)
        kept = ~always & (u >= 0) & (lo_unit >= 0) & ~state
        if recompute == "every-layer":
            cut_lo, cut_hi = unchanged.copy(), unchanged.copy()
            r = np.where(lo_unit >= 0, bstart[np.maximum(lo_unit, 0)], -1)
            pick = kept & (lo_unit == hi_unit) & (first <= u) & (r <= last) & (r > u + 1)
            cut_lo[pick], cut_hi[pick] = u[pick], r[pick]
            never_stash = pick
            # Each layer owning a recomputed variable runs its forward part again.
            rerun_ops = forward_op & np.isin(unit, np.unique(lo_unit[pick]))
        else:
            forward_cut = unchanged.copy()
            pick = kept & (first <= u) & (last > u)
            forward_cut[pick] = u[pick]
            rerun_ops = forward_op.copy()
    what_if = with_live_steps(profile, nbytes, cut_lo, cut_hi, keep_lo, keep_hi)
    return TrainingView(options, recompute, what_if, is_backward, is_update, state, clones, never_stash,
                        recompute in ("pipeline", "every-layer", "compiled"), recompute == "pipeline", forward_cut,
                        rerun_ops, tuple(notes))


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
    for op in picked[np.argsort(ops.last_step[picked], kind="stable")].tolist():
        u[ops.vars_of(op)] = int(ops.last_step[op])
    return u


def _unit_span(ops: OperationTable, unit: np.ndarray, num_vars: int,
               dtype: type[np.signedinteger] = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: the smallest and largest unit of the operations that use it (-1 when none)."""
    lo = np.full(num_vars, -1, dtype)
    hi = np.full(num_vars, -1, dtype)
    units = np.unique(unit[unit >= 0])
    per_unit = [(int(k), gather_csr(ops.var_ptr, ops.var_idx, np.flatnonzero(unit == k))) for k in units.tolist()]
    # One plain scatter per unit, in unit order (hi) and reversed (lo): each writes one value.
    for k, var in per_unit:
        hi[var] = k
    for k, var in reversed(per_unit):
        lo[var] = k
    return lo, hi


def _update_window(ops: OperationTable, is_update: np.ndarray, num_vars: int,
                   dtype: type[np.signedinteger] = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: first and last step of the weight updates that use it (-1 when none)."""
    lo = np.full(num_vars, np.iinfo(dtype).max, dtype)
    hi = np.full(num_vars, -1, dtype)
    picked = np.flatnonzero(is_update & (ops.first_step >= 0))
    lens = ops.var_ptr[picked + 1] - ops.var_ptr[picked]
    var = gather_csr(ops.var_ptr, ops.var_idx, picked)
    np.minimum.at(lo, var, np.repeat(ops.first_step[picked], lens).astype(dtype))
    np.maximum.at(hi, var, np.repeat(ops.last_step[picked], lens).astype(dtype))
    lo[hi < 0] = -1
    return lo, hi


def _unique_rows(columns: list[np.ndarray], num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of the columns (class, cut lo, cut hi, keep lo, keep hi) and each row's position among them.

    The rows come back in lexicographic order, as a sort on the five columns gives them.
    """
    # Steps fit in few bits once "never" is mapped to num_steps + 1; pack the
    # row into one int64 when it fits (a sort on one key instead of five).
    cap = num_steps + 2
    steps = [np.minimum(np.where(col < 0, cap, col), cap) for col in columns[1:]]
    # Each column's values replaced by their rank among its distinct values: the same grouping and
    # the same (lexicographic) order in far fewer bits, so the row packs into one int64 (the rows of
    # changed variables have a few hundred distinct values per column, where steps alone take 15 bits).
    ranks = [_dense_rank(col) for col in [columns[0], *steps]]
    bits = [max(int(r.max()).bit_length(), 1) for r in ranks]
    if sum(bits) <= 62:
        packed = ranks[0]
        for r, b in zip(ranks[1:], bits[1:]):
            packed = (packed << b) | r
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        return np.stack([col[first] for col in columns], axis=1), inverse.reshape(-1)
    uniq, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    return uniq, inverse.reshape(-1)


def _dense_rank(values: np.ndarray) -> np.ndarray:
    """Each value's rank among the distinct values (int64, 0 for the smallest)."""
    values = values.astype(np.int64, copy=False)
    if values.size == 0:
        return values
    ranked = rank_by_table(values)  # a table over the range: no sort
    if ranked is not None:
        return ranked[1]
    top = int(values.max())
    # "Never" markers sit far above every step: rank them last, the rest through a dense table.
    rest = values[values != top]
    if rest.size == 0:
        return np.zeros(values.size, np.int64)
    lo, hi = int(rest.min()), int(rest.max())
    if hi - lo < 1 << 24:
        present = np.bincount(rest - lo, minlength=hi - lo + 1) > 0
        rank = np.cumsum(present) - 1
        return np.asarray(np.where(values == top, int(present.sum()), rank[np.clip(values - lo, 0, hi - lo)]),
                          np.int64)
    return np.asarray(np.unique(values, return_inverse=True)[1].reshape(-1), np.int64)


def with_live_steps(profile: Profile, nbytes: np.ndarray, cut_lo: np.ndarray, cut_hi: np.ndarray,
               keep_lo: np.ndarray, keep_hi: np.ndarray) -> Profile:
    """A copy of the profile with new bytes and new live steps where asked.

    A variable with ``cut_hi >= 0`` loses the steps strictly between
    ``cut_lo`` and ``cut_hi``; one with ``keep_lo >= 0`` keeps only the steps
    ``keep_lo..keep_hi``. Variables with the same class and the same change
    share one new class, so the number of classes stays small.
    """
    v = profile.variables
    changed = np.flatnonzero((cut_hi >= 0) | (keep_lo >= 0))
    if changed.size == 0:
        if np.array_equal(nbytes, v.bytes):
            return profile
        return replace(profile, variables=replace(v, bytes=nbytes.astype(v.bytes.dtype, copy=False)))
    big = np.int64(_NEVER)
    is_cut = cut_hi[changed] >= 0
    c_lo = np.where(is_cut, cut_lo[changed], big)
    c_hi = np.where(is_cut, cut_hi[changed], big)
    k_lo = np.where(is_cut, 0, keep_lo[changed])
    k_hi = np.where(is_cut, big, keep_hi[changed])
    uniq, inverse = _unique_rows([v.klass[changed].astype(np.int64), c_lo, c_hi, k_lo, k_hi], profile.num_steps)
    cls = uniq[:, 0]
    counts = profile.class_ptr[cls + 1] - profile.class_ptr[cls]
    rep = np.repeat(np.arange(len(uniq)), counts)
    iv = expand_ranges(profile.class_ptr[cls], counts)
    s = np.maximum(profile.iv_start[iv], uniq[rep, 3])
    e = np.minimum(profile.iv_end[iv], uniq[rep, 4] + 1)
    # Two pieces per interval: up to the cut's start (inclusive), and from its end.
    starts = np.concatenate((s, np.maximum(s, uniq[rep, 2])))
    ends = np.concatenate((np.minimum(e, uniq[rep, 1] + 1), e))
    own = np.concatenate((rep, rep))
    keep = starts < ends
    own, starts, ends = own[keep], starts[keep], ends[keep]
    order = np.lexsort((starts, own))
    own, starts, ends = own[order], starts[order], ends[order]
    new_counts = np.bincount(own, minlength=len(uniq))
    base = int(profile.class_ptr[-1])
    class_ptr = np.concatenate((profile.class_ptr, base + np.cumsum(new_counts)))
    klass = v.klass.copy()
    klass[changed] = profile.num_classes + inverse
    variables = replace(v, bytes=nbytes.astype(v.bytes.dtype, copy=False),
                        klass=klass.astype(v.klass.dtype, copy=False))  # both already copies, or unchanged
    return replace(profile, variables=variables, class_ptr=class_ptr.astype(profile.class_ptr.dtype),
                   iv_start=np.concatenate((profile.iv_start, starts)).astype(profile.iv_start.dtype),
                   iv_end=np.concatenate((profile.iv_end, ends)).astype(profile.iv_end.dtype))
