"""One figure everywhere: each IPU's worst tile and its bytes agree across every view of a split.

The views: the ``--solve`` JSON, the ``--solve`` table on stderr, the tile
plot's series, the XLSX planner (the split typed into its IPU column),
``popliner simulate --profile`` and ``popliner check``. Each IPU holds its
model, its stash (training) and its copy buffers (:mod:`popliner.pipeline`),
so all of them report the same bytes, and the same tile where they show one
(the planner shows bytes only).

To add a view, append a function to :data:`VIEWS` that returns
``[(worst tile or None, bytes), ...]`` per IPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from popliner.analysis import load_analysis
from popliner.breakdown import build_breakdown
from popliner.cli import cli
from popliner.config.options import analysis_options
from popliner.config.yaml_io import read_config
from tests.helpers import FIXTURES
from tests.planner_reader import planner_figures


@dataclass(frozen=True)
class Run:
    """One solved split and the outputs of every command on it."""

    profile: Path
    mode: str
    config: Path
    solve_json: dict
    solve_stderr: str
    check_stdout: str
    simulate_json: dict


def _invoke(*args: object, ok: tuple[int, ...] = (0,)) -> tuple[str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code in ok, result.output
    return result.stdout, result.stderr


def _table_rows(text: str) -> dict[int, tuple[int, int]]:
    """IPU -> (tile, total) from a per-IPU table whose header has ``tile`` and ``total`` columns."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["IPU"] and "tile" in line.split())
    names = lines[head].split()
    rows = {}
    for line in lines[head + 1 :]:
        cells = line.split()
        if not cells or not cells[0].isdigit():
            break
        rows[int(cells[0])] = (int(cells[names.index("tile")]), int(cells[names.index("total")].replace(",", "")))
    return rows


def solve_json_view(run: Run) -> list[tuple[int, int]]:
    return [(s["worst_tile"], s["worst_tile_bytes"]) for s in run.solve_json["stages"]]


def solve_table_view(run: Run) -> list[tuple[int, int]]:
    rows = _table_rows(run.solve_stderr)
    return [rows[k] for k in sorted(rows)]


def _config_analysis(run: Run) -> tuple[Any, Any]:
    """The profile analysed with the config's options, as a config's reader does: its head placement is the
    solve's (a tied head is wrapped by PopART's default, not the analysis default ``first``)."""
    cfg = read_config(run.config)
    options = analysis_options(run.mode, cfg.options, cfg.layer_groups)
    return load_analysis(str(run.profile), options), cfg


def tile_plot_view(run: Run) -> list[tuple[int, int]]:
    # What `--plot FILE` draws in FILE-tiles: each IPU's tiles and its worst tile marked.
    analysis, cfg = _config_analysis(run)
    ipus = analysis.stage_results(cfg.layer_groups, cfg.effective_budget)
    return [(ipu.worst_tile, ipu.worst_tile_bytes) for ipu in ipus]


def planner_view(run: Run) -> list[tuple[int | None, int]]:
    # The workbook's planner with the split typed into its IPU column, evaluated as a spreadsheet would
    # (its exact range sheet built as `-o FILE.xlsx --solve` builds it).
    analysis, cfg = _config_analysis(run)
    ipus = len(cfg.stages)
    breakdown = build_breakdown(analysis, with_operations=False, with_totals=False, planner_ipus=ipus)
    placed = {layer: k for k, stage in enumerate(cfg.stages) for layer in stage.layers}
    figures, exact = planner_figures(breakdown, placed, budget_bytes=cfg.effective_budget, num_ipus=ipus)
    assert exact  # a contiguous split: the planner's exact figures, not the summed upper bound
    return [(None, b) for b in figures]


def simulate_view(run: Run) -> list[tuple[int, int]]:
    return [(u["worst_tile"], u["peak_bytes"]) for u in run.simulate_json["ipus"]]


def check_view(run: Run) -> list[tuple[int, int]]:
    rows = _table_rows(run.check_stdout)
    return [rows[k] for k in sorted(rows)]


#: Every view of a split's per-IPU worst tile (None where a view shows only the bytes).
VIEWS: dict[str, Callable[[Run], list[tuple[int | None, int]]]] = {
    "solve JSON": solve_json_view,
    "solve table": solve_table_view,
    "tile plot": tile_plot_view,
    "XLSX planner": planner_view,
    "simulate": simulate_view,
    "check": check_view,
}

#: Three training profiles, each read as training and as inference, and an inference-only profile.
CASES = [
    (name, mode)
    for name in ("bert-tiny-training.json", "resnet-small-training.json.gz", "bert-base-training.json.gz")
    for mode in ("training", "inference")
] + [("gpt2-small-inference.json.gz", "inference")]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("ipus", [2, 3])
# BERT-Base (the largest fixture, about 2 s a case) in the slow step.
@pytest.mark.parametrize("name, mode", [pytest.param(n, m, marks=pytest.mark.slow) if n.startswith("bert-base")
                                        else (n, m) for n, m in CASES],
                         ids=[f"{n.split('.')[0]}-{m}" for n, m in CASES])
def test_every_view_gives_the_same_worst_tile(name: str, mode: str, ipus: int, tmp_path: Path,
                                              cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(cache_dir))
    profile = FIXTURES / name
    config = tmp_path / "pipeline.yaml"
    # GPT-2's head reads the word embedding, so PopART's default wraps it onto IPU 0; the XLSX planner looks up
    # contiguous splits only, so this profile keeps the placement it had before tied heads wrapped by default.
    placement = ("--head-placement", "first") if name.startswith("gpt2") else ()
    out, err = _invoke(profile, "--mode", mode, "--solve", "--num-ipus", ipus, "--exact-ipus", "--time-limit", 20,
                       *placement, "--config-out", config, ok=(0, 3))
    check_out, _ = _invoke("check", config, "--profile", profile, ok=(0, 1))
    sim_out, _ = _invoke("simulate", config, "--profile", profile, "--json")
    run = Run(profile, mode, config, json.loads(out), err, check_out, json.loads(sim_out))
    assert len(run.solve_json["stages"]) == ipus
    figures = {view: read(run) for view, read in VIEWS.items()}
    expected = figures["solve JSON"]
    for view, got in figures.items():
        assert len(got) == len(expected), f"{view} shows {len(got)} IPUs, the solve JSON {len(expected)}"
        shown = [(tile if seen is not None else None, total) for (tile, total), (seen, _) in zip(expected, got)]
        assert got == shown, f"{view} differs from the solve JSON: {got} != {expected}"
    # The stash and copy buffers are in the figure: the solve JSON says how much of it they are.
    for s in run.solve_json["stages"]:
        assert s["copy_buffer_bytes_per_tile"] > 0
        assert (s["worst_tile_stash_bytes"] > 0) == (mode == "training" and s["stash_entries"] > 0)
