"""Training as engineers run it: the options, and the view of them the memory facts reads.

The definitions are in docs/solvers.md ("Training options: exact
definitions"). :class:`TrainingOptions` holds what a user asks for;
:func:`build_training_view` works out what it changes, as plain data. The
parts of that work live with their subject: which operations are weight
updates, call sites or recompute clones in :mod:`popliner.ops.roles`, which
unlayered operations form the embedding and the head in
:mod:`popliner.ops.head`, and the *what-if profile* (the profile's variables
with the bytes and live steps the options give them) in
:mod:`popliner.memory.whatif`. Every change that does not depend on the
split (off-chip state, sharding, ``every-layer`` recomputation) is applied
there once, so the memory facts needs no special case for it; what does
depend on the stage (the stash rule, ``pipeline`` recomputation, re-run
cycles) is described by :class:`TrainingView` for the figures to apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from popliner.arrays import content_key
from popliner.errors import UsageProblem
from popliner.layout import EMBEDDING_GROUP, HEAD_GROUP, HEAD_PLACEMENTS, HeadPlacement
from popliner.memory.whatif import PROFILED, Delta, Roles, Spread, rewrite, roles_key, variable_roles
from popliner.ops.head import head_groups
from popliner.ops.operations import OperationTable
from popliner.ops.roles import DEFAULT_UPDATE_REGEX, operation_roles
from popliner.profile.model import Profile
from popliner.regexes import compile_bounded

__all__ = [
    "DEFAULT_UPDATE_REGEX",
    "EMBEDDING_GROUP",
    "HEAD_GROUP",
    "HEAD_PLACEMENTS",
    "OPTIMIZER_STATES",
    "RECOMPUTE_MODES",
    "RECOMPUTE_REQUESTS",
    "AppliedRecompute",
    "Recompute",
    "RecomputeRequest",
    "TrainingOptions",
    "TrainingView",
    "build_training_view",
    "profiled_always_live",
]

#: The recomputation the library models. ``auto`` is no mode: it is a request that only the
#: planner (:func:`popliner.plan.plan_split`) resolves, to one of these.
Recompute = Literal["none", "pipeline", "every-layer"]
#: What a user may ask for: a mode, or ``auto`` (the least recomputation that fits).
RecomputeRequest = Literal["none", "pipeline", "every-layer", "auto"]
#: The mode a scenario applied: the one asked for, or ``compiled`` when the profile already recomputes.
AppliedRecompute = Literal["none", "pipeline", "every-layer", "compiled"]
OptimizerState = Literal["on-chip", "off-chip"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "pipeline", "every-layer")
RECOMPUTE_REQUESTS: tuple[str, ...] = (*RECOMPUTE_MODES, "auto")
OPTIMIZER_STATES: tuple[str, ...] = ("on-chip", "off-chip")


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
        compile_bounded(self.update_regex, "--update-regex or training.update_regex")
        if self.optimizer_state_regex is not None:
            compile_bounded(self.optimizer_state_regex, "--optimizer-state-regex or training.optimizer_state_regex")

    @property
    def shard(self) -> int:
        """Divisor of optimizer-state bytes (1 without sharding)."""
        return self.replication_factor if self.sharded_optimizer_state else 1

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


@dataclass(frozen=True, eq=False)
class TrainingView:
    """What the options change, for the memory facts.

    ``profile`` carries the variables' what-if bytes and live steps; ``delta`` says which variables it changes of the
    profile as loaded, and tells its variable table from others'.
    ``is_backward`` marks backward operations (call sites of backward bodies
    and recompute clones included). ``never_stash`` marks variables the stash
    entry leaves out (recomputed by ``every-layer``); ``stash_inputs`` says the
    entry also takes variables that went live before the stage's forward part
    (received inputs); ``inputs_only`` (``pipeline``) that it takes nothing
    else. ``forward_cut`` (``pipeline``) holds the cut variables, in order, each
    with the steps it stays live in a stage's forward part (0 to its last forward read); none otherwise.
    ``rerun_ops`` are the operations whose cycles a recomputing stage runs
    again in its backward part.
    """

    options: TrainingOptions
    recompute: AppliedRecompute
    profile: Profile
    delta: Delta
    is_backward: np.ndarray
    is_update: np.ndarray
    optimizer_state: np.ndarray
    #: Bool per variable: a weight (always live, no state, used by an update and a forward operation).
    weights: np.ndarray
    recompute_ops: np.ndarray
    never_stash: np.ndarray
    stash_inputs: bool
    inputs_only: bool
    forward_cut: Spread
    rerun_ops: np.ndarray
    #: A key of ``forward_cut``'s values: equal keys, equal cuts (what the forward-cut profiles are found by).
    forward_cut_key: bytes
    notes: tuple[str, ...] = field(default=())


def build_training_view(profile: Profile, ops: OperationTable, layer_of_op: np.ndarray, num_layers: int,
                        backward_named: np.ndarray, options: TrainingOptions, training: bool = True,
                        memo: dict[bytes, Any] | None = None, *, counted: np.ndarray,
                        core: np.ndarray | None = None) -> TrainingView:
    """Apply the options that do not depend on the split; describe the rest (docs/solvers.md).

    ``memo``: kept across the option sets of one profile and operation table
    (``popliner plan``): the roles of operations and variables, which no
    option but the regexes changes, are found once. ``counted``: the operations whose variables count, whose
    layer span the recomputation modes start from (the figures do not depend on it); ``core``: the layering's core
    (:func:`popliner.memory.boundaries.counted_layer_span`).
    """
    v = profile.variables
    if not training:
        # Inference: nothing to stash, recompute or update.
        none, nothing = np.zeros(ops.count, bool), np.zeros(v.count, bool)
        return TrainingView(options, "none", profile, Delta.of(nothing, PROFILED),
                            np.asarray(backward_named, bool), none, nothing, nothing, none, nothing, False, False,
                            Spread.none(), none, b"none")
    key = content_key(b"roles", np.asarray(backward_named, bool),
                      repr((options.update_regex, options.optimizer_state_regex)).encode())
    found = memo.get(key) if memo is not None else None
    if found is None:
        always = profiled_always_live(profile, memo)
        # A call site is backward when what it calls is (its name, Call(<n>), says nothing).
        _, is_update, backward_named, clones = operation_roles(profile, ops, backward_named, options.update_regex,
                                                               memo)
        state, weights = variable_roles(profile, ops, always, is_update, backward_named | clones,
                                        options.optimizer_state_regex)
        found = (always, is_update, backward_named, clones, state, weights, roles_key(always, state, is_update))
        if memo is not None:
            memo[key] = found  # read only from here on
    always, is_update, backward_named, clones, state, weights, key = found
    is_backward = backward_named | clones
    recompute, notes = _applied_recompute(options.recompute, clones)
    groups = _head_groups(ops, layer_of_op, num_layers, is_backward, is_update, memo)
    roles = Roles(always, state, is_update, is_backward, groups, key)
    what_if = rewrite(profile, ops, layer_of_op, num_layers, roles, options.shard,
                      options.optimizer_state == "off-chip", recompute, memo, counted, core)
    return TrainingView(options, recompute, what_if.profile, what_if.delta, is_backward, is_update, state, weights,
                        clones, what_if.never_stash, recompute in ("pipeline", "every-layer", "compiled"),
                        recompute == "pipeline", what_if.forward_cut, what_if.rerun_ops, what_if.forward_cut_key, notes)


def _head_groups(ops: OperationTable, layer_of_op: np.ndarray, num_layers: int, is_backward: np.ndarray,
                 is_update: np.ndarray, memo: dict[bytes, Any] | None) -> np.ndarray:
    """:func:`popliner.ops.head.head_groups` of the layering, kept in ``memo`` (read only): the option sets of a
    layering and its recomputation mode (the clones) read the same."""
    key = content_key(b"head-groups", np.asarray(layer_of_op, np.int64), np.asarray(is_backward, bool),
                      np.asarray(is_update, bool), num_layers.to_bytes(8, "little"))
    found: np.ndarray | None = memo.get(key) if memo is not None else None
    if found is None:
        found = head_groups(ops, layer_of_op, num_layers, is_backward, is_update)
        found.flags.writeable = False
        if memo is not None:
            memo[key] = found  # read only from here on
    return found


def profiled_always_live(profile: Profile, memo: dict[bytes, Any] | None) -> np.ndarray:
    """Always live per variable of the profile as loaded (read only): one column, kept in ``memo`` (the plan's
    option-free memo), for the roles and every option set's memory facts."""
    found: np.ndarray | None = memo.get(b"always-live") if memo is not None else None
    if found is None:
        found = np.asarray(profile.always_live_classes()[profile.variables.klass])
        found.flags.writeable = False
        if memo is not None:
            memo[b"always-live"] = found  # read only from here on
    return found


def _applied_recompute(asked: Recompute, clones: np.ndarray) -> tuple[AppliedRecompute, tuple[str, ...]]:
    """The mode applied, and why when it is not the one asked: a profile compiled with recomputation keeps its own."""
    if not clones.any():
        return asked, ()
    if asked == "none":
        return "compiled", ()
    return "compiled", (f"the profile was compiled with recomputation ({int(clones.sum())} recompute operations); "
                        f"--recompute {asked} is not applied again",)
