"""Plots that read at a glance: the Gantt's kinds, colours, legend and title; the tile plot; aggregation.

Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest

from popliner.pipeline import StageLayout
from popliner.report.aggregate import grid_values, max_pool, tile_grid
from popliner.simulator import SimStage, simulate
from popliner.simulator.inputs import IpuFigures, pipeline_stages
from popliner.solvers.result import StageResult
from popliner.writers.gantt import (
    BAR_COLOURS,
    BAR_KINDS,
    legend_entries,
    schedule_bars,
    schedule_title,
    write_gantt,
)
from popliner.writers.plots import plot_tiles
from tests.helpers import ipu_memory


def _png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def training_result(k: int, g: int | None = None) -> object:
    """K IPUs in training: forward 100 cycles, backward 200, 10 bytes between IPUs."""
    figures = [IpuFigures(100, 200, np.full(4, 10, np.int64), np.full(4, 1, np.int64), 10 if i else 0, f"L{i}")
               for i in range(k)]
    stages = pipeline_stages(StageLayout(k, training=True), figures)
    return simulate(stages, g or 2 * len(stages), clock_hz=1e9, sync_cycles=5, budget_bytes=100)


# ---------------------------------------------------------------------- Gantt


def test_colours_are_distinct_and_copies_alone_are_grey() -> None:
    assert len(set(BAR_COLOURS.values())) == len(BAR_KINDS)
    assert BAR_COLOURS["copy"] == "#999999"
    assert all(BAR_COLOURS[k] != BAR_COLOURS["copy"] for k in BAR_KINDS if k != "copy")


def test_bars_carry_the_stage_kind() -> None:
    # K = 2 training: PS0 forward (IPU 0), PS1 forward+backward (IPU 1), PS2 backward (IPU 0).
    r = training_result(2, g=3)
    bars = schedule_bars(r)  # type: ignore[arg-type]
    kinds = {(b.stage, b.kind) for b in bars if b.kind not in ("copy", "sync")}
    assert kinds == {(0, "forward"), (1, "forward+backward"), (2, "backward")}
    # 3 stages x 3 micro-batches of compute; IPU 0 sends in PS0 and IPU 1 in PS1 every cycle
    # (N = 3 + 2 = 5 cycles) = 10 copies; sync on both IPUs in every cycle = 10.
    assert sum(b.kind in BAR_KINDS[:4] for b in bars) == 9
    assert sum(b.kind == "copy" for b in bars) == 10
    assert sum(b.kind == "sync" for b in bars) == 10
    first = next(b for b in bars if b.stage == 0 and b.microbatch == 0 and b.kind == "forward")
    assert (first.start_us, first.duration_us, first.label) == (0.0, 0.1, "0:0")  # 100 cycles at 1 GHz


def test_legend_names_every_kind_of_the_mode() -> None:
    r = training_result(2, g=3)
    entries = dict(legend_entries(r, schedule_bars(r)))  # type: ignore[arg-type]
    assert list(entries) == ["forward", "backward", "forward+backward", "recompute", "copy", "sync"]
    assert entries["recompute"] == "recompute (none)" and entries["backward"] == "backward"
    inference = simulate([SimStage(0, 0, "forward", 100, 0)], 1, clock_hz=1e9)
    assert [k for k, _ in legend_entries(inference, schedule_bars(inference))] == ["forward", "copy", "sync"]


def test_title_names_mode_k_and_g_with_singulars() -> None:
    one = simulate([SimStage(0, 0, "forward", 1000, 0)], 1, clock_hz=1e9)
    assert schedule_title(one).startswith("Inference: K = 1 IPU, 1 pipeline stage, G = 1 micro-batch; step 1.000 us")
    many = training_result(4, g=8)
    assert schedule_title(many).startswith(  # type: ignore[arg-type]
        "Training: K = 4 IPUs, 7 pipeline stages, G = 8 micro-batches; step")


@pytest.mark.parametrize("k", [2, pytest.param(16, marks=pytest.mark.slow)])
def test_gantt_wraps_long_runs_over_panels(k: int) -> None:
    buf = io.BytesIO()
    write_gantt(training_result(k), buf)  # type: ignore[arg-type]
    width, height = _png_size(buf.getvalue())
    assert width == 1600
    # K = 2: 3 stages, G = 6, 8 cycles: one panel. K = 16: 31 stages, G = 62, 92 cycles:
    # 4 panels of 16 rows each, so far taller than 4 x one 2-row panel.
    if k == 2:
        assert height < 400
    else:
        assert height > 4 * 16 * 0.32 * 100


def test_gantt_is_reproducible() -> None:
    a, b = io.BytesIO(), io.BytesIO()
    write_gantt(training_result(3), a)  # type: ignore[arg-type]
    write_gantt(training_result(3), b)  # type: ignore[arg-type]
    assert a.getvalue() == b.getvalue()


# ------------------------------------------------------------------ aggregation


@pytest.mark.parametrize("tiles", [1, 2, 7, 16, 128, 1216, 1472, 1473])
def test_tile_grid_holds_every_tile_once(tiles: int) -> None:
    rows, cols = tile_grid(tiles)
    assert rows * cols >= tiles > (rows - 1) * cols
    grid = grid_values(np.arange(tiles))
    assert grid.shape == (rows, cols)
    assert np.array_equal(grid.ravel()[:tiles], np.arange(tiles))
    assert np.isnan(grid.ravel()[tiles:]).all()


def test_tile_grid_of_an_mk2_ipu() -> None:
    assert tile_grid(1472) == (32, 46)  # 1472 = 32 x 46, 46 / 32 close to 1.5


def test_max_pool_keeps_peaks_and_their_steps() -> None:
    values = np.array([1, 5, 2, 9, 3, 3, 0])
    pooled = max_pool(values, 3, offset=10)
    # buckets of ceil(7/3) = 3: [1,5,2] [9,3,3] [0]: maxima 5 at 1, 9 at 3, 0 at 6.
    assert pooled.bucket == 3
    assert pooled.y.tolist() == [5, 9, 0] and pooled.x.tolist() == [11, 13, 16]
    short = max_pool(values, 10)
    assert short.bucket == 1 and short.y.tolist() == values.tolist()


def test_max_pool_never_loses_the_global_peak() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        values = rng.integers(0, 1000, rng.integers(1, 5000))
        pooled = max_pool(values, 200)
        assert len(pooled.y) <= 200 and pooled.y.max() == values.max()
        assert np.array_equal(values[pooled.x], pooled.y)


# -------------------------------------------------------------------- tile plot


def ipu(k: int, base: int, stash_tile: int | None = None) -> StageResult:
    per_tile = np.zeros((5, 6), np.int64)
    per_tile[0] = base + np.arange(6)  # variables: tile 5 largest without stash
    per_tile[1] = 100  # vertex code
    stash = np.zeros(6, np.int64)
    if stash_tile is not None:
        stash[stash_tile] = 50
    return ipu_memory(k, (f"L{k}",), per_tile, stash, budget=1000)


def test_ipu_memory_worst_tile_counts_the_stash() -> None:
    m = ipu(0, 500, stash_tile=2)
    # Totals: 600..605 per tile, tile 2 gets +50: 652 is the worst.
    assert (m.worst_tile, m.worst_tile_bytes, m.headroom, m.fits) == (2, 652, 348, True)
    assert m.worst_components == {"variables": 502, "vertex_code": 100, "vertex_state": 0, "exchange_code": 0,
                                  "control_code": 0, "stash": 50, "copy_buffers": 0}
    assert m.memory.variables == 6 * 500 + 15


@pytest.mark.parametrize("count", [1, 5])
def test_tile_plot_draws_every_ipu(count: int, tmp_path: Path) -> None:
    path = tmp_path / "tiles.png"
    plot_tiles([ipu(k, 300 * k, stash_tile=k % 6) for k in range(count)], path, force=False)
    width, height = _png_size(path.read_bytes())
    # 5 IPUs wrap onto two rows of heatmaps: taller than one row.
    assert height > 500 and width > 400


@pytest.mark.parametrize("name", ["bert-tiny-training.json", "bert-tiny-inference.json"])
def test_tile_figures_are_the_check_figures(name: str) -> None:
    """The tile plot and the report show, per IPU, the bytes `popliner check` reports."""
    from popliner.analysis import load_analysis, solve_split
    from popliner.check import check_config
    from popliner.config.model import config_from_split
    from popliner.solvers.problem import SplitProblem

    analysis = load_analysis(str(Path(__file__).parents[1] / "fixtures" / "profiles" / name), use_cache=False)
    budget = analysis.profile.target.bytes_per_tile * 4
    split = solve_split(analysis, SplitProblem(num_ipus=3, budget=budget, exact_ipus=True,
                                               training=analysis.mode == "training"), solver="greedy")
    t = analysis.profile.target
    cfg = config_from_split(split, profile_path=name, profile_sha256=analysis.profile.sha256, tiles=t.tiles_per_ipu,
                            bytes_per_tile=t.bytes_per_tile, clock_hz=t.clock_hz, gradient_accumulation=None)
    checked = check_config(analysis, cfg, "cfg.yaml", budget=budget)
    shown = analysis.stage_results(cfg.layer_groups, budget)
    worst = [(m.worst_tile, m.worst_tile_bytes) for m in shown]
    assert worst == [(c.worst_tile, c.worst_tile_bytes) for c in checked.ipus]
    assert [(s.worst_tile, s.worst_tile_bytes) for s in split.stages] == worst
