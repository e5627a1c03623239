"""One analysed profile: loaded (or cached), operations derived, layers assigned: a thin facade.

:func:`load_analysis` is the entry point of the library for everything that
works per layer: breakdowns, solvers, the simulator and the CI check. The
memory figures come from :class:`popliner.memory.facts.MemoryFacts` and the
pure functions of :mod:`popliner.memory.stages`, the
pipeline rules from :mod:`popliner.pipeline`; the solvers take a
:class:`popliner.solvers.problem.SplitProblem` and range costs
(:func:`solve_split` hands them over).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from popliner.base import DEFAULT_BACKWARD_REGEX, AnalysisOptions, ProfileBase
from popliner.errors import UsageProblem
from popliner.framework import FrameworkChoice
from popliner.hardware import DEFAULT_LINK_BANDWIDTH
from popliner.layout import Layout
from popliner.memory.training import TrainingOptions
from popliner.memory.work import RangeWork, check_work
from popliner.ops.layers import LayerAssignment, announce_layers, choose_layers, layers_key
from popliner.ops.operations import OperationTable, derive_operations
from popliner.profile.cache import Bad, PendingStore, cache_path, check_csr, check_len, check_range, load_cached
from popliner.profile.files import read_profile_bytes
from popliner.profile.model import Profile
from popliner.progress import phase
from popliner.regexes import compile_bounded

# The memory facts, the pipeline rules, the solvers and the document reader are imported
# where they are used: a cached load needs none of them, and every module costs start-up time.
if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts
    from popliner.memory.model import MemoryModel
    from popliner.memory.range_state import RangeMemo
    from popliner.memory.ranges import ProfileRanges
    from popliner.memory.running import Pieces
    from popliner.memory.types import StageMemory
    from popliner.pipeline import StageFigure
    from popliner.solvers.problem import SplitProblem
    from popliner.solvers.result import SplitResult, StageResult
    from popliner.solvers.solve import SolverName

__all__ = ["DEFAULT_BACKWARD_REGEX", "Analysis", "AnalysisOptions", "ProfileBase", "analyse_profile", "load_analysis",
           "scenario", "solve_split"]

log = logging.getLogger(__name__)

#: Files at least this big get a "reading" progress line before the long parse.
_ANNOUNCE_BYTES = 16 << 20
#: The options a load takes when given none (a frozen value: safe as every call's default).
DEFAULT_OPTIONS = AnalysisOptions()


@dataclass(frozen=True, eq=False)
class Analysis:
    """One scenario: a profile's base (:class:`popliner.base.ProfileBase`) under one set of training options.

    Made only by :func:`scenario` (a pure function of the base and the
    options). The figures come from :attr:`facts` (a
    :class:`popliner.memory.facts.MemoryFacts`); the methods here take
    layer names, as users and configs give them, and hand indices on.
    """

    base: ProfileBase
    #: The layers under the options' head placement (the base's named layers grouped for ``last``/``wrap``).
    layers: LayerAssignment
    #: The base's reading options with this scenario's training options.
    options: AnalysisOptions

    def __repr__(self) -> str:
        t = self.options.training
        return (f"<popliner scenario of {self.profile.path}: {self.mode}, {len(self.layer_names)} layers, "
                f"recompute {t.recompute}, optimizer state {t.optimizer_state}, head {t.head_placement}>")

    # -- what the base decides ------------------------------------------------------

    @property
    def profile(self) -> Profile:
        return self.base.profile

    @property
    def ops(self) -> OperationTable:
        return self.base.ops

    @property
    def named_layers(self) -> LayerAssignment:
        """The layers the naming rule gave, before the head placement grouped the unlayered operations."""
        return self.base.named_layers

    @property
    def from_cache(self) -> bool:
        return self.base.from_cache

    @property
    def is_backward(self) -> np.ndarray:
        """Bool per operation: part of the backward pass or the weight update (by name)."""
        return self.base.is_backward

    @property
    def mode(self) -> str:
        return self.base.mode

    @property
    def framework(self) -> FrameworkChoice:
        """The framework that compiled the profile (or ``--framework``): popliner.framework."""
        return self.base.framework

    @property
    def whole_memory(self) -> StageMemory:
        """Every operation with every one of its variables: the whole single-IPU program (the base's)."""
        return self.base.whole_memory

    @cached_property
    def layout(self) -> Layout:
        """Where the embedding and the head go: the one layout of this scenario, which the memory facts read too."""
        return Layout.of(self.layers.names, self.options.training.head_placement)

    @cached_property
    def facts(self) -> MemoryFacts:
        """The memory facts of this scenario, made once when first read (a cached load needs none)."""
        from popliner.memory.facts import memory_facts

        counted = self.layers.layer_of_op >= 0 if self.options.layered_vars_only else np.ones(self.ops.count, bool)
        return memory_facts(self.profile, self.ops, self.layers.layer_of_op, self.layers.names, counted,
                            self.is_backward, self.mode == "training", self.options.training,
                            self.base.shared.view_memo, layout=self.layout,
                            core=self.base.layer_core(self.options.training.update_regex))

    @cached_property
    def range_memo(self) -> RangeMemo:
        """What this scenario's range tables share (:class:`popliner.memory.range_state.RangeMemo`)."""
        from popliner.memory.range_state import RangeMemo

        return RangeMemo(self.base.shared)

    def range_table(self, limit: int, link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH, *,
                    deadline: float | None = None, lazy: bool = False, pieces: Pieces | None = None,
                    work: RangeWork | None = None, regrow: bool = True) -> ProfileRanges:
        """A range table of this scenario's facts up to ``limit`` (:class:`popliner.memory.ranges.ProfileRanges`).

        Every table of the scenario shares its :attr:`range_memo`; ``pieces``: the running sets' sizes (tests);
        ``work``: a pod plan's account of the ranges evaluated; ``regrow``: keep finished rows for a table of a
        higher limit (a plan builds none).
        """
        from popliner.memory.ranges import ProfileRanges
        from popliner.memory.running import PIECES

        return ProfileRanges(self.facts, self.range_memo, limit, link_bytes_per_second,
                             PIECES if pieces is None else pieces, deadline, lazy, work, regrow)

    @property
    def model(self) -> MemoryModel:
        return self.facts.model

    # -- layers and operations -----------------------------------------------

    @property
    def layer_names(self) -> tuple[str, ...]:
        return self.layers.names

    def layer_index(self, name: str) -> int:
        try:
            return self.layer_names.index(name)
        except ValueError:
            raise UsageProblem(f"no layer named {name!r}; layers are {_preview(self.layer_names)}") from None

    def layer_indices(self, names: Sequence[str]) -> list[int]:
        return [self.layer_index(name) for name in names]

    def stage_ops(self, layers: Sequence[str], first_stage: bool) -> np.ndarray:
        """Operations of the given layers, plus the unlayered ones for the first stage."""
        from popliner.memory.stages import stage_ops

        return stage_ops(self.facts, self.layer_indices(layers), first_stage)

    # -- figures (by layer name) -------------------------------------------------

    def stage_memory(self, layers: Sequence[str], first_stage: bool = False) -> StageMemory:
        from popliner.memory.stages import stage_memory

        return stage_memory(self.facts, self.stage_ops(layers, first_stage))

    def pipeline_figures(self, stages: Sequence[Sequence[str]]) -> tuple[StageFigure, ...]:
        """Each IPU's figure (model, stash, copy buffers) for a placement given by layer names."""
        from popliner.pipeline import stage_figures

        return stage_figures(self.facts, [self.layer_indices(group) for group in stages])

    def stage_results(self, stages: Sequence[Sequence[str]], budget: int) -> list[StageResult]:
        """Each IPU of a placement given by layer names, as its record against ``budget`` bytes per tile."""
        from popliner.solvers.result import stage_result

        return [stage_result(figure, self.layer_names, budget) for figure in self.pipeline_figures(stages)]

    # Per-operation and per-variable arrays the review tables read.

    @property
    def op_cycles(self) -> np.ndarray:
        return self.facts.cycles.op_cycles

    @property
    def always_live_var(self) -> np.ndarray:
        return self.facts.always_live_var


def solve_split(analysis: Analysis, problem: SplitProblem, *, solver: SolverName = "ilp", time_limit: float = 60.0,
                link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH, started: float | None = None) -> SplitResult:
    """Split the analysed profile's layers over at most ``problem.num_ipus`` IPUs, with each stage's figures.

    The solvers see only the problem and the profile's range costs; each
    stage's figures then come from :func:`popliner.pipeline.range_figure`.
    A stage over budget (a best effort) says on which tile, at which step
    and with which variables it overflows.

    ``time_limit`` bounds the whole solve, from ``started`` (a
    ``time.monotonic()`` value; default: now): the memory facts and the
    range tables set up on them, the search, a best effort and the overflow
    details. Each step checks the deadline between units of work (a range,
    a stage), so a step in progress may overrun it by one unit; the set-up
    (the memory facts, the tables' liveness grid) is one such unit. The note says
    what the limit cut short.
    """
    from popliner.solvers.result import TIMEOUT, SplitResult
    from popliner.solvers.solve import SplitOutcome, solve_bounds

    t0 = time.perf_counter()
    started = time.monotonic() if started is None else started
    deadline = started + time_limit
    facts = analysis.facts  # the memory facts and their training view: set-up the limit counts
    if time.monotonic() >= deadline:
        # Spent on the facts: no range table is set up either (its liveness grid takes a while too).
        outcome = SplitOutcome(solver, TIMEOUT, (), note=f"the {time_limit:g} s time limit ran out while "
                               "the memory facts were built, before any range was evaluated: nothing was searched")
    else:
        # The tables stop their own row extension at the deadline, so that greedy's fill and the first
        # rows read are bounded by --time-limit too; the stages' figures below are then read without it.
        # Lazy: greedy and the exact DP read each row in order and only as far as a split they look for can use
        # it (the DP only within the best value with memory left out, when a split reaches it).
        table = analysis.range_table(problem.budget, link_bytes_per_second, deadline=deadline, lazy=True)
        outcome = solve_bounds(
            table, problem, solver=solver, time_limit=time_limit, started=started,
            # Lazy: the best effort and the fewest-IPUs search read rows in order and only as far as they need.
            relaxed=lambda factor: analysis.range_table(int(problem.budget * factor), link_bytes_per_second,
                                                        deadline=deadline, lazy=True),
            layer_need=lambda k: _layer_need(facts, table, k),
        )
    explain = outcome.status in ("INFEASIBLE", TIMEOUT)
    stages, note = _stage_results(analysis, problem, outcome.bounds, explain, deadline, time_limit)
    return SplitResult(outcome.solver, outcome.status, analysis.mode, problem.requested, problem.budget, stages,
                       objective=outcome.objective, bound=outcome.bound, gap=outcome.gap,
                       wall_seconds=time.perf_counter() - t0, note=outcome.note + note)


def _stage_results(analysis: Analysis, problem: SplitProblem, bounds: Sequence[tuple[int, int]], explain: bool,
                   deadline: float, time_limit: float) -> tuple[tuple[StageResult, ...], str]:
    """Each stage's figures, and for a stage over budget (when ``explain``) why, while the deadline allows.

    The figures are the result itself and are always read; the overflow
    details of the stages left when the deadline passes are not, and the
    note (second item) says so.
    """
    from popliner.memory.overflow import overflow_detail
    from popliner.memory.stages import range_ops
    from popliner.pipeline import range_figure
    from popliner.solvers.result import stage_result

    facts = analysis.facts
    table = analysis.range_table(problem.budget)
    stages: list[StageResult] = []
    skipped: list[int] = []
    for k, (i, j) in enumerate(bounds):
        # The model's figure and stash entry of the range from the table's running sets (memoised).
        result = stage_result(range_figure(facts, i, j, k, len(bounds), table), analysis.layer_names,
                              problem.budget)
        if explain and not result.fits:
            if time.monotonic() < deadline:
                detail = overflow_detail(facts.model, table.stage_ops(i, j) if k == 0 else range_ops(facts, i, j),
                                         result.worst_tile)
                result = dataclasses.replace(result, overflow=detail)
            else:
                skipped.append(k)
        stages.append(result)
    note = ""
    if skipped:
        note = (f"; the {time_limit:g} s time limit ran out before the overflow details of "
                f"{len(skipped)} stage(s) over budget (IPUs {_preview([str(k) for k in skipped], 6)}) were found")
    return tuple(stages), note


def _layer_need(facts: MemoryFacts, table: ProfileRanges, k: int) -> str:
    """What layer ``k`` alone needs on its worst tile; at 0 with a wrapped head, also the two parts' own figures."""
    from popliner.memory.stages import stage_memory, stage_ops

    need = f"needs {table.stage_memory(k, k).worst_bytes:,} bytes on its worst tile"
    head_layer = facts.layout.head
    if k == 0 and facts.layout.wraps and head_layer is not None:
        first = stage_memory(facts, stage_ops(facts, [0], first_stage=True)).worst_bytes
        head = stage_memory(facts, stage_ops(facts, [head_layer], first_stage=False)).worst_bytes
        need += (f" ({facts.layer_names[0]} {first:,} and {facts.layer_names[head_layer]} {head:,} "
                 "on their own worst tiles)")
    return need


def _preview(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _check_regexes(options: AnalysisOptions) -> None:
    for pattern, flag in ((options.layer_name_regex, "--layer-name-regex"),
                          (options.inputs_regex_layer_0, "--inputs-regex-layer-0"),
                          (options.backward_regex, "--backward-regex")):
        if pattern is not None:
            compile_bounded(pattern, flag)


def _layers_key(options: AnalysisOptions) -> str:
    return layers_key(options.layer_preset, options.layer_name_regex, options.inputs_regex_layer_0,
                      options.layer_order)


def _choose_layers(ops: OperationTable, options: AnalysisOptions) -> LayerAssignment:
    with phase("assigning layers"):
        return choose_layers(ops, options.layer_preset, options.layer_name_regex, options.inputs_regex_layer_0,
                             options.layer_order)


def scenario(base: ProfileBase, training: TrainingOptions) -> Analysis:
    """The base under ``training`` (options as applied, resolved by :func:`popliner.scenario.resolve`): pure.

    The layers are the base's named layers grouped for the head placement
    (memoised on the base); everything else the scenario reads of the profile
    comes from the base, and so do the option-free layer parts its range
    tables start from (:attr:`ProfileBase.shared`): each scenario adds only
    its options' delta.
    """
    options = dataclasses.replace(base.options, training=training)
    return Analysis(base, base.layers_for(training), options)


def analyse_profile(profile: Profile, options: AnalysisOptions = DEFAULT_OPTIONS,
                    ops: OperationTable | None = None, layers: LayerAssignment | None = None,
                    from_cache: bool = False, whole_per_tile: np.ndarray | None = None) -> Analysis:
    """The base of an already loaded profile (its operations and named layers, checked), and its scenario under
    ``options.training``.

    ``layers``: the assignment :func:`choose_layers` gives ``ops`` under these options, when already known.
    """
    _check_regexes(options)
    if ops is None:
        with phase("deriving operations"):
            ops = derive_operations(profile, options.op_layers)
    if layers is None:
        layers = _choose_layers(ops, options)
    check_work(profile, ops)  # before anything is allocated from the profile's sizes
    if ops.count == 0 and ops.reachable_programs:
        # Not an error: every figure is still computed, but nothing can be grouped into layers or split.
        log.warning("%s: none of its %d programs carries a debug context (the profile has %d), so there are no "
                    "operations and no layers: memory is reported unattributed; export the profile again with "
                    "the compiler's debug information (debug.cbor) to get operations", profile.path,
                    ops.reachable_programs, profile.contexts.count)
    elif ops.unattributed_programs:
        log.info("%d of %d reachable programs have no debug context and belong to no operation",
                 ops.unattributed_programs, ops.reachable_programs)
    base = ProfileBase(profile, ops, layers, dataclasses.replace(options, training=TrainingOptions()), from_cache,
                       whole_per_tile)
    return scenario(base, options.training)


@dataclass(frozen=True, eq=False)
class CachedDerived:
    """What the cache keeps beside the profile: its operations and :attr:`Analysis.whole_memory`'s figures.

    The whole program's figure depends on the profile and its operations
    only (no option), and is most of a cached layer table's work: 0.26 s of
    CPU at 1x, a few bytes per tile to keep.
    """

    ops: OperationTable
    whole_per_tile: np.ndarray  # StageMemory.per_tile of whole_program_memory


def _check_cached(profile: Profile, derived: CachedDerived, layers: LayerAssignment | None) -> None:
    """Raise ``cache.trust.Bad`` when a cached operation table or layer assignment indexes outside the profile."""
    from popliner.memory.categories import other_categories
    from popliner.memory.types import COMPONENTS

    if not isinstance(derived.ops, OperationTable):
        raise Bad("its operations are of another type")
    whole = derived.whole_per_tile
    rows = len(COMPONENTS) + (1 if other_categories(profile.tile_memory) else 0)
    if not isinstance(whole, np.ndarray) or whole.dtype != np.int64 or whole.shape != (rows, profile.tiles):
        raise Bad(f"the whole program's figures are not {rows} rows of int64 per tile")
    ops = derived.ops
    n, steps, programs = ops.count, profile.num_steps, profile.programs.count
    for name in ("context", "op_type", "inputs", "is_call", "is_tensor", "first_step", "last_step"):
        check_len(f"operation {name}", getattr(ops, name), n)
    check_range("operation contexts", ops.context, 0, profile.contexts.count)
    check_range("operation steps", np.concatenate((ops.first_step, ops.last_step)), -1, steps)
    check_csr("operation programs", ops.prog_ptr, ops.prog_idx, n, programs)
    if ops.num_variables != profile.variables.count:
        raise Bad("the operation table is for another number of variables")
    check_csr("operation variables", ops.var_ptr, ops.var_idx, n, ops.num_variables)
    check_len("operation of program", ops.op_of_program, programs)
    check_range("operation of program", ops.op_of_program, -1, n)
    check_len("operation of step", ops.op_of_step, steps)
    check_range("operation of step", ops.op_of_step, -1, n)
    if layers is not None:
        check_len("layer of operation", layers.layer_of_op, n)
        check_len("layer notes", layers.note, n)
        check_range("layer of operation", layers.layer_of_op, -1, len(layers.names))


def load_analysis(path: str, options: AnalysisOptions = DEFAULT_OPTIONS, *, use_cache: bool = True,
                  cache_dir: str | None = None) -> Analysis:
    """Load a profile file (through the cache in ``cache_dir`` unless ``use_cache`` is off) and analyse it.

    The cache holds the profile, its operations and the layer assignment of
    the options it was written with; other layer options choose again.
    """
    t0 = time.perf_counter()
    with phase("reading"):
        raw = read_profile_bytes(path)
        sha = hashlib.sha256(raw).hexdigest()
    key = options.cache_key()
    where = cache_path(sha, key, cache_dir)
    if use_cache:
        with phase("reading the cache"):
            hit = load_cached(where, sha, key, str(path), CachedDerived, LayerAssignment, _check_cached,
                              parts=(OperationTable,))
        if hit is not None:
            log.info("loaded %s from cache in %.2f s", path, time.perf_counter() - t0)
            layers = None
            if hit.layers is not None and hit.layers[0] == _layers_key(options):
                _check_regexes(options)  # as analyse_profile would, before the layers are announced
                layers = hit.layers[1]
                with phase("assigning layers"):
                    announce_layers(layers, options.layer_preset, options.layer_name_regex)
            return analyse_profile(hit.profile, options, ops=hit.derived.ops, layers=layers, from_cache=True,
                                   whole_per_tile=hit.derived.whole_per_tile)
    if len(raw) > _ANNOUNCE_BYTES:
        log.info("reading %s (%.1f MB)", path, len(raw) / 1e6)
    from popliner.profile.loader import parse_profile_bytes, small_pages

    with small_pages(), contextlib.ExitStack() as stack:  # small_pages: gigabytes of short-lived arrays
        with phase("parsing"):
            profile = parse_profile_bytes(raw, str(path), sha256=sha)
        del raw
        # The profile's columns are packed for the cache on other threads while the operations
        # and layers are worked out here (nothing is written if that fails).
        pending = stack.enter_context(PendingStore(profile)) if use_cache else None
        with phase("deriving operations"):
            ops = derive_operations(profile, options.op_layers)
        log.info("loaded %s in %.2f s: %d programs, %d steps, %d variables, %d operations", path,
                 time.perf_counter() - t0, profile.programs.count, profile.num_steps, profile.variables.count,
                 ops.count)
        _check_regexes(options)  # before anything is chosen or written, as analyse_profile would
        layers = _choose_layers(ops, options)
        whole = None
        if pending is not None:
            from popliner.memory.model import whole_program_memory

            whole = whole_program_memory(profile, ops).per_tile  # while the columns are packed on other threads
            with phase("writing the cache"):
                pending.finish(where, sha, key, CachedDerived(ops, whole), (_layers_key(options), layers))
    return analyse_profile(profile, options, ops=ops, layers=layers, whole_per_tile=whole)

