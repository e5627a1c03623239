"""What the HTML report shows, gathered from the library as plain values.

:func:`build_report` asks each figure of the library that computes it: the
IPUs' per-tile memory from the pipeline rules (:meth:`Analysis.stage_results`),
the layer rows from the breakdown, the liveness series from the memory
model's own window and variables, the schedule from the simulator. The page
(:mod:`popliner.writers.html`) only formats them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner import __version__
from popliner.analysis import Analysis
from popliner.breakdown import LayerRow
from popliner.config.model import PipelineConfig
from popliner.memory.timeline import stage_live_bytes
from popliner.report.aggregate import Pooled, max_pool
from popliner.report.options import OptionRow, model_options
from popliner.report.planner import Planner, build_planner
from popliner.simulator.engine import DEFAULT_LINK_BANDWIDTH, DEFAULT_SYNC_CYCLES, SimResult, simulate
from popliner.simulator.inputs import inputs_from_analysis
from popliner.solvers.result import StageResult

__all__ = ["LIVENESS_POINTS", "Liveness", "Report", "build_report", "fullest_ipu", "liveness", "split_simulation"]

#: Most points a liveness curve keeps (max-pooled: every bucket keeps its peak).
LIVENESS_POINTS = 1500


@dataclass(frozen=True, eq=False)
class Liveness:
    """Live variable bytes over the program steps of one IPU's operations.

    ``on_tile`` is the IPU's worst tile, ``summed`` all its tiles; both are
    max-pooled to at most :data:`LIVENESS_POINTS` points. ``room`` is what the
    budget leaves for variables on that tile once code, state, stash and copy
    buffers are in: the curve crosses it exactly when the IPU does not fit.
    """

    ipu: int
    tile: int
    first_step: int
    last_step: int
    on_tile: Pooled
    summed: Pooled
    peak_step: int
    peak_bytes: int
    room: int


@dataclass(frozen=True, eq=False)
class Report:
    """Everything one HTML report shows."""

    version: str
    profile_path: str
    profile_sha256: str
    source: str  # where the split came from: a config file or the solver
    mode: str
    tiles: int
    bytes_per_tile: int
    budget: int
    ipus: tuple[StageResult, ...]
    layers: tuple[LayerRow, ...]
    unlayered: LayerRow | None
    liveness: Liveness
    sim: SimResult
    options: tuple[OptionRow, ...]
    #: Every contiguous split over the report's IPUs, for the page's planner.
    planner: Planner
    #: The training options of the figures in one line (empty in inference).
    training: str = ""
    #: How much of the compiler's own figure the model accounts for (profiles with other categories; else empty).
    coverage: str = ""

    @property
    def fits(self) -> bool:
        return all(i.fits for i in self.ipus)

    @property
    def ipu_of_layer(self) -> dict[str, int]:
        return {layer: i.ipu for i in self.ipus for layer in i.layers}


def build_report(analysis: Analysis, config: PipelineConfig, *, budget: int, source: str,
                 link_bandwidth: float = DEFAULT_LINK_BANDWIDTH, sync_cycles: float = DEFAULT_SYNC_CYCLES,
                 micro_batch_size: int = 1, gradient_accumulation: int | None = None) -> Report:
    """The report of ``config``'s split of the analysed profile, against ``budget`` bytes per tile, with the
    figures of every contiguous split over the config's IPUs (the page's planner)."""
    from popliner.breakdown import layer_rows, unlayered_row

    ipus = tuple(analysis.stage_results(config.layer_groups, budget))
    g = gradient_accumulation if gradient_accumulation is not None else config.gradient_accumulation
    target = analysis.profile.target
    sim = split_simulation(analysis, config, budget=budget, micro_batches=g, link_bandwidth=link_bandwidth,
                           sync_cycles=sync_cycles, micro_batch_size=micro_batch_size)
    return Report(
        version=__version__, profile_path=analysis.profile.path, profile_sha256=analysis.profile.sha256,
        source=source, mode=analysis.mode, tiles=int(target.tiles_per_ipu), bytes_per_tile=int(target.bytes_per_tile),
        budget=budget, ipus=ipus, layers=layer_rows(analysis), unlayered=unlayered_row(analysis),
        liveness=liveness(analysis, fullest_ipu(ipus)), sim=sim,
        options=model_options(analysis, config, g, micro_batch_size, link_bandwidth, sync_cycles),
        training=config.options.summary() if config.options is not None else "",
        coverage=_coverage(analysis),
        planner=build_planner(analysis, config, budget=budget, micro_batches=g, micro_batch_size=micro_batch_size,
                              clock_hz=float(target.clock_hz), link_bandwidth=link_bandwidth,
                              sync_cycles=sync_cycles, ipus=ipus),
    )


def split_simulation(analysis: Analysis, config: PipelineConfig, *, budget: int, micro_batches: int,
                     link_bandwidth: float, sync_cycles: float, micro_batch_size: int) -> SimResult:
    """One step of ``config``'s split on the simulator, its IPUs' figures recomputed from the profile."""
    target = analysis.profile.target
    inputs = inputs_from_analysis(config, analysis, tiles_per_ipu=int(target.tiles_per_ipu),
                                  clock_hz=float(target.clock_hz))
    return simulate(inputs.stages, micro_batches, clock_hz=inputs.clock_hz, link_bandwidth=link_bandwidth,
                    sync_cycles=sync_cycles, budget_bytes=budget, micro_batch_size=micro_batch_size,
                    tiles_per_ipu=inputs.tiles_per_ipu, sharded=config.execution == "sharded")


def _coverage(analysis: Analysis) -> str:
    """One sentence on the model against the compiler, for a profile with the compiler's other categories."""
    from popliner.breakdown import profile_coverage
    from popliner.memory.coverage import coverage_line

    cov = profile_coverage(analysis) if analysis.model.has_other else None
    return f"On one IPU, {coverage_line(cov)}." if cov is not None else ""


def fullest_ipu(ipus: tuple[StageResult, ...]) -> StageResult:
    """The IPU whose worst tile holds the most bytes (the first on ties)."""
    return max(ipus, key=lambda i: (i.worst_tile_bytes, -i.ipu))


def liveness(analysis: Analysis, ipu: StageResult) -> Liveness:
    """Live variables over the steps of ``ipu``'s operations, on its worst tile and summed over tiles."""
    ops = analysis.stage_ops(ipu.layers, first_stage=ipu.ipu == 0)
    tile = ipu.worst_tile
    lo, on_tile = stage_live_bytes(analysis.model, ops, tile)
    _, summed = stage_live_bytes(analysis.model, ops)
    hi = lo + len(on_tile) - 1
    peak = int(np.argmax(on_tile)) if on_tile.size else 0
    parts = ipu.worst_components
    others = ipu.worst_tile_bytes - parts["variables"]
    return Liveness(
        ipu=ipu.ipu, tile=tile, first_step=lo, last_step=hi,
        on_tile=max_pool(on_tile, LIVENESS_POINTS, offset=lo), summed=max_pool(summed, LIVENESS_POINTS, offset=lo),
        peak_step=lo + peak, peak_bytes=int(on_tile[peak]) if on_tile.size else 0, room=ipu.budget - others,
    )
