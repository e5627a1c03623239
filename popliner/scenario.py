"""The one place a request's training options get their defaults: the framework's, the profile's, the user's.

:func:`resolve` takes a profile's base and the training options a user gave
(None: not given) and returns the options a scenario applies, in that order
(:func:`popliner.defaults.framework_defaults`, then the profile's optimizer
state in remote buffers, then the user's); every entry point asks it (README,
'A typical session', after the notebook example). A user option that
contradicts a compiled fact the model cannot undo is refused with one line
naming both, and so is a head placement the framework does not build
(:func:`popliner.defaults.tie_refusal`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from popliner.analysis import Analysis, scenario
from popliner.base import ProfileBase
from popliner.defaults import (
    HeadPlacementRequest,
    PlannedDefaults,
    framework_defaults,
    placement_order,
    tie_refusal,
)
from popliner.errors import UsageProblem
from popliner.framework import framework_title
from popliner.memory.training import OptimizerState, Recompute, RecomputeRequest, TrainingOptions

__all__ = ["Resolved", "TrainingRequest", "compiled_state_refusal", "resolve", "resolve_recorded", "tables_scenario"]


@dataclass(frozen=True)
class TrainingRequest:
    """The training options as given: None where the user said nothing (:func:`resolve` decides).

    ``given`` holds the options with no default to resolve (replicas,
    sharding, the regexes): a :class:`TrainingOptions` whose recomputation,
    head placement and optimizer state are not read.
    """

    recompute: RecomputeRequest | None = None
    head_placement: HeadPlacementRequest | None = None
    optimizer_state: OptimizerState | None = None
    given: TrainingOptions = dataclasses.field(default_factory=TrainingOptions)


@dataclass(frozen=True)
class Resolved:
    """The options a scenario applies, and the requests the planner still resolves (``auto``).

    ``options`` holds the first option set to plan: no recomputation for
    ``recompute="auto"`` (the least first), ``first`` for
    ``head_placement="auto"`` (the planner tries each placement the
    framework builds). ``defaults``: what the framework's defaults decided
    (None when the user gave both choices, or in inference with a placement
    given); ``said``: one line saying what was applied and where it came from.
    """

    options: TrainingOptions
    recompute: RecomputeRequest
    head_placement: HeadPlacementRequest
    defaults: PlannedDefaults | None
    said: str


def resolve(base: ProfileBase, request: TrainingRequest, num_ipus: int) -> Resolved:
    """The options ``request`` resolves to on ``base`` for a split over ``num_ipus`` IPUs (module docstring)."""
    training = base.training
    state = _state(base, request.optimizer_state)
    _check_recompute(base, request.recompute)
    defaults = None
    recompute: RecomputeRequest = request.recompute if request.recompute is not None else "none"
    head: HeadPlacementRequest = request.head_placement if request.head_placement is not None else "first"
    if (request.recompute is None and training) or request.head_placement is None:
        defaults = framework_defaults(base.framework.name, num_ipus, base.tied_head(request.given), training,
                                      base.checkpointed)
        if request.recompute is None and training:
            recompute = defaults.recompute
        if request.head_placement is None:
            head = defaults.head_placement
    if request.head_placement is not None:
        refused = tie_refusal(base.framework.name, head, base.tied_weight(request.given), num_ipus)
        if refused is not None:
            raise UsageProblem(f"head placement {head} over {num_ipus} IPUs was asked, but {refused}")
    applied_recompute: Recompute = "none" if recompute == "auto" else recompute
    options = dataclasses.replace(request.given, recompute=applied_recompute, optimizer_state=state,
                                  head_placement="first" if head == "auto" else head)
    return Resolved(options, recompute, head, defaults, _said(base, request, defaults, recompute, head, state))


def resolve_recorded(analysis: Analysis, source: str, num_ipus: int = 1) -> None:
    """A config's (or workbook's) recorded training options for ``num_ipus`` IPUs, resolved as every entry point
    resolves a request: one that contradicts what the profile was compiled with, or that the framework does not
    build, is refused, naming ``source``."""
    t = analysis.options.training
    if analysis.mode != "training":
        # Inference records no training options; its head placement is read from where the groups are.
        refused = tie_refusal(analysis.base.framework.name, t.head_placement, analysis.base.tied_weight(t), num_ipus)
        if refused is not None:
            raise UsageProblem(f"{source}: its head placement {t.head_placement} over {num_ipus} IPUs: {refused}")
        return
    try:
        resolve(analysis.base, TrainingRequest(t.recompute, t.head_placement, t.optimizer_state, t), num_ipus)
    except UsageProblem as e:
        raise UsageProblem(f"{source}: its training options: {e}") from None


def compiled_state_refusal(base: ProfileBase) -> str:
    """Why optimizer state on chip cannot be planned for a profile compiled with it off chip (one line)."""
    return (f"optimizer state on-chip was asked, but {base.profile.path} was compiled with its optimizer state "
            "off chip (its weight update loads and stores remote buffers), and popliner cannot put it back on "
            "chip: ask for off-chip, or leave the optimizer state out to take the profile's")


def _check_recompute(base: ProfileBase, asked: RecomputeRequest | None) -> None:
    """A recomputation mode asked of a profile compiled with recomputation: refused (its figures hold the
    compiled one, which popliner cannot take out or apply twice). ``none`` and ``auto`` read it as compiled."""
    if asked in ("pipeline", "every-layer") and base.compiled_recompute_ops:
        raise UsageProblem(f"recompute {asked} was asked, but {base.profile.path} was compiled with recomputation "
                           f"({base.compiled_recompute_ops} recompute operations), which its figures already hold: "
                           "leave the recomputation out to take the profile's")


def _state(base: ProfileBase, asked: OptimizerState | None) -> OptimizerState:
    """The optimizer state: as compiled (off chip when the profile streams it), else as asked, else on chip."""
    if base.state_off_chip:
        if asked == "on-chip":
            raise UsageProblem(compiled_state_refusal(base))
        return "off-chip"
    return asked if asked is not None else "on-chip"


def _said(base: ProfileBase, request: TrainingRequest, defaults: PlannedDefaults | None, recompute: str,
          head: str, state: str) -> str:
    """One line: what the scenario applies, each choice with where it came from (the framework, the
    profile's compilation or the request)."""
    parts = [f"head placement {head} as asked" if request.head_placement is not None or defaults is None
             else defaults.where]
    if base.training:
        parts.append(f"recompute {recompute} as asked" if request.recompute is not None or defaults is None
                     else defaults.redo)
        if base.state_off_chip:
            parts.append("optimizer state off-chip as compiled")
        else:
            parts.append(f"optimizer state {state}" + (" as asked" if request.optimizer_state is not None else ""))
    title = framework_title(base.framework.name)
    return f"planned as {title} builds it: " + ", ".join(parts) + "; an option you give wins"


def tables_scenario(analysis: Analysis, request: TrainingRequest, num_ipus: int) -> Analysis:
    """The scenario the tables read when no split is asked for: ``request`` resolved by :func:`resolve` as
    for a split over ``num_ipus`` IPUs, so that the breakdowns and a workbook's planner read the options a
    solve of the same request plans. What only a solve can decide is taken at its first choice: ``auto``
    recomputation as none (tried first), ``auto`` head placement as the first placement the framework
    builds, in the order ``auto`` breaks ties (:func:`popliner.defaults.placement_order`: a tied head's
    ``wrap`` first)."""
    resolved = resolve(analysis.base, request, num_ipus)
    options = resolved.options
    if resolved.head_placement == "auto":
        base = analysis.base
        first = placement_order(base.framework.name, base.tied_weight(options), num_ipus)[0]
        options = dataclasses.replace(options, head_placement=first)
    if options == analysis.options.training:
        return analysis
    return scenario(analysis.base, options)
