"""The report's split planner: every contiguous split's figures, and the page that looks them up.

Python side: the planner's records hold, for every contiguous split of the
small fixtures, what ``popliner check`` gives (all splits, exhaustively).
Browser side (headless Chromium, as the report's own test): for random
splits of the fixtures, in both modes, with training options and the three
head placements, ``window.poplinerPlanner.setSplit`` and the page's table
give the figures ``check`` gives on the config the page writes; that config
reads back as the config Python writes for the split; the step time is the
simulator's; the command the page shows, run, solves the same split with
the same figures. Keyboard and pointer move the boundaries; no request
leaves the page; nothing is logged as an error; hostile layer names stay text.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from popliner.analysis import Analysis, AnalysisOptions, load_analysis
from popliner.check import check_config
from popliner.cli import cli
from popliner.config.layering import layer_record
from popliner.config.model import PipelineConfig, config_from_split
from popliner.config.yaml_io import parse_config
from popliner.memory.training import TrainingOptions
from popliner.report import build_report
from popliner.report.build import Report, split_simulation
from popliner.report.planner import _groups, _valid, build_planner, planner_config, planner_records
from popliner.solvers.result import SplitResult, stage_result
from popliner.training_record import training_of
from popliner.writers.html import render_report
from popliner.writers.pipeline_yaml import config_to_document

from .browser import Driver, load_page
from .hostile_names import LAYER_0, LAYER_1, LAYER_REGEX, hostile_document
from .test_report import _require_chromium

PROFILES = Path(__file__).parents[1] / "fixtures" / "profiles"
READY = ("document.body && document.body.dataset.rendered === 'yes' && document.getElementById('planner') "
         "&& document.getElementById('planner').dataset.ready === 'yes'")


@dataclass(frozen=True)
class Scenario:
    profile: str
    ipus: int
    options: dict[str, Any]
    budget_factor: float  # of the profile's bytes per tile: some splits fit, some do not
    layer_name_regex: str | None = None

    @property
    def name(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.profile}-{self.ipus}-{opts or 'defaults'}"


SCENARIOS = (
    Scenario("bert-tiny-training.json", 3, {}, 2.5),
    Scenario("bert-tiny-training.json", 2, {"head_placement": "last", "recompute": "pipeline"}, 2.0),
    Scenario("bert-tiny-training.json", 3, {"head_placement": "wrap", "optimizer_state": "off-chip"}, 2.0),
    Scenario("bert-tiny-training.json", 3, {"replication_factor": 2, "sharded_optimizer_state": True,
                                            "recompute": "every-layer"}, 1.5),
    Scenario("bert-base-training.json.gz", 5, {"head_placement": "wrap", "recompute": "pipeline"}, 1.0),
    Scenario("resnet-small-training.json.gz", 3, {"head_placement": "last"}, 1.0),
    # Its LM head reads the word embedding: last is not built over several IPUs (docs/pipeline-config.md).
    Scenario("gpt2-small-inference.json.gz", 4, {"head_placement": "wrap"}, 0.5),
    Scenario("efficientnet-small-inference.json.gz", 3, {}, 0.6),
    Scenario("bert-tiny-inference.json", 2, {"head_placement": "wrap"}, 0.3),
    Scenario("tiny-training.json", 1, {}, 1.0),  # one IPU: no boundary to move, nothing pipelined
)


@dataclass(frozen=True, eq=False)
class Case:
    scenario: Scenario
    analysis: Analysis
    config: PipelineConfig
    budget: int
    report: Report


def even_config(analysis: Analysis, ipus: int, budget: int) -> PipelineConfig:
    """A config of an even contiguous split (the report's own split), as the solver's configs are made."""
    names = analysis.facts.layout.placed_names
    counts = [len(names) // ipus + (1 if u < len(names) % ipus else 0) for u in range(ipus)]
    figures = analysis.pipeline_figures(_groups(analysis, counts))
    stages = tuple(stage_result(f, analysis.layer_names, budget) for f in figures)
    split = SplitResult("test", "TEST", analysis.mode, ipus, budget, stages)
    t = analysis.profile.target
    return config_from_split(split, profile_path=analysis.profile.path, profile_sha256=analysis.profile.sha256,
                             tiles=t.tiles_per_ipu, bytes_per_tile=t.bytes_per_tile, clock_hz=t.clock_hz,
                             gradient_accumulation=None, training=training_of(analysis, None),
                             layer_options=layer_record(analysis.options), framework=analysis.framework.name)


def make_case(scenario: Scenario, profile: Path | None = None) -> Case:
    options = AnalysisOptions(training=TrainingOptions(**scenario.options),
                              **({"layer_name_regex": scenario.layer_name_regex} if scenario.layer_name_regex else {}))
    analysis = load_analysis(str(profile or PROFILES / scenario.profile), options, use_cache=False)
    budget = int(analysis.profile.target.bytes_per_tile * scenario.budget_factor)
    config = even_config(analysis, scenario.ipus, budget)
    return Case(scenario, analysis, config, budget, build_report(analysis, config, budget=budget, source="test"))


_CASES: dict[str, Case] = {}


def case_of(scenario: Scenario) -> Case:
    """One analysis and report per scenario for the module's tests (they only read them)."""
    if scenario.name not in _CASES:
        _CASES[scenario.name] = make_case(scenario)
    return _CASES[scenario.name]


def all_splits(n: int, k: int) -> list[list[int]]:
    """Every contiguous split of ``n`` layers over exactly ``k`` IPUs, as layer counts."""
    return [[b - a for a, b in zip((0, *cuts), (*cuts, n))] for cuts in itertools.combinations(range(1, n), k - 1)]


def some_splits(n: int, k: int, count: int, seed: int) -> list[list[int]]:
    everything = all_splits(n, k) if n <= 18 else None
    if everything is not None and len(everything) <= count:
        return everything
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        cuts = sorted(rng.sample(range(1, n), k - 1))
        out.append([b - a for a, b in zip((0, *cuts), (*cuts, n))])
    return out


# ------------------------------------------------------------------- records


# 24 layers over 16 IPUs (every split of them enumerated) in the slow step: main suite time.
@pytest.mark.parametrize(("n", "k"), [(1, 1), (3, 1), (3, 3), (5, 2), (7, 4), (12, 5),
                                      pytest.param(24, 16, marks=pytest.mark.slow)])
def test_records_are_the_ranges_of_every_split(n: int, k: int) -> None:
    # Brute force: the (first, last, position) every split over exactly k IPUs uses.
    used = {(a, b - 1, u) for counts in all_splits(n, k)
            for u, (a, b) in enumerate(itertools.pairwise([0, *itertools.accumulate(counts)]))}
    assert set(_valid(n, k)) == used and len(_valid(n, k)) == len(used) == planner_records(n, k)


@pytest.mark.parametrize("scenario", SCENARIOS[:4] + SCENARIOS[7:], ids=lambda s: s.name)
def test_every_split_is_what_check_gives(scenario: Scenario) -> None:
    case = case_of(scenario)
    planner = case.report.planner
    assert planner is not None and not planner.refused
    index = {(r.first, r.last, r.ipu): r for r in planner.ranges}
    n, k = len(planner.layers), planner.num_ipus
    for counts in all_splits(n, k):
        groups = _groups(case.analysis, counts)
        cfg = planner_config(case.analysis, case.config, case.budget, planner.micro_batches, groups)
        checked = check_config(case.analysis, cfg, "split.yaml", budget=case.budget)
        at = 0
        for u, count in enumerate(counts):
            record = index[(at, at + count - 1, u)]
            got, want = record.stage, checked.ipus[u]
            assert (got.layers, got.worst_tile, got.worst_tile_bytes, got.worst_components, got.fits, got.cycles,
                    got.bytes_in, got.stash_bytes, got.stash_entries) == (
                want.layers, want.worst_tile, want.worst_tile_bytes, want.worst_components, want.fits, want.cycles,
                want.bytes_in, want.stash_bytes, want.stash_entries), (counts, u)
            assert record.record == cfg.stages[u]
            at += count


def test_a_planner_too_large_to_embed_says_so() -> None:
    case = case_of(SCENARIOS[0])
    target = case.analysis.profile.target
    planner = build_planner(case.analysis, case.config, budget=case.budget,
                            micro_batches=case.config.gradient_accumulation, micro_batch_size=1,
                            clock_hz=float(target.clock_hz), link_bandwidth=1e9, sync_cycles=0.0,
                            max_records=2)  # bert-tiny over 3 IPUs: 3 records
    assert planner.refused == "3 layers over 3 IPUs have 3 ranges to embed, more than the 2 a page holds"
    page = render_report(dataclasses.replace(case.report, planner=planner))
    assert "id='planner-refused'" in page and 'id="popliner-planner"' not in page


# ------------------------------------------------------------------- browser


def _run_splits(splits: list[list[int]]) -> str:
    return ("(" + json.dumps(splits) + ").map(s => { const r = window.poplinerPlanner.setSplit(s);"
            " const st = window.poplinerPlanner.state();"
            " const dom = Array.from(document.querySelectorAll('#planner-table tbody tr')).map(tr =>"
            "   Array.from(tr.cells).map(td => td.dataset.v !== undefined ? Number(td.dataset.v) : td.textContent));"
            " return {ipus: r, step: st.stepSeconds, yaml: st.yaml, command: st.command, dom: dom,"
            "   shown: Number(document.getElementById('planner-summary').dataset.stepSeconds)}; })")


def _page(case: Case, tmp_path: Path) -> Path:
    path = tmp_path / "report.html"
    path.write_text(render_report(case.report), encoding="utf-8")
    return path


def _no_document(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "snippets"}


def _assert_split(case: Case, counts: list[int], got: dict[str, Any]) -> PipelineConfig:
    planner = case.report.planner
    assert planner is not None
    cfg = parse_config(got["yaml"], "page.yaml")
    checked = check_config(case.analysis, cfg, "page.yaml", budget=case.budget)
    at = 0
    for u, (count, ipu, row) in enumerate(zip(counts, got["ipus"], got["dom"])):
        want = checked.ipus[u]
        parts = {**want.worst_components}
        assert ipu["components"] == parts, (counts, u)
        assert (ipu["ipu"], ipu["layers"], ipu["first_layer"], ipu["last_layer"]) == (
            u, count, planner.layers[at], planner.layers[at + count - 1])
        assert (ipu["worst_tile"], ipu["worst_tile_bytes"], ipu["stash"], ipu["copy_buffers"], ipu["headroom"],
                ipu["fits"], ipu["cycles"]) == (want.worst_tile, want.worst_tile_bytes, want.worst_tile_stash,
                                                 want.copy_buffer, want.headroom, want.fits, want.cycles), (counts, u)
        # The page shows the same: IPU, layers, first, last, worst tile, its bytes, the parts, headroom, fit, cycles.
        assert row == [u, count, planner.layers[at], planner.layers[at + count - 1], want.worst_tile,
                       want.worst_tile_bytes, *parts.values(), want.headroom, "yes" if want.fits else "NO",
                       want.cycles], (counts, u)
        at += count
    # The page's YAML is the config Python writes for the split (the snippets left to the reader).
    python = planner_config(case.analysis, case.config, case.budget, planner.micro_batches,
                            _groups(case.analysis, counts))
    assert _no_document(config_to_document(cfg)) == _no_document(config_to_document(python))
    sim = split_simulation(case.analysis, cfg, budget=case.budget, micro_batches=planner.micro_batches,
                           link_bandwidth=planner.link_bandwidth, sync_cycles=planner.sync_cycles,
                           micro_batch_size=planner.micro_batch_size)
    # Bit for bit on Python 3.11 (the page adds in the simulator's order); 3.12's sum() compensates rounding.
    assert got["step"] == pytest.approx(sim.step_seconds, rel=1e-12, abs=0) and got["shown"] == got["step"]
    assert sim.step_seconds == case.report.sim.step_seconds or counts != list(planner.initial)
    return cfg


def _assert_command(cfg: PipelineConfig, got: dict[str, Any]) -> None:
    """The command, run: the split solved as the page has it, with the page's figures."""
    words = shlex.split(got["command"])
    assert words[0] == "popliner"
    result = CliRunner().invoke(cli, [*words[1:], "--no-cache"])
    assert result.exit_code in (0, 3), result.output
    doc = json.loads(result.stdout)
    assert [tuple(s["layers"]) for s in doc["stages"]] == list(cfg.layer_groups)
    for stage, ipu in zip(doc["stages"], got["ipus"]):
        assert (stage["worst_tile"], stage["worst_tile_bytes"], stage["worst_tile_stash_bytes"],
                stage["copy_buffer_bytes_per_tile"], stage["cycles"], stage["bytes_in"], stage["fits"]) == (
            ipu["worst_tile"], ipu["worst_tile_bytes"], ipu["stash"], ipu["copy_buffers"], ipu["cycles"],
            ipu["bytes_in"], ipu["fits"])


#: The larger fixtures (12 layers and more, hundreds of tiles) run in the slow step of CI.
LARGER = ("bert-base-training.json.gz", "resnet-small-training.json.gz", "gpt2-small-inference.json.gz")
#: So do four more (suite time; a browser each): the main suite keeps bert-tiny's defaults, last with pipeline
#: recomputation and the replicated sharded every-layer case.
MORE_IN_SLOW = (SCENARIOS[1], SCENARIOS[2], SCENARIOS[3], SCENARIOS[7], SCENARIOS[8], SCENARIOS[9])


@pytest.mark.parametrize("scenario", [pytest.param(s, marks=pytest.mark.slow)
                                      if s.profile in LARGER or s in MORE_IN_SLOW else s
                                      for s in SCENARIOS], ids=lambda s: s.name)
def test_page_figures_are_check_figures(scenario: Scenario, tmp_path: Path) -> None:
    _require_chromium()
    case = case_of(scenario)
    planner = case.report.planner
    assert planner is not None
    splits = [list(planner.initial), *some_splits(len(planner.layers), planner.num_ipus, 24, seed=len(scenario.name))]
    load = load_page(_page(case, tmp_path), {"runs": _run_splits(splits)}, ready=READY)
    assert load.errors == [], load.errors
    assert all(url.startswith(("file:", "data:", "about:", "blob:")) for url in load.requests), load.requests
    assert len(load.values["runs"]) == len(splits) > 1
    configs = [_assert_split(case, counts, got) for counts, got in zip(splits, load.values["runs"])]
    for cfg, got in list(zip(configs, load.values["runs"]))[1:3]:
        _assert_command(cfg, got)


def test_keyboard_and_pointer_move_the_boundaries(tmp_path: Path) -> None:
    _require_chromium()
    case = case_of(SCENARIOS[4])  # 13 layers placed (embedding, 12) over 5 IPUs, the head wrapped onto IPU 0
    planner = case.report.planner
    assert planner is not None
    n = len(planner.layers)
    first = list(planner.initial)

    def counts(d: Driver) -> list[int]:
        return list(d.evaluate("window.poplinerPlanner.state().counts"))

    def interact(d: Driver) -> dict[str, Any]:
        out: dict[str, Any] = {"start": counts(d)}
        d.evaluate("document.querySelector('.planner-handle').focus()")
        d.press("ArrowRight")
        d.press("ArrowRight")
        out["right2"] = counts(d)
        d.press("ArrowLeft")
        out["left1"] = counts(d)
        d.press("Home")
        out["home"] = counts(d)
        d.press("Tab")
        out["tabbed"] = d.evaluate("document.activeElement.dataset.boundary")
        d.press("End")
        out["end"] = counts(d)
        out["end_table"] = d.evaluate("Array.from(document.querySelectorAll('#planner-table tbody tr'))"
                                      ".map(tr => Number(tr.cells[5].dataset.v))")
        out["end_state"] = d.evaluate("window.poplinerPlanner.state().ipus.map(x => x.worst_tile_bytes)")
        out["valuenow"] = d.evaluate("document.activeElement.getAttribute('aria-valuenow')")
        # Drag the first boundary onto the left edge of layer 4.
        d.evaluate("window.scrollTo(0, document.getElementById('planner-strip').getBoundingClientRect().top"
                   " + window.scrollY - 200)")
        box = d.evaluate("(() => { const h = document.querySelector('.planner-handle').getBoundingClientRect();"
                         " const c = document.querySelectorAll('.planner-layer')[4].getBoundingClientRect();"
                         " return [h.left + h.width / 2, h.top + h.height / 2, c.left + 2]; })()")
        d.drag((box[0], box[1]), (box[2], box[1]))
        out["dragged"] = counts(d)
        # What the download link holds is the YAML shown; the copy buttons leave no error behind.
        out["download"] = d.evaluate("fetch(document.getElementById('planner-download').href).then(r => r.text())")
        out["yaml"] = d.evaluate("document.getElementById('planner-yaml').textContent")
        out["state_yaml"] = d.evaluate("window.poplinerPlanner.state().yaml")
        d.evaluate("document.getElementById('planner-copy-yaml').click();"
                   " document.getElementById('planner-copy-command').click()")
        out["bad_split"] = d.evaluate("(() => { try { window.poplinerPlanner.setSplit([1, 2]); return 'taken'; }"
                                      " catch (e) { return e.message; } })()")
        return out

    load = load_page(_page(case, tmp_path), {}, ready=READY, interact=interact)
    assert load.errors == [], load.errors
    v = load.values
    assert v["start"] == first
    assert v["right2"] == [first[0] + 2, first[1] - 2, *first[2:]]
    assert v["left1"] == [first[0] + 1, first[1] - 1, *first[2:]]
    assert v["home"] == [1, first[0] + first[1] - 1, *first[2:]]
    assert v["tabbed"] == "1"  # Tab moved on to the second boundary
    # End: the second boundary as far right as the IPUs after it allow (one layer each up to the third's cut).
    third_cut = sum(first[:3])
    assert v["end"] == [1, third_cut - 2, 1, *first[3:]]
    assert v["end_table"] == v["end_state"]
    assert v["valuenow"] == str(v["end"][0] + v["end"][1])
    assert v["dragged"] == [4, third_cut - 5, 1, *first[3:]] and sum(v["dragged"]) == n
    assert v["download"] == v["yaml"] == v["state_yaml"] and v["yaml"].startswith("# popliner pipeline config")
    assert v["bad_split"] == "setSplit: give 5 layer counts, one per IPU"


# --------------------------------------------------------------- hostile names

#: Markup that would run script or fetch something if a name were ever put on the page as HTML.
MARKUP = '</script><script>window.pwned=1</script><img src="https://evil.invalid/x" onerror="window.pwned=2">&amp;'


@pytest.mark.slow  # a long case (about 3 s)
def test_hostile_names_stay_text(tmp_path: Path) -> None:
    _require_chromium()
    doc = hostile_document()
    for ctx in doc["debugContexts"]:
        data = ctx.get("data") or {}
        for holder in (data, ctx):
            name = holder.get("opName" if holder is data else "name")
            if isinstance(name, str) and name.startswith(LAYER_0):
                holder["opName" if holder is data else "name"] = MARKUP + name
    profile = tmp_path / "hostile.json"
    profile.write_text(json.dumps(doc))
    scenario = Scenario("hostile.json", 3, {}, 4.0, layer_name_regex=LAYER_REGEX)
    case = make_case(scenario, profile)
    planner = case.report.planner
    assert planner is not None and {MARKUP + LAYER_0, LAYER_1} <= set(planner.layers) and len(planner.layers) == 3
    load = load_page(_page(case, tmp_path), {
        "runs": _run_splits([[1, 1, 1]]), "pwned": "window.pwned === undefined ? null : window.pwned",
        "cells": "Array.from(document.querySelectorAll('.planner-layer')).map(c => c.textContent)",
        "title": "document.title", "scripts": "document.scripts.length",
    }, ready=READY)
    assert load.errors == [], load.errors
    assert all(url.startswith(("file:", "data:", "about:", "blob:")) for url in load.requests), load.requests
    v = load.values
    assert v["pwned"] is None and v["scripts"] == 5 and v["title"] == "popliner report: hostile.json"
    assert v["cells"] == list(planner.layers)
    got = v["runs"][0]
    cfg = _assert_split(case, [1, 1, 1], got)
    assert [group[-1] for group in cfg.layer_groups] == list(planner.layers)
    # The command as bash reads it: a split after each of the first two layers, named exactly.
    words = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + got["command"].removeprefix("popliner ")],
                           capture_output=True, check=True).stdout.split(b"\0")[:-1]
    decoded = [w.decode("utf-8", "surrogateescape") for w in words]
    pins = [decoded[k + 1] for k, word in enumerate(decoded) if word == "--split-after"]
    assert pins == list(planner.layers[:2])
    assert decoded[decoded.index("--layer-name-regex") + 1] == LAYER_REGEX
    assert case.config.layer_options == (("layer_name_regex", LAYER_REGEX),)
