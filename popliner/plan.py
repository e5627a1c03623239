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

from popliner.analysis import Analysis, solve_split
from popliner.deadline import OutOfTime
from popliner.defaults import HeadPlacementRequest, PlannedDefaults, buildable_placements, framework_defaults
from popliner.errors import UsageProblem
from popliner.hardware import DEFAULT_LINK_BANDWIDTH
from popliner.layout import Layout
from popliner.memory.training import AppliedRecompute, Recompute, RecomputeRequest
from popliner.progress import phase
from popliner.solvers.problem import SplitProblem
from popliner.training_choice import (
    AUTO_ORDER,
    Suggestion,
    budget_table,
    fewest_ipus,
    reanalyse,
    suggest_options,
)
from popliner.training_record import ConfigTraining, training_of

if TYPE_CHECKING:
    from popliner.solvers.result import SplitResult
    from popliner.solvers.solve import SolverName

__all__ = ["FitFacts", "IpuCount", "SplitPlan", "SplitRequest", "fit_facts", "plan_split"]

log = logging.getLogger(__name__)

#: How ``num_ipus`` is read: at most that many, exactly that many, or the fewest that fit (at most that many).
IpuCount = Literal["at-most", "exactly", "fewest"]


@dataclass(frozen=True)
class SplitRequest:
    """Everything a user can ask of a split (the CLI's ``--solve`` options, as plain values).

    ``recompute`` and ``head_placement`` are None to keep what the analysis
    was made with; ``recompute="auto"`` takes the least recomputation that
    fits. ``mem_per_tile`` defaults to the profile's bytes per tile, of which
    ``headroom`` (a fraction; None: :func:`popliner.breakdown.default_headroom`
    of the profile) is kept free. ``fit_facts`` asks for the fewest
    IPUs and the one-IPU figure of a split that fits, ``suggest`` for the
    option search when none fits (training).
    """

    num_ipus: int = 4
    ipus: IpuCount = "at-most"
    recompute: RecomputeRequest | None = None
    head_placement: HeadPlacementRequest | None = None
    #: Take what the request leaves unset (None) from what the profile's framework builds (popliner.defaults).
    framework_defaults: bool = False
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

    def __post_init__(self) -> None:
        if self.num_ipus < 1:
            raise UsageProblem(f"num_ipus {self.num_ipus}: expected 1 or more")
        if self.headroom is not None and not 0.0 <= self.headroom < 1.0:
            raise UsageProblem(f"headroom {self.headroom}: expected a fraction in [0, 1)")
        if self.ipus not in ("at-most", "exactly", "fewest"):
            raise UsageProblem(f"ipus {self.ipus!r}: expected at-most, exactly or fewest")

    def budget(self, analysis: Analysis) -> int:
        """Bytes per tile a split of ``analysis`` may use."""
        headroom = self.headroom
        if headroom is None:
            from popliner.breakdown import default_headroom

            headroom = default_headroom(analysis)
        return int((self.mem_per_tile or analysis.profile.target.bytes_per_tile) * (1.0 - headroom))


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

    @property
    def fits(self) -> bool:
        return self.split.fits


def plan_split(analysis: Analysis, request: SplitRequest = SplitRequest()) -> SplitPlan:
    """Split the analysed profile as ``request`` asks; ``request.time_limit`` bounds the whole call."""
    defaults = None
    if request.framework_defaults:
        request, defaults = _apply_defaults(analysis, request)
    if request.head_placement == "auto":
        plan = _best_placement(analysis, request)
    else:
        plan = _plan(analysis, request)
    return dataclasses.replace(plan, defaults=defaults) if defaults is not None else plan


def _apply_defaults(analysis: Analysis, request: SplitRequest) -> tuple[SplitRequest, PlannedDefaults | None]:
    """The request with what it leaves unset taken from the framework's defaults."""
    from popliner.ops.checkpoints import checkpoints_in_every_layer
    from popliner.ops.head import tied_head

    training = analysis.mode == "training"
    if (request.recompute is not None or not training) and request.head_placement is not None:
        return request, None
    t = analysis.options.training
    tied = tied_head(analysis.profile, analysis.ops, analysis.named_layers or analysis.layers, analysis.is_backward, t)
    found = framework_defaults(analysis.framework.name, request.num_ipus, tied, training,
                               checkpoints_in_every_layer(analysis.ops, analysis.named_layers or analysis.layers,
                                                          analysis.is_backward))
    changes: dict[str, object] = {}
    if request.recompute is None and training:
        changes["recompute"] = found.recompute
    if request.head_placement is None:
        changes["head_placement"] = found.head_placement
    log.info("planned %s; an option you give wins", found.why)
    return dataclasses.replace(request, **changes), found  # type: ignore[arg-type]


