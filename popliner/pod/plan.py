"""``plan_pod``: every configuration of a pod (depth x replicas x accumulation x options), ranked by throughput.

A configuration is K IPUs per replica (K divides the pod), R = pod / K
replicas, G = global batch / (M x R) micro-batches per step (at least the
pipeline stages), a recomputation mode, a head placement and where the
optimizer state lives (sharded over the R replicas when asked). Each
training option set is analysed once, with one range table and one suffix
search for all its depths (:mod:`popliner.pod.search`); each configuration
then costs a few sums (:mod:`popliner.pod.model`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from popliner.analysis import Analysis, scenario
from popliner.base import ProfileBase
from popliner.config.yaml_io import MAX_MICRO_BATCHES
from popliner.defaults import tie_refusal
from popliner.errors import UsageProblem
from popliner.memory.training import (
    HEAD_PLACEMENTS,
    OPTIMIZER_STATES,
    TrainingOptions,
)
from popliner.memory.work import RangeWork, check_range_tables
from popliner.pod.model import PodConstants, StepTime, allreduce_seconds, step_time, streaming_seconds
from popliner.pod.search import DepthSplit, OptionSearch, TrafficTable, search_options
from popliner.progress import phase
from popliner.scenario import compiled_state_refusal
from popliner.solvers.result import SplitResult
from popliner.training_choice import AUTO_ORDER

__all__ = ["DEFAULT_BATCHES_PER_IPU", "PodConfig", "PodPlan", "PodRequest", "near_depths", "pipeline_step", "plan_pod"]

log = logging.getLogger(__name__)

#: Without --global-batch: M x pod x 16 samples, so G = 16 K (never fewer than the 2K+1 pipeline stages).
DEFAULT_BATCHES_PER_IPU = 16
RECOMPUTES: tuple[str, ...] = AUTO_ORDER


@dataclass(frozen=True)
class PodRequest:
    """What to plan: the pod, the batch, the options to try and the hardware figures."""

    pod_ipus: int
    global_batch: int | None = None
    micro_batch: int = 1
    recompute: tuple[str, ...] = RECOMPUTES
    head_placement: tuple[str, ...] = HEAD_PLACEMENTS
    optimizer_state: tuple[str, ...] = ("on-chip", "off-chip")
    sharded_optimizer_state: bool = False
    mem_per_tile: int | None = None
    #: The fraction of each tile kept free; None: the profile's default, as every other command
    #: (:meth:`popliner.base.ProfileBase.budget`).
    headroom: float | None = None
    constants: PodConstants = field(default_factory=PodConstants)

    def __post_init__(self) -> None:
        if self.pod_ipus < 1:
            raise UsageProblem(f"--ipus {self.pod_ipus}: expected a number of IPUs >= 1")
        if self.micro_batch < 1:
            raise UsageProblem(f"--micro-batch {self.micro_batch}: expected an integer >= 1")
        if self.global_batch is not None and self.global_batch < 1:
            raise UsageProblem(f"--global-batch {self.global_batch}: expected an integer >= 1")
        for flag, values, allowed in (("--recompute", self.recompute, RECOMPUTES),
                                      ("--head-placement", self.head_placement, HEAD_PLACEMENTS),
                                      ("--optimizer-state", self.optimizer_state, OPTIMIZER_STATES)):
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise UsageProblem(f"{flag} {','.join(bad) or '(none)'}: expected some of {', '.join(allowed)}")
        if self.headroom is not None and not 0.0 <= self.headroom < 1.0:
            raise UsageProblem(f"--headroom {self.headroom}: expected a fraction in [0, 1)")

    @property
    def batch(self) -> int:
        """The global batch (samples per step of the pod)."""
        if self.global_batch is not None:
            return self.global_batch
        return self.micro_batch * self.pod_ipus * DEFAULT_BATCHES_PER_IPU

    @property
    def depths(self) -> tuple[int, ...]:
        """IPUs per replica: the divisors of the pod."""
        return tuple(k for k in range(1, self.pod_ipus + 1) if self.pod_ipus % k == 0)


@dataclass(frozen=True)
class PodConfig:
    """One configuration and what the model predicts for it (``reason`` says why one does not fit)."""

    ipus_per_replica: int
    replicas: int
    gradient_accumulation: int | None
    micro_batch: int
    recompute: str  # the mode applied ("compiled" when the profile already recomputes; "none" in inference)
    head_placement: str
    optimizer_state: str
    sharded_optimizer_state: bool
    pipeline_stages: int
    budget: int
    bytes_per_tile: int
    split: SplitResult | None = None
    step: StepTime | None = None
    samples_per_second: float | None = None
    gradient_bytes: tuple[int, ...] = ()
    state_bytes: tuple[int, ...] = ()
    reason: str = ""
    options: TrainingOptions = field(default_factory=TrainingOptions, compare=False)

    @property
    def fits(self) -> bool:
        return self.split is not None and not self.reason

    @property
    def fullest_ipu(self) -> int | None:
        if self.split is None:
            return None
        return max(self.split.stages, key=lambda s: (s.worst_tile_bytes, -s.ipu)).ipu

    @property
    def fullest_bytes(self) -> int | None:
        return None if self.split is None else max(s.worst_tile_bytes for s in self.split.stages)

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.split is None else min(s.headroom for s in self.split.stages)

    @property
    def split_text(self) -> str:
        """Each IPU's first..last layer, ``|`` between IPUs."""
        if self.split is None:
            return ""
        return " | ".join(s.layers[0] if len(s.layers) == 1 else f"{s.layers[0]}..{s.layers[-1]}"
                          for s in self.split.stages)


