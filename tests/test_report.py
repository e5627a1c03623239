"""The HTML report: self-contained, one figure everywhere, and rendered in a real browser.

The browser test opens the report in headless Chromium (Debian's ``chromium``
package) over the DevTools protocol. Without Chromium it fails, unless
POPLINER_SKIP_BROWSER=1 says to skip it; under CI (CI or
POPLINER_REQUIRE_BROWSER set) it never skips.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from popliner.analysis import AnalysisOptions, load_analysis, solve_split
from popliner.check import check_config
from popliner.cli import cli
from popliner.config.model import PipelineConfig, config_from_split
from popliner.fileio import atomic_write
from popliner.report import Report, build_report
from popliner.report.build import fullest_ipu
from popliner.solvers.problem import SplitProblem
from popliner.writers.html import SECTIONS, _script_json, render_report
from popliner.writers.html_planner import planner_script
from popliner.writers.pipeline_yaml import write_config

from .browser import chromium_path, load_page

PROFILES = Path(__file__).parents[1] / "fixtures" / "profiles"


def make_config(name: str, ipus: int) -> tuple[Any, PipelineConfig]:
    analysis = load_analysis(str(PROFILES / name), AnalysisOptions(), use_cache=False)
    budget = analysis.profile.target.bytes_per_tile * 4  # the tiny fixtures need room to split anywhere
    problem = SplitProblem(num_ipus=ipus, budget=budget, exact_ipus=True, training=analysis.mode == "training")
    split = solve_split(analysis, problem, solver="ilp", time_limit=20)
    t = analysis.profile.target
    cfg = config_from_split(split, profile_path=str(PROFILES / name), profile_sha256=analysis.profile.sha256,
                            tiles=t.tiles_per_ipu, bytes_per_tile=t.bytes_per_tile, clock_hz=t.clock_hz,
                            gradient_accumulation=None)
    return analysis, cfg


@pytest.fixture(scope="module")
def training() -> tuple[Any, PipelineConfig, Report]:
    analysis, cfg = make_config("bert-tiny-training.json", 3)
    return analysis, cfg, build_report(analysis, cfg, budget=cfg.effective_budget, source="test")


# ------------------------------------------------------------- figures agree


def test_report_shows_the_check_figures(training: Any) -> None:
    analysis, cfg, report = training
    checked = check_config(analysis, cfg, "cfg.yaml", budget=cfg.effective_budget)
    assert [(i.worst_tile, i.worst_tile_bytes, i.fits) for i in report.ipus] == [
        (c.worst_tile, c.worst_tile_bytes, c.fits) for c in checked.ipus]
    assert [i.worst_components["stash"] for i in report.ipus] == [c.worst_tile_stash for c in checked.ipus]
    # Training on 3 IPUs: the last IPU keeps no stash, the first ones do.
    assert report.ipus[-1].worst_components["stash"] == 0 and report.ipus[0].stash_per_tile.any()


def test_liveness_peak_is_the_variables_figure(training: Any) -> None:
    _, _, report = training
    live, fullest = report.liveness, fullest_ipu(report.ipus)
    assert live.ipu == fullest.ipu and live.tile == fullest.worst_tile
    # The peak of the live bytes on the worst tile is the model's variables component there.
    assert live.peak_bytes == fullest.worst_components["variables"]
    assert live.on_tile.y.max() == live.peak_bytes
    # Room for variables: the budget less everything else on that tile.
    others = fullest.worst_tile_bytes - live.peak_bytes
    assert live.room == fullest.budget - others
    assert live.first_step <= live.peak_step <= live.last_step


def test_liveness_follows_the_training_what_if() -> None:
    # Off-chip optimizer state changes variables' live steps in the engine's profile; the curve must use
    # that profile too (drawn from the raw profile it peaked at 447,037 B where the model counts 276,448 B).
    from popliner.memory.training import TrainingOptions

    options = AnalysisOptions(training=TrainingOptions(optimizer_state="off-chip"))
    analysis = load_analysis(str(PROFILES / "bert-tiny-training.json"), options, use_cache=False)
    _, cfg = make_config("bert-tiny-training.json", 3)
    report = build_report(analysis, cfg, budget=cfg.effective_budget, source="test")
    fullest = fullest_ipu(report.ipus)
    assert report.liveness.peak_bytes == fullest.worst_components["variables"]
    on_chip = build_report(load_analysis(str(PROFILES / "bert-tiny-training.json"), AnalysisOptions(),
                                         use_cache=False), cfg, budget=cfg.effective_budget, source="test")
    assert report.liveness.peak_bytes < on_chip.liveness.peak_bytes  # the state no longer lives all step


def test_options_name_mode_and_training_options(training: Any) -> None:
    _, cfg, report = training
    options = {o.name: o.value for o in report.options}
    assert options["mode"] == "training"
    assert {"recompute", "optimizer_state"} <= options.keys()
    assert options["gradient_accumulation"] == str(cfg.gradient_accumulation)
    assert all(o.meaning for o in report.options)


# --------------------------------------------------------- self-contained page


def test_page_is_self_contained_and_reproducible(training: Any) -> None:
    analysis, cfg, report = training
    page = render_report(report)
    assert page == render_report(build_report(analysis, cfg, budget=cfg.effective_budget, source="test"))
    assert page.count("<script") == 5  # figures and planner (JSON), the planner's script, plotly.js, the page's own
    assert page.index('id="popliner-planner"') < page.index("<script>") < page.index(planner_script()[:40])
    # Outside plotly.js (whose code holds URL strings it never loads here): no external resource at all.
    start = page.index("<script>", page.index(planner_script()[:40]))  # plotly.js follows the planner's script
    assert page[start:].startswith("<script>/**") and "plotly" in page[start:start + 200].lower()
    ours = page[:start] + page[page.index("</script>", start):]
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", ours, re.I)
    assert "<link" not in ours.lower() and "@import" not in ours
    for sid, _ in SECTIONS:
        assert f"<section id='{sid}'>" in page
    assert report.profile_sha256 in page


def test_figure_json_cannot_close_its_script() -> None:
    text = _script_json({"name": "</script><script>alert(1)</script>", "v": np.array([1.0, np.nan])})
    assert "</script" not in text and "<" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>", "v": [1.0, None]}


# ------------------------------------------------------------------------ CLI


def _write_config(cfg: PipelineConfig, path: Path) -> Path:
    with atomic_write(path, force=False) as stream:
        write_config(cfg, stream)
    return path


def test_report_command(training: Any, tmp_path: Path) -> None:
    _, cfg, _ = training
    config = _write_config(cfg, tmp_path / "pipeline.yaml")
    out = tmp_path / "review.html"
    args = ["report", str(config), "--profile", str(PROFILES / "bert-tiny-training.json"), "-o", str(out),
            "--no-cache"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 2 and "exists" in again.stderr
    bad = CliRunner().invoke(cli, [*args[:4], "-o", str(tmp_path / "r.png")])
    assert bad.exit_code == 2 and ".html" in bad.stderr


def test_solve_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "split.html"
    profile = str(PROFILES / "bert-tiny-inference.json")
    result = CliRunner().invoke(cli, [profile, "--solve", "--num-ipus", "2", "--report", str(out), "--no-cache",
                                      "--mem-per-tile", str(4 << 20)])
    assert result.exit_code == 0, result.output
    assert "<section id='tiles'>" in out.read_text(encoding="utf-8")
    lonely = CliRunner().invoke(cli, [profile, "--report", str(tmp_path / "x.html"), "--no-cache"])
    assert lonely.exit_code == 2 and "--report needs --solve" in lonely.stderr


# -------------------------------------------------------------------- browser


def _require_chromium() -> str:
    found = chromium_path()
    if found:
        return found
    in_ci = bool(os.environ.get("CI") or os.environ.get("POPLINER_REQUIRE_BROWSER"))
    if os.environ.get("POPLINER_SKIP_BROWSER") == "1" and not in_ci:
        pytest.skip("POPLINER_SKIP_BROWSER=1: the browser test is skipped")
    pytest.fail("no Chromium for the HTML report's browser test: install the Debian package (apt-get install "
                "chromium) or set POPLINER_CHROMIUM; POPLINER_SKIP_BROWSER=1 skips it outside CI")


def _not_blank(png: bytes) -> tuple[int, float]:
    """(distinct colours in a sample, spread of the grey levels) of a screenshot."""
    from matplotlib.image import imread

    pixels = imread(io.BytesIO(png), format="png")[..., :3]
    sample = pixels[::7, ::7].reshape(-1, 3)
    return len(np.unique(np.round(sample * 255).astype(np.int64) @ np.array([65536, 256, 1]))), float(pixels.std())


EXPRESSIONS = {
    "sections": "Array.from(document.querySelectorAll('section')).map(s => s.id)",
    "drawn": "Array.from(document.querySelectorAll('.figure'))"
             ".map(f => [f.id, f.querySelectorAll('.main-svg').length])",
    "heatmaps": "document.querySelectorAll('#fig-tiles .hm').length + "
                "document.querySelectorAll('#fig-tiles .heatmaplayer image').length",
    "bars": "document.querySelectorAll('#fig-schedule .bars path').length",
    "layer_rows": "document.querySelectorAll('#layer-table tbody tr').length",
    # Click "Worst-tile bytes" twice (descending) and read the first rows' values.
    "sorted": "(() => { const t = document.getElementById('layer-table');"
              " const th = Array.from(t.tHead.rows[0].cells).find(c => c.textContent === 'Worst-tile bytes');"
              " const col = th.cellIndex; th.click(); th.click();"
              " return Array.from(t.tBodies[0].rows).map(r => Number(r.cells[col].getAttribute('data-v'))); })()",
}


def test_report_renders_in_chromium(training: Any, tmp_path: Path) -> None:
    _require_chromium()
    _, _, report = training
    path = tmp_path / "report.html"
    path.write_text(render_report(report), encoding="utf-8")
    load = load_page(path, EXPRESSIONS, ready="document.body && document.body.dataset.rendered === 'yes'")
    assert load.errors == [], load.errors
    assert [c for c in load.console if c[0] == "warning"] == []
    # No network: only the file itself and data: URLs plotly makes for patterns.
    assert all(url.startswith(("file:", "data:", "about:")) for url in load.requests), load.requests
    assert load.values["sections"] == [sid for sid, _ in SECTIONS]
    assert all(count >= 1 for _, count in load.values["drawn"]), load.values["drawn"]
    assert len(load.values["drawn"]) == 4
    assert load.values["heatmaps"] >= len(report.ipus)
    assert load.values["bars"] > 0
    rows = load.values["sorted"]
    assert len(rows) == load.values["layer_rows"] == len(report.layers) + (report.unlayered is not None)
    assert rows == sorted(rows, reverse=True)
    colours, spread = _not_blank(load.screenshot)
    assert colours > 20 and spread > 0.05, (colours, spread)