def _best_placement(analysis: Analysis, request: SplitRequest) -> SplitPlan:
    """``auto``: of the placements the framework builds, the one that fits on the fewest IPUs, then the one
    whose slowest IPU is fastest."""
    scored = []
    if analysis.shared is None:
        from popliner.memory.ranges_shared import SharedParts

        # Each placement builds an engine and range tables of its own; what no option changes (each layer's
        # programs, its variables' events as profiled, the training view's option-free parts) is made once.
        shared = SharedParts(analysis.profile, analysis.ops)
        names: tuple[str, ...] = ("whole_memory", "is_backward", "mode", "framework")
        # What was worked out already and does not depend on the engine.
        known = {name: analysis.__dict__[name] for name in names if name in analysis.__dict__}
        analysis = dataclasses.replace(analysis, shared=shared)
        analysis.__dict__.update(known)
    for placement in buildable_placements(analysis.framework.name):
        plan = _plan(analysis, dataclasses.replace(request, head_placement=placement, fit_facts=True, suggest=False),
                     warn=False)
        fewest = plan.facts.fewest_ipus if plan.facts is not None else None
        slowest = max((s.cycles for s in plan.split.stages), default=0)
        scored.append(((not plan.fits, fewest if fewest is not None else 1 << 30, slowest), placement, fewest, plan))
    _, placement, _, best = min(scored, key=lambda item: item[0])
    tried = tuple((p, f) for _, p, f, _ in scored)
    # A placement that does not fit on the IPUs asked for was not tried on more: say so, not "none".
    shown = ", ".join(f"{p}: {f if f is not None else f'more than {request.num_ipus}'}" for p, f in tried)
    log.warning("--head-placement auto chose %s: %s (fewest IPUs that fit: %s)", placement,
                "it fits on the fewest IPUs, then the slowest IPU is fastest" if best.fits else "nothing fits",
                shown)
    if (best.request.fit_facts, best.request.suggest) != (request.fit_facts, request.suggest) and not best.fits:
        best = _plan(best.analysis, dataclasses.replace(request, head_placement=placement))
    return dataclasses.replace(best, placements_tried=tried)


def _plan(analysis: Analysis, request: SplitRequest, warn: bool = True) -> SplitPlan:
    started = time.monotonic()
    requested: RecomputeRequest = (request.recompute if request.recompute is not None
                                   else analysis.options.training.recompute)
    analysis = _with_requests(analysis, request)
    if warn:
        _warn_first_with_a_tied_head(analysis)
    asked = request.num_ipus
    request = dataclasses.replace(request, num_ipus=_ipus_for_layers(analysis, request))
    problem = split_problem(analysis, request)
    # The engine and (training) the liveness grid shared with the solve's tables: what the hint cannot stop.
    analysis.engine  # noqa: B018 - built here to time it: the hint's options each build one too
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
    if split.num_ipus_requested != asked:
        split = dataclasses.replace(split, num_ipus_requested=asked)  # what was asked, though one IPU per layer at most
    engine = analysis.engine
    plan = SplitPlan(request, analysis, problem, split, engine.layout, requested, engine.view.recompute,
                     training_of(analysis, requested), facts)
    if not split.fits and request.suggest and analysis.mode == "training":
        plan = dataclasses.replace(plan, suggestion=_suggest(analysis, problem, request, started, setup))
    return plan


def _with_requests(analysis: Analysis, request: SplitRequest) -> Analysis:
    """The analysis with the requested placement and recomputation (``auto`` starts from none)."""
    changes: dict[str, object] = {}
    training = analysis.options.training
    if request.head_placement not in (None, "auto") and request.head_placement != training.head_placement:
        changes["head_placement"] = request.head_placement
    mode: Recompute | None = None
    if request.recompute == "auto":
        mode = "none"
    elif request.recompute is not None:
        mode = request.recompute
    if mode is not None and mode != training.recompute:
        changes["recompute"] = mode
    return reanalyse(analysis, **changes) if changes else analysis


def _warn_first_with_a_tied_head(analysis: Analysis) -> None:
    """``first`` with a tied head plans a pipeline the frameworks do not build: say so, and what they do."""
    from popliner.ops.head import tied_head

    if analysis.mode != "training" or analysis.options.training.head_placement != "first":
        return
    if tied_head(analysis.profile, analysis.ops, analysis.named_layers or analysis.layers, analysis.is_backward,
                 analysis.options.training):
        log.warning("%s: the head shares its weight with the embedding (a tied LM or MLM head); with "
                    "--head-placement first it runs at the end of IPU 0's forward stage, which then spans the "
                    "whole model; optimum-graphcore's pretraining, MLM and LM models wrap such a head back "
                    "onto IPU 0 after the last layer: --head-placement wrap plans that", analysis.profile.path)


def _ipus_for_layers(analysis: Analysis, request: SplitRequest) -> int:
    """IPUs to split over: more than the layers a split places cannot all be used.

    At most N IPUs: solved over at most one IPU per layer, with a warning. Exactly N: refused.
    """
    layers = len(Layout.of(analysis.layer_names, analysis.options.training.head_placement).placed_names)
    if request.num_ipus <= layers or layers == 0:
        return request.num_ipus
    if request.ipus == "exactly":
        raise UsageProblem(f"--exact-ipus --num-ipus {request.num_ipus}: the model has {layers} layers, so at most "
                           f"{layers} IPUs can each hold one; give --num-ipus {layers} or fewer")
    log.warning("--num-ipus %d is more than the %d layers: using at most %d IPUs", request.num_ipus, layers, layers)
    return layers