@dataclass(frozen=True, eq=False)
class PodPlan:
    """Every configuration, the fitting ones first from the fastest, and the analyses behind them."""

    request: PodRequest
    profile_path: str
    profile_sha256: str
    mode: str
    clock_hz: float
    global_batch: int
    configs: tuple[PodConfig, ...]
    analyses: dict[TrainingOptions, Analysis] = field(default_factory=dict, repr=False)
    notes: tuple[str, ...] = ()

    @property
    def fitting(self) -> tuple[PodConfig, ...]:
        return tuple(c for c in self.configs if c.fits)

    def analysis_of(self, config: PodConfig) -> Analysis:
        return self.analyses[config.options]

    def to_frame(self) -> Any:
        """One row per configuration, in rank order (pandas; imported only here, as the notebook API does)."""
        import pandas as pd

        rows = [{"fits": c.fits, "ipus_per_replica": c.ipus_per_replica, "replicas": c.replicas,
                 "gradient_accumulation": c.gradient_accumulation, "recompute": c.recompute,
                 "head_placement": c.head_placement, "optimizer_state": c.optimizer_state,
                 "fullest_bytes": c.fullest_bytes, "samples_per_second": c.samples_per_second,
                 "step_seconds": c.step.seconds if c.step is not None else None,
                 "bound": c.step.bound if c.step is not None else None, "split": c.split_text, "reason": c.reason}
                for c in self.configs]
        return pd.DataFrame(rows)


