"""Plan a split: everything a user can ask of a split, in one request, answered by one call.

:func:`plan_split` takes an :class:`~popliner.analysis.Analysis` and a
:class:`SplitRequest` and returns a :class:`SplitPlan`: the split, the
training options it was solved with (``--recompute auto`` resolved), the
fewest IPUs that fit, and, when nothing fits in training, which usual option
would. The CLI builds a request from its options and hands the plan to the
writers; the notebook API (:meth:`popliner.frames.Model.plan`) makes the same
call. Only this module resolves the requests ``auto`` and ``fewest``: below
it the library takes plain modes and counts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from popliner.analysis import Analysis, scenario, solve_split
from popliner.base import ProfileBase
from popliner.deadline import OutOfTime
from popliner.defaults import HeadPlacementRequest, PlannedDefaults, buildable_placements, placement_order, tie_refusal
from popliner.errors import UsageProblem
from popliner.framework import framework_title
from popliner.hardware import DEFAULT_LINK_BANDWIDTH
from popliner.layout import Layout
from popliner.memory.training import AppliedRecompute, OptimizerState, RecomputeRequest
from popliner.near import NEAR_SHARE, NearChoice
from popliner.progress import phase
from popliner.scenario import Resolved, TrainingRequest, resolve
from popliner.solvers.problem import SplitProblem
from popliner.training_choice import (
    AUTO_ORDER,
    Suggestion,
    budget_table,
    fewest_ipus,
    suggest_options,
)
from popliner.training_record import ConfigTraining, training_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from popliner.ops.head import TiedWeight
    from popliner.solvers.result import SplitResult
    from popliner.solvers.solve import SolverName

__all__ = ["FitFacts", "IpuCount", "SplitPlan", "SplitRequest", "fit_facts", "plan_split"]

log = logging.getLogger(__name__)

#: How ``num_ipus`` is read: at most that many, exactly that many, or the fewest that fit (at most that many).
IpuCount = Literal["at-most", "exactly", "fewest"]
Spelling = Literal["options", "parameters"]
#: Request values that are command-line options of their own.
_FLAGS: dict[tuple[str, object], str] = {("ipus", "exactly"): "--exact-ipus", ("ipus", "fewest"): "--min-ipus"}


@dataclass(frozen=True)
class SplitRequest:
    """Everything a user can ask of a split (the CLI's ``--solve`` options, as plain values).

    ``recompute``, ``head_placement`` and ``optimizer_state`` are None to
    take their defaults: what the profile's framework builds, then what the
    profile was compiled with (:func:`popliner.scenario.resolve`, as every
    entry point does); ``recompute="auto"`` takes the least recomputation
    that fits. ``mem_per_tile`` defaults to the profile's bytes per tile, of which
    ``headroom`` (a fraction; None: :attr:`popliner.base.ProfileBase.default_headroom`
    of the profile) is kept free. ``fit_facts`` asks for the fewest
    IPUs and the one-IPU figure of a split that fits, ``suggest`` for the
    option search when none fits (training).
    """

    num_ipus: int = 4
    ipus: IpuCount = "at-most"
    recompute: RecomputeRequest | None = None
    head_placement: HeadPlacementRequest | None = None
    #: Where the optimizer state lives; None: as the profile was compiled (popliner.scenario.resolve).
    optimizer_state: OptimizerState | None = None
    mem_per_tile: int | None = None
    headroom: float | None = None
    split_after: tuple[str, ...] = ()
    same_ipu: tuple[tuple[str, str], ...] = ()
    min_layers: int = 1
    keep_shared_together: bool = False
    solver: SolverName = "ilp"
    time_limit: float = 60.0
    seed: int = 0
    link_bandwidth: float = DEFAULT_LINK_BANDWIDTH
    fit_facts: bool = True
    suggest: bool = True
    #: How close (a fraction of the pick's step) a near choice must be to be said (:mod:`popliner.near`).
    near_share: float = NEAR_SHARE
    #: How messages name the request's fields: as the command line's options (``--num-ipus 4``), or as
    #: parameters (``num_ipus=4``) for a caller of the library.
    spelling: Spelling = "parameters"

    def named(self, field: str, value: object = None) -> str:
        """A field, with a value, as this request's messages spell it (``--recompute auto`` / ``recompute='auto'``)."""
        if self.spelling == "options":
            flag = _FLAGS.get((field, value)) or f"--{field.replace('_', '-')}"
            return flag if (field, value) in _FLAGS or value is None else f"{flag} {value}"
        return field if value is None else f"{field}={value!r}"

    def __post_init__(self) -> None:
        if self.num_ipus < 1:
            raise UsageProblem(f"num_ipus {self.num_ipus}: expected 1 or more")
        if self.headroom is not None and not 0.0 <= self.headroom < 1.0:
            raise UsageProblem(f"headroom {self.headroom}: expected a fraction in [0, 1)")
        if self.ipus not in ("at-most", "exactly", "fewest"):
            raise UsageProblem(f"ipus {self.ipus!r}: expected at-most, exactly or fewest")

    def budget(self, analysis: Analysis) -> int:
        """Bytes per tile a split of ``analysis`` may use (:meth:`popliner.base.ProfileBase.budget`)."""
        return analysis.base.budget(self.mem_per_tile, self.headroom)


@dataclass(frozen=True)
class FitFacts:
    """Fewest IPUs that fit (None: none up to the layer count), and the whole model's worst tile on one IPU."""

    fewest_ipus: int | None
    one_ipu_worst_bytes: int


@dataclass(frozen=True)
class SplitPlan:
    """The answer to a :class:`SplitRequest`.

    ``analysis`` is the analysis the split was solved on (after ``auto``
    choices); ``recompute_requested`` what was asked, ``recompute_applied``
    what its figures assume. ``facts`` and ``suggestion`` are None when not
    asked for or not applicable.
    """

    request: SplitRequest
    analysis: Analysis
    problem: SplitProblem
    split: SplitResult
    layout: Layout
    recompute_requested: RecomputeRequest
    recompute_applied: AppliedRecompute
    #: The record of the training options the figures assume (None in inference).
    training: ConfigTraining | None
    facts: FitFacts | None = None
    suggestion: Suggestion | None = None
    #: The framework's defaults the plan applied (None: the request set everything, or inference).
    defaults: PlannedDefaults | None = None
    #: ``auto`` head placement: the fewest IPUs each placement fits on (None: none), first, last, wrap.
    placements_tried: tuple[tuple[str, int | None], ...] = ()
    #: Splits engineers often pick instead, near the pick on the step model (:mod:`popliner.near`).
    near: tuple[NearChoice, ...] = ()

    @property
    def fits(self) -> bool:
        return self.split.fits


def plan_split(analysis: Analysis, request: SplitRequest = SplitRequest()) -> SplitPlan:
    """Split the analysed profile as ``request`` asks; ``request.time_limit`` bounds the whole call.

    The scenario is the analysis's base under the options :func:`popliner.scenario.resolve`
    gives the request: the analysis's own recomputation, head placement and
    optimizer state are not read (the request's, or their defaults, are).
    """
    base = analysis.base
    given = TrainingRequest(request.recompute, request.head_placement, request.optimizer_state,
                            analysis.options.training)
    resolved = resolve(base, given, request.num_ipus)
    if resolved.defaults is not None:
        log.info("%s", resolved.said)
    if resolved.head_placement == "auto":
        plan = _best_placement(base, resolved, request)
    else:
        plan = _plan(scenario(base, resolved.options), resolved.recompute, request)
    return dataclasses.replace(plan, defaults=resolved.defaults, near=_near_choices(plan))


def _near_choices(plan: SplitPlan) -> tuple[NearChoice, ...]:
    """An embedding-only IPU 0 over the same IPUs, when the pick puts layers there and it fits, if near or faster
    on the step model (:mod:`popliner.near`)."""
    from popliner.layout import EMBEDDING_GROUP

    split, analysis, layout = plan.split, plan.analysis, plan.layout
    k = split.num_ipus_used
    if (not split.fits or k < 2 or not layout.grouped or EMBEDDING_GROUP in plan.request.split_after
            or layout.model_layer_counts([s.layers for s in split.stages])[0] == 0):
        return ()
    from popliner.pod.model import PodConstants  # the pod planner only when a near choice is weighed (its imports)
    from popliner.pod.plan import DEFAULT_BATCHES_PER_IPU, pipeline_step
    request = dataclasses.replace(plan.request, num_ipus=k, ipus="exactly", fit_facts=False, suggest=False,
                                  split_after=(*plan.request.split_after, EMBEDDING_GROUP))
    with phase("solving with the embedding alone on IPU 0"):
        other = _solve(analysis, split_problem(analysis, request), request, time.monotonic())
    if not other.fits or other.num_ipus_used != k:
        return ()
    constants = PodConstants(link_bandwidth=plan.request.link_bandwidth)
    clock = float(analysis.profile.target.clock_hz)
    g = DEFAULT_BATCHES_PER_IPU * k
    counts = [tuple(layout.model_layer_counts([s.layers for s in x.stages])) for x in (other, split)]
    seconds = [pipeline_step(analysis, x, g, constants, clock).seconds for x in (other, split)]
    found = NearChoice("an embedding-only IPU 0", counts[0], seconds[0], counts[1], seconds[1], g)
    return (found,) if found.is_near(plan.request.near_share) else ()


def _best_placement(base: ProfileBase, resolved: Resolved, request: SplitRequest) -> SplitPlan:
    """``auto``: of the placements the framework builds, the one that fits on the fewest IPUs, then the one
    whose slowest IPU is fastest; on a tie, the one the framework's own models use for that head
    (:func:`placement_order`). The placements' scenarios share the base's option-free layer parts."""
    tied = base.tied_weight(resolved.options)
    order = placement_order(base.framework.name, tied, request.num_ipus)
    base.shared.share_between_option_sets()
    scored = []
    for rank, placement in enumerate(order):
        options = dataclasses.replace(resolved.options, head_placement=placement)
        plan = _plan(scenario(base, options), resolved.recompute,
                     dataclasses.replace(request, fit_facts=True, suggest=False), warn=False)
        fewest = plan.facts.fewest_ipus if plan.facts is not None else None
        slowest = max((s.cycles for s in plan.split.stages), default=0)
        scored.append(((not plan.fits, fewest if fewest is not None else 1 << 30, slowest), rank, placement, fewest,
                       plan))
    key, _, placement, _, best = min(scored, key=lambda item: item[:2])
    tried = tuple((p, f) for _, _, p, f, _ in scored)
    # A placement that does not fit on the IPUs asked for was not tried on more: say so, not "none".
    shown = ", ".join(f"{p}: {f if f is not None else f'more than {request.num_ipus}'}" for p, f in tried)
    tie = [p for k, _, p, _, _ in scored if k == key and p != placement]
    log.warning("%s chose %s: %s (fewest IPUs that fit: %s)", request.named("head_placement", "auto"), placement,
                placement_rule(base.framework.name, tied, request.num_ipus, placement, best.fits, tie), shown)
    if (request.fit_facts, request.suggest) != (True, False) and not best.fits:
        options = dataclasses.replace(resolved.options, head_placement=placement)
        best = _plan(scenario(base, options), resolved.recompute, request)
    return dataclasses.replace(best, placements_tried=tried)


def placement_rule(framework: str, tied: TiedWeight | None, num_ipus: int, placement: str, fits: bool,
                   tie: Sequence[str]) -> str:
    """Why ``auto`` chose ``placement`` (``tie``: the placements that scored the same), the rule and its source."""
    said = "it fits on the fewest IPUs, then the slowest IPU is fastest" if fits else "nothing fits"
    left = [p for p in buildable_placements(framework) if tie_refusal(framework, p, tied, num_ipus) is not None]
    if tied is not None and left:
        said = (f"the head reads the embedding's weight {tied.text()}, and {framework_title(framework)} does not "
                f"build a weight read on two IPUs of a pipeline, so {' and '.join(left)} is left out; " + said)
    if tie and fits:
        which = (("a tied head goes on IPU 0 with the embedding, as optimum-graphcore's PipelinedBertForPreTraining "
                  "and PipelinedGPT2LMHeadModel place it") if tied is not None else
                 ("an untied head goes on the last IPU, as optimum-graphcore's classification and QA models "
                  "(PipelinedBertForSequenceClassification, …ForQuestionAnswering) place it"))
        said += f"; it ties with {' and '.join(tie)} on both: {which}"
    return said


def _plan(analysis: Analysis, requested: RecomputeRequest, request: SplitRequest, warn: bool = True) -> SplitPlan:
    """The plan of one scenario; ``requested``: the recomputation asked for (``auto`` tries more scenarios)."""
    started = time.monotonic()
    if warn:
        _warn_first_with_a_tied_head(analysis, request)
    problem = split_problem(analysis, request)
    # The memory facts and (training) the liveness grid shared with the solve's tables: what the hint cannot stop.
    analysis.facts  # noqa: B018 - built here to time it: the hint's options each build theirs too
    if analysis.mode == "training":
        budget_table(analysis, problem, request.link_bandwidth)
    setup = time.monotonic() - started
    split = _solve(analysis, problem, request, started)
    if requested == "auto":
        analysis, problem, split = _auto_recompute(analysis, problem, split, request, started)
    facts = None
    if split.fits and request.fit_facts:
        with phase("checking fewer IPUs"):
            facts = fit_facts(analysis, problem, request.link_bandwidth)
    plan = SplitPlan(request, analysis, problem, split, analysis.layout, requested, analysis.facts.view.recompute,
                     training_of(analysis, requested), facts)
    if not split.fits and request.suggest and analysis.mode == "training":
        # The solve's facts and its range tables are done with: the plan keeps a scenario of the same options
        # whose facts are built again only if read, so that a large profile's two sets of facts are not held at once
        # while each option of the hint builds its own.
        plan = dataclasses.replace(plan, analysis=scenario(analysis.base, analysis.options.training))
        del analysis
        with phase("trying recomputation and off-chip optimizer state"):
            suggestion = suggest_options(plan.analysis, problem, request.link_bandwidth, started + request.time_limit,
                                         setup_seconds=setup)
        plan = dataclasses.replace(plan, suggestion=suggestion)
    return plan


def _warn_first_with_a_tied_head(analysis: Analysis, request: SplitRequest) -> None:
    """``first`` with a tied head plans a pipeline the frameworks do not build: say so, and what they do."""

    if analysis.mode != "training" or analysis.options.training.head_placement != "first":
        return
    if analysis.base.tied_head(analysis.options.training):
        log.warning("%s: the head shares its weight with the embedding (a tied LM or MLM head); with "
                    "%s it runs at the end of IPU 0's forward stage, which then spans the "
                    "whole model; optimum-graphcore's pretraining, MLM and LM models wrap such a head back "
                    "onto IPU 0 after the last layer: %s plans that", analysis.profile.path,
                    request.named("head_placement", "first"), request.named("head_placement", "wrap"))


def usable_ipus(analysis: Analysis, num_ipus: int) -> int:
    """The IPUs a split of ``analysis`` can use of ``num_ipus``: one per layer it places at most."""
    layers = len(analysis.layout.placed_names)
    return num_ipus if num_ipus <= layers or layers == 0 else layers


def _ipus_for_layers(analysis: Analysis, request: SplitRequest) -> int:
    """IPUs to split over: more than the layers a split places cannot all be used.

    At most N IPUs: solved over at most one IPU per layer, with a warning. Exactly N: refused.
    """
    layers = len(analysis.layout.placed_names)
    if usable_ipus(analysis, request.num_ipus) == request.num_ipus:
        return request.num_ipus
    if request.ipus == "exactly":
        raise UsageProblem(f"{request.named('ipus', 'exactly')} {request.named('num_ipus', request.num_ipus)}: the "
                           f"model has {layers} layers, so at most {layers} IPUs can each hold one; give "
                           f"{request.named('num_ipus', layers)} or fewer")
    log.warning("%s is more than the %d layers: using at most %d IPUs", request.named("num_ipus", request.num_ipus),
                layers, layers)
    return layers


def split_problem(analysis: Analysis, request: SplitRequest) -> SplitProblem:
    """The solvers' plain problem for a request: layer names become indices, the budget bytes."""
    if not analysis.layer_names:
        raise UsageProblem(f"{analysis.profile.path}: no operation got a layer, so there is nothing to split; "
                           "check " + request.named("layer_name_regex"))
    pairs = tuple((a, b) for a, b in (_layer_indices(analysis, pair, request.named("same_ipu"))
                                      for pair in request.same_ipu))
    return SplitProblem(
        num_ipus=_ipus_for_layers(analysis, request), asked_ipus=request.num_ipus, budget=request.budget(analysis),
        exact_ipus=request.ipus == "exactly", min_layers=request.min_layers,
        split_after=tuple(_layer_indices(analysis, request.split_after, request.named("split_after"))),
        same_ipu=pairs,
        keep_shared_together=request.keep_shared_together, training=analysis.mode == "training",
    )


def _layer_indices(analysis: Analysis, names: tuple[str, ...], option: str) -> list[int]:
    for name in names:
        if name not in analysis.layer_names:
            raise UsageProblem(f"{option} {name!r}: no such layer; layers are {', '.join(analysis.layer_names)}")
    return [analysis.layer_names.index(name) for name in names]


def _solve(analysis: Analysis, problem: SplitProblem, request: SplitRequest, started: float) -> SplitResult:
    """One solve; with ``fewest``, over exactly the fewest IPUs that fit (at most ``num_ipus``)."""
    if request.ipus == "fewest":
        with phase("finding the fewest IPUs"):
            try:
                fewest = fewest_ipus(analysis, problem, request.link_bandwidth, started + request.time_limit)
            except OutOfTime:
                fewest = None
                log.warning("%s: the %g s time limit ran out before the fewest IPUs that fit were found; "
                            "solving over at most %d", request.named("ipus", "fewest"), request.time_limit,
                            problem.num_ipus)
        if fewest is not None and fewest <= problem.num_ipus:
            problem = dataclasses.replace(problem, num_ipus=fewest, exact_ipus=True)
    log.info("solving: %d layers over %s %d IPUs, %s bytes per tile, %s, solver %s", len(analysis.layer_names),
             "exactly" if problem.exact_ipus else "at most", problem.num_ipus, f"{problem.budget:,}", analysis.mode,
             request.solver)
    split = solve_split(analysis, problem, solver=request.solver, time_limit=request.time_limit,
                        link_bytes_per_second=request.link_bandwidth, started=started)
    log.info("solved in %.2f s: %s", split.wall_seconds, split.status)
    return split


def _auto_recompute(analysis: Analysis, problem: SplitProblem, split: SplitResult, request: SplitRequest,
                    started: float) -> tuple[Analysis, SplitProblem, SplitResult]:
    """``auto``: the first of none, pipeline, every-layer whose split fits (the last tried otherwise)."""
    for mode in AUTO_ORDER[1:]:
        if split.fits or analysis.mode != "training" or analysis.facts.view.recompute == "compiled":
            break
        analysis.base.shared.share_between_option_sets()
        analysis = scenario(analysis.base, dataclasses.replace(analysis.options.training, recompute=mode))  # type: ignore[arg-type]
        problem = dataclasses.replace(problem, training=analysis.mode == "training")
        split = _solve(analysis, problem, request, started)
    log.warning("%s chose %s", request.named("recompute", "auto"), analysis.facts.view.recompute)
    return analysis, problem, split


def fit_facts(analysis: Analysis, problem: SplitProblem,
              link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH) -> FitFacts:
    """Fewest IPUs that fit under ``problem``'s constraints, and the whole model's worst tile on one IPU.

    The fewest comes from the suffix DP (:func:`popliner.solvers.solve.minimum_ipus`); the table is lazy
    and shares the ranges the solve evaluated.
    """
    from popliner.solvers.solve import minimum_ipus

    table = analysis.range_table(problem.budget, link_bytes_per_second, lazy=True)
    whole = table.stage_memory(0, table.num_layers - 1).worst_bytes if table.num_layers else 0
    return FitFacts(minimum_ipus(table, problem), int(whole))