def split_problem(analysis: Analysis, request: SplitRequest) -> SplitProblem:
    """The solvers' plain problem for a request: layer names become indices, the budget bytes."""
    if not analysis.layer_names:
        raise UsageProblem(f"{analysis.profile.path}: no operation got a layer, so there is nothing to split; "
                           "check --layer-name-regex")
    pairs = tuple((a, b) for a, b in (_layer_indices(analysis, pair, "--same-ipu") for pair in request.same_ipu))
    return SplitProblem(
        num_ipus=request.num_ipus, budget=request.budget(analysis),
        exact_ipus=request.ipus == "exactly", min_layers=request.min_layers,
        split_after=tuple(_layer_indices(analysis, request.split_after, "--split-after")), same_ipu=pairs,
        keep_shared_together=request.keep_shared_together, training=analysis.mode == "training",
    )


def _layer_indices(analysis: Analysis, names: tuple[str, ...], option: str) -> list[int]:
    out = []
    for name in names:
        if name not in analysis.layer_names:
            raise UsageProblem(f"{option} {name!r}: no such layer; layers are {', '.join(analysis.layer_names)}")
        out.append(analysis.layer_names.index(name))
    return out


def _solve(analysis: Analysis, problem: SplitProblem, request: SplitRequest, started: float) -> SplitResult:
    """One solve; with ``fewest``, over exactly the fewest IPUs that fit (at most ``num_ipus``)."""
    asked = problem
    if request.ipus == "fewest":
        with phase("finding the fewest IPUs"):
            try:
                fewest = fewest_ipus(analysis, problem, request.link_bandwidth, started + request.time_limit)
            except OutOfTime:
                fewest = None
                log.warning("--min-ipus: the %g s time limit ran out before the fewest IPUs that fit were found; "
                            "solving over at most %d", request.time_limit, problem.num_ipus)
        if fewest is not None and fewest <= problem.num_ipus:
            problem = dataclasses.replace(problem, num_ipus=fewest, exact_ipus=True)
    log.info("solving: %d layers over %s %d IPUs, %s bytes per tile, %s, solver %s", len(analysis.layer_names),
             "exactly" if problem.exact_ipus else "at most", problem.num_ipus, f"{problem.budget:,}", analysis.mode,
             request.solver)
    split = solve_split(analysis, problem, solver=request.solver, time_limit=request.time_limit, seed=request.seed,
                        link_bytes_per_second=request.link_bandwidth, started=started)
    log.info("solved in %.2f s: %s", split.wall_seconds, split.status)
    if split.num_ipus_requested != asked.num_ipus:
        split = dataclasses.replace(split, num_ipus_requested=asked.num_ipus)
    return split


def _auto_recompute(analysis: Analysis, problem: SplitProblem, split: SplitResult, request: SplitRequest,
                    started: float) -> tuple[Analysis, SplitProblem, SplitResult]:
    """``auto``: the first of none, pipeline, every-layer whose split fits (the last tried otherwise)."""
    for mode in AUTO_ORDER[1:]:
        if split.fits or analysis.mode != "training" or analysis.engine.view.recompute == "compiled":
            break
        analysis = reanalyse(analysis, recompute=mode)
        problem = dataclasses.replace(problem, training=analysis.mode == "training")
        split = _solve(analysis, problem, request, started)
    log.warning("--recompute auto chose %s", analysis.engine.view.recompute)
    return analysis, problem, split


def _suggest(analysis: Analysis, problem: SplitProblem, request: SplitRequest, started: float,
             setup: float) -> Suggestion:
    """The usual training option that would make the model fit, within what is left of the time limit."""
    # The solve's engine and its range tables are done with: let them go before each option builds an
    # engine of its own, so that a large profile's two engines are not held at once.
    analysis.__dict__.pop("engine", None)
    with phase("trying recomputation and off-chip optimizer state"):
        return suggest_options(analysis, problem, request.link_bandwidth, started + request.time_limit,
                               setup_seconds=setup)


def fit_facts(analysis: Analysis, problem: SplitProblem,
              link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH) -> FitFacts:
    """Fewest IPUs that fit under ``problem``'s constraints, and the whole model's worst tile on one IPU.

    The fewest comes from the suffix DP (:func:`popliner.solvers.solve.minimum_ipus`); the table is lazy
    and shares the ranges the solve evaluated.
    """
    from popliner.memory.ranges import ProfileRanges
    from popliner.solvers.solve import minimum_ipus

    table = ProfileRanges(analysis.engine, problem.budget, link_bytes_per_second, lazy=True)
    whole = table.stage_memory(0, table.num_layers - 1).worst_bytes if table.num_layers else 0
    return FitFacts(minimum_ipus(table, problem), int(whole))