def plan_pod(analysis: Analysis, request: PodRequest) -> PodPlan:
    """Every configuration of ``request`` for the analysed profile, ranked (see the module's docstring).

    Each option set is a scenario of the analysis's base (:func:`popliner.analysis.scenario`), sharing its
    option-free layer parts; the analysis's own training options are not read.
    """
    base = analysis.base
    if not base.named_layers.names:
        raise UsageProblem(f"{base.profile.path}: no operation got a layer, so there is nothing to split; "
                           "check --layer-name-regex")
    target = base.profile.target
    bytes_per_tile = request.mem_per_tile or target.bytes_per_tile
    budget = base.budget(request.mem_per_tile, request.headroom)
    clock = request.constants.clock_hz or target.clock_hz
    configs: list[PodConfig] = []
    analyses: dict[TrainingOptions, Analysis] = {}
    notes: list[str] = []
    traffic: TrafficTable | None = None  # one for every option set (popliner.pod.search)
    option_sets = list(_option_sets(base, analysis.options.training, request, notes))
    # One option set's range table, counted before any is built (a head placed last or wrapped makes the
    # unlayered operations a layer); then every range the option sets' tables evaluate, as they do (RangeWork).
    layers = len(base.named_layers.names) + (base.has_unlayered and request.head_placement != ("first",))
    check_range_tables(base.profile, layers)
    work = RangeWork(base.profile)
    base.shared.share_between_option_sets()
    # Sharded by R, each depth is an option set of its own: one deeper than its layers builds no memory facts, it
    # takes what the same options said at a smaller depth (the depths come in increasing order).
    known: dict[tuple[str, str, str], OptionSearch | None] = {}
    group: tuple[str, str] | None = None
    for options, depths in option_sets:
        if group is not None and group != (options.recompute, options.optimizer_state):
            # The head placements of one recomputation and state share their deltas, range figures and what-if
            # profiles; the next group's are others: a plan holds one group's at a time (gigabytes on a large
            # profile). The profiled pieces stay while the groups ask for them (SharedParts.forget_deltas).
            base.shared.forget_deltas()
        group = (options.recompute, options.optimizer_state)
        key = (options.head_placement, options.optimizer_state, options.recompute)
        if key in known and known[key] is None:
            continue  # the same options repeat another set's (recomputation compiled in)
        earlier = known.get(key)
        if earlier is not None and min(depths) > _placed_layers(earlier):
            found: OptionSearch | None = _beyond(earlier, depths)
        else:
            with phase("planning the pod"):
                found = _search(base, options, depths, budget, request, analyses, notes, traffic, work)
            known.setdefault(key, found)
        if found is None:
            continue
        traffic = found.traffic
        for k in depths:
            configs.append(_configure(found, found.depths[k], options, request, budget, bytes_per_tile, clock))
    log.debug("the option sets' range tables took %s range figures, %s cells", f"{work.ranges:,}", f"{work.cells:,}")
    ranked = sorted(configs, key=_rank_key)
    notes.extend(near_depths(ranked))
    return PodPlan(request, base.profile.path, base.profile.sha256, base.mode, float(clock),
                   request.batch, tuple(ranked), analyses, tuple(notes))


def _option_sets(base: ProfileBase, given: TrainingOptions, request: PodRequest,
                 notes: list[str]) -> Iterator[tuple[TrainingOptions, tuple[int, ...]]]:
    """Each training option set to analyse and the depths it serves (one depth each when sharded by R).

    ``given``: the options with no choice to try (the regexes). A profile compiled with its optimizer state
    off chip is planned off chip only: popliner cannot put the state back on chip.
    """
    training = base.training
    recomputes = request.recompute if training else ("none",)
    states = request.optimizer_state if training else ("on-chip",)
    if training and base.state_off_chip and "on-chip" in states:
        if "off-chip" not in states:
            raise UsageProblem(compiled_state_refusal(base))
        notes.append("the profile was compiled with its optimizer state off chip: the on-chip configurations "
                     "are left out (popliner cannot put the state back on chip)")
        states = ("off-chip",)
    placements = list(request.head_placement)
    if not base.has_unlayered and len(placements) > 1:
        notes.append("every operation has a layer: --head-placement last and wrap are the same as first")
        placements = ["first"] if "first" in placements else placements[:1]
    placements = _buildable(base, given, request, placements, notes)
    shard = training and request.sharded_optimizer_state
    # The placements innermost: they share the deltas of one recomputation and state, and the states of one
    # recomputation its profiled pieces (plan_pod).
    for recompute in recomputes:
        for state in states:
            for placement in placements:
                changes: dict[str, Any] = {"recompute": recompute, "head_placement": placement,
                                           "optimizer_state": state, "replication_factor": 1,
                                           "sharded_optimizer_state": False}
                options = dataclasses.replace(given, **changes)
                if not shard:
                    yield options, request.depths
                    continue
                for k in request.depths:
                    r = request.pod_ipus // k
                    yield (dataclasses.replace(options, replication_factor=r, sharded_optimizer_state=r > 1),
                           (k,))


def _buildable(base: ProfileBase, given: TrainingOptions, request: PodRequest, placements: list[str],
               notes: list[str]) -> list[str]:
    """The placements the framework builds over the pod's deepest pipeline (a tied head is not put last,
    :func:`popliner.defaults.tie_refusal`): the others are left out with a note, refused when none is left."""
    deepest = max(request.depths)
    tied = base.tied_weight(given)
    refused = {p: tie_refusal(base.framework.name, p, tied, deepest) for p in placements}
    kept = [p for p in placements if refused[p] is None]
    dropped = [p for p in placements if refused[p] is not None]
    if dropped and not kept:
        raise UsageProblem(f"--head-placement {','.join(dropped)} over {deepest} IPUs per replica: "
                           f"{refused[dropped[0]]}")
    if dropped:
        notes.append(f"--head-placement {','.join(dropped)} is left out: {refused[dropped[0]]}")
    return kept


def _placed_layers(found: OptionSearch) -> int:
    """The layers a split of the option set places (a wrapped head goes with IPU 0)."""
    return len(found.analysis.layer_names) - (1 if found.analysis.layout.wraps else 0)


def _beyond(earlier: OptionSearch, depths: tuple[int, ...]) -> OptionSearch:
    """Depths deeper than the layers: no split, the reason search_options gives, and no memory facts built."""
    layers = _placed_layers(earlier)
    return dataclasses.replace(earlier, depths={
        k: DepthSplit(k, None, (), (), f"{k} IPUs per replica is more than the {layers} layers to place")
        for k in depths})


def _search(base: ProfileBase, options: TrainingOptions, depths: tuple[int, ...], budget: int,
            request: PodRequest, analyses: dict[TrainingOptions, Analysis], notes: list[str],
            traffic: TrafficTable | None, work: RangeWork) -> OptionSearch | None:
    """The option set's scenario and splits; None when it only repeats another (recomputation compiled in)."""
    from popliner.memory.ranges import release

    other = scenario(base, options)
    if options.recompute != "none" and other.facts.view.recompute in ("compiled", "none"):
        note = "the profile was compiled with recomputation: --recompute pipeline and every-layer change nothing"
        if base.training and note not in notes:
            notes.append(note)
        return None
    log.debug("planning %s over %s IPUs per replica", options.as_dict(), ",".join(map(str, depths)))
    found = search_options(other, depths, budget, request.constants.link_bandwidth, traffic, work)
    # The splits hold their figures; the range tables' state (gigabytes on a large profile) goes now, and the
    # plan keeps a scenario of the same options whose facts are built again only if asked for (a config from it).
    release(other.range_memo)
    analyses[options] = scenario(base, options)
    return dataclasses.replace(found, analysis=analyses[options])


def _configure(found: OptionSearch, depth: DepthSplit, options: TrainingOptions, request: PodRequest, budget: int,
               bytes_per_tile: int, clock: float) -> PodConfig:
    """The configuration of one depth: G, and the step time when the split fits and G is allowed."""
    from popliner.pipeline import num_pipeline_stages

    analysis = found.analysis
    k = depth.ipus
    r = request.pod_ipus // k
    training = analysis.mode == "training"
    stages = num_pipeline_stages(training, k, analysis.layout.wraps)
    samples = request.micro_batch * r
    g = request.batch // samples if request.batch % samples == 0 else None
    config = PodConfig(
        ipus_per_replica=k, replicas=r, gradient_accumulation=g, micro_batch=request.micro_batch,
        recompute=found.recompute, head_placement=options.head_placement,
        optimizer_state=options.optimizer_state if training else "on-chip",
        sharded_optimizer_state=training and request.sharded_optimizer_state and r > 1, pipeline_stages=stages,
        budget=budget, bytes_per_tile=bytes_per_tile, split=depth.split,
        gradient_bytes=tuple(t.gradient_bytes for t in depth.traffic),
        state_bytes=tuple(t.state_bytes for t in depth.traffic),
        options=options,
    )
    if depth.split is None:
        return dataclasses.replace(config, reason=depth.reason)
    if g is None:
        return dataclasses.replace(config, reason=f"the global batch {request.batch} is not a multiple of "
                                                  f"M x R = {request.micro_batch} x {r}")
    if g > MAX_MICRO_BATCHES:
        return dataclasses.replace(config, reason=f"G = {g:,} micro-batches is more than the {MAX_MICRO_BATCHES:,} a "
                                                  "pipeline config takes; a smaller --global-batch allows it")
    if g < stages:
        return dataclasses.replace(config, reason=f"G = {g} micro-batches is fewer than the {stages} pipeline "
                                                  f"stages; a global batch of {stages * samples} or more allows it")
    step = _step(depth, analysis, g, r, request.constants, clock)
    rate = request.micro_batch * g * r / step.seconds if step.seconds > 0 else None
    return dataclasses.replace(config, step=step, samples_per_second=rate)


def _step(depth: DepthSplit, analysis: Analysis, g: int, r: int, constants: PodConstants,
          clock: float) -> StepTime:
    """The step of the split's pipeline (the simulator's stages), then each IPU's all-reduce and streaming."""
    assert depth.split is not None
    tail = [(allreduce_seconds(t.gradient_bytes, r, constants.replica_bandwidth),
             streaming_seconds(t.state_bytes, constants.streaming_bandwidth)) for t in depth.traffic]
    return pipeline_step(analysis, depth.split, g, constants, clock, tail)


def pipeline_step(analysis: Analysis, split: SplitResult, g: int, constants: PodConstants, clock: float,
                  tail: Sequence[tuple[float, float]] = ()) -> StepTime:
    """The step of one replica of ``split`` with G = ``g``: its pipeline stages as the simulator makes them
    (each IPU through the record a config keeps of it, as simulate reads a config), then ``tail`` (each
    IPU's all-reduce and streaming seconds; none: one replica, on-chip state)."""
    from popliner.layout import HEAD_GROUP
    from popliner.pipeline import StageLayout
    from popliner.simulator.inputs import pipeline_stages, split_ipu_figures

    training = analysis.mode == "training"
    wraps = analysis.layout.wraps_at(len(split.stages))
    ipus = split_ipu_figures(split.stages, int(analysis.profile.target.tiles_per_ipu), training, wraps)
    plan = StageLayout(len(ipus), training, HEAD_GROUP if wraps else None)
    stages = pipeline_stages(plan, ipus, None if wraps else 0)
    send = [0.0] * len(ipus)
    for s in stages:
        if s.index + 1 < len(stages) and stages[s.index + 1].ipu != s.ipu and s.send_bytes > 0:
            send[s.ipu] += s.send_bytes / constants.link_bandwidth * clock
    return step_time([s.cycles for s in stages], [s.ipu for s in stages], send, g, clock_hz=clock,
                     sync_cycles=constants.sync_cycles, tail=tail)


def near_depths(ranked: Sequence[PodConfig]) -> list[str]:
    """A line for each other depth whose fastest fitting configuration is within :data:`popliner.near.NEAR_SHARE`
    of the pick's samples per second (the first of ``ranked``), shallower ones first."""
    from popliner.near import NEAR_SHARE

    fitting = [c for c in ranked if c.fits and c.samples_per_second]
    if not fitting:
        return []
    pick = fitting[0]
    assert pick.samples_per_second is not None
    best: dict[int, PodConfig] = {}
    for c in fitting:
        best.setdefault(c.ipus_per_replica, c)
    out = []
    for k in sorted(best):
        c = best[k]
        assert c.samples_per_second is not None
        share = 1.0 - c.samples_per_second / pick.samples_per_second
        if k == pick.ipus_per_replica or share > NEAR_SHARE:
            continue
        out.append(f"within {share * 100:.1f} %: a {'shallower' if k < pick.ipus_per_replica else 'deeper'} "
                   f"pipeline, {_config_text(c)} at {c.samples_per_second:,.1f} samples/s; the pick, "
                   f"{_config_text(pick)}, at {pick.samples_per_second:,.1f}")
    return out


def _config_text(c: PodConfig) -> str:
    k, r = c.ipus_per_replica, c.replicas
    return (f"{k} IPU{'s' * (k > 1)} x {r} replica{'s' * (r > 1)}, G = {c.gradient_accumulation}, recompute "
            f"{c.recompute}, head {c.head_placement}, [{c.split_text}]")


def _rank_key(c: PodConfig) -> tuple[object, ...]:
    """Fitting first, the fastest first (the least full without cycles), then fewer IPUs per replica, options."""
    fullest = c.fullest_bytes if c.fullest_bytes is not None else 1 << 62
    rate = c.samples_per_second if c.samples_per_second is not None else 0.0
    return (not c.fits, -rate, fullest, c.ipus_per_replica, _order(RECOMPUTES + ("compiled",), c.recompute),
            _order(HEAD_PLACEMENTS, c.head_placement), _order(OPTIMIZER_STATES, c.optimizer_state))


def _order(values: tuple[str, ...], value: str) -> int:
    return values.index(value) if value in values else len(values)
