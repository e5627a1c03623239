"""Outputs as their real consumers read them: trace tracks without overlaps, JUnit XML to the strict Ant schema."""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from tests.helpers import FIXTURES, invoke


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """bert-tiny with the head wrapped and pipeline recomputation: 11 slices met their successor by float
    addition and 6 by nanoseconds before the trace cut the ends."""
    folder = tmp_path_factory.mktemp("consumers")
    profile = folder / "bert-tiny.json"
    shutil.copy(FIXTURES / "bert-tiny-training.json", profile)
    config = folder / "pipeline.yaml"
    invoke(profile, "--solve", "--num-ipus", "4", "--head-placement", "wrap", "--recompute", "pipeline",
           "--config-out", config)
    return profile, config


def overlapping_pairs(events: list[dict[str, Any]]) -> list[str]:
    """Slices on one track (pid, tid) that overlap as a viewer reads them: floating-point microseconds
    (Chrome's viewer), and whole nanoseconds rounded or truncated (Perfetto's importer truncates)."""
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    found = []
    for track, slices in tracks.items():
        slices.sort(key=lambda e: (e["ts"], e["dur"]))
        for a, b in zip(slices, slices[1:]):
            for unit in (lambda us: us, lambda us: round(us * 1000), lambda us: int(us * 1000)):
                if unit(a["ts"]) + unit(a["dur"]) > unit(b["ts"]):
                    found.append(f"{track} {a['name']}@{a['ts']}+{a['dur']} > {b['name']}@{b['ts']}")
    return found


def test_trace_slices_on_a_track_never_overlap(wrapped: tuple[Path, Path], tmp_path: Path) -> None:
    profile, config = wrapped
    trace = tmp_path / "step.json"
    invoke("simulate", config, "--profile", profile, "--trace", trace)
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) > 100
    assert overlapping_pairs(events) == []
    # Every time is a whole nanosecond, and no slice lost more than the one nanosecond that was cut.
    for e in events:
        if "ts" in e:
            assert abs(e["ts"] * 1000 - round(e["ts"] * 1000)) < 1e-6
    assert min(e["dur"] for e in events if e["ph"] == "X" and e["cat"] == "compute") > 0


def test_the_overlap_check_finds_an_overlap() -> None:
    events = [{"ph": "X", "pid": 0, "tid": 1, "name": "a", "ts": 0.1, "dur": 0.2},
              {"ph": "X", "pid": 0, "tid": 1, "name": "b", "ts": 0.3, "dur": 1.0},
              {"ph": "X", "pid": 0, "tid": 2, "name": "c", "ts": 0.0, "dur": 5.0}]
    # 0.1 + 0.2 is 0.30000000000000004 in floating point: a 1-ulp overlap Chrome's viewer would nest.
    assert overlapping_pairs(events) == ["(0, 1) a@0.1+0.2 > b@0.3"]


# ------------------------------------------------------------------ JUnit, strict Ant schema

_WHEN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")


def strict_ant_problems(suite: ET.Element) -> list[str]:
    """What the strict Ant JUnit schema (the one CI servers validate against) refuses in one testsuite.

    Its rules, by hand: the suite needs name, timestamp (a date and time without a zone), hostname (no
    whitespace), tests, failures, errors (integers) and time (a decimal); its children are, in this
    order, one properties, any testcases, one system-out and one system-err. A test case needs name,
    classname and time and holds at most one failure or error, each with a type.
    """
    problems = []
    required = {"name": r".+", "timestamp": _WHEN.pattern, "hostname": r"\S+", "tests": r"[0-9]+",
                "failures": r"[0-9]+", "errors": r"[0-9]+", "time": _DECIMAL.pattern}
    problems += [f"testsuite @{key}={suite.get(key)!r}" for key, pattern in required.items()
                 if not re.fullmatch(pattern, suite.get(key) or "")]
    problems += [f"testsuite @{key} is not in the schema" for key in suite.keys() - required.keys()]
    tags = [child.tag for child in suite]
    if not re.fullmatch(r"properties,(testcase,)*system-out,system-err,", "".join(f"{t}," for t in tags)):
        problems.append(f"testsuite children {tags}")
    for case in suite.iter("testcase"):
        if not case.get("name") or not case.get("classname") or not _DECIMAL.fullmatch(case.get("time") or ""):
            problems.append(f"testcase {case.attrib}")
        inner = list(case)
        if len(inner) > 1 or any(c.tag not in ("failure", "error") or c.get("type") is None for c in inner):
            problems.append(f"testcase {case.get('name')} holds {[(c.tag, c.attrib) for c in inner]}")
    return problems


def test_the_schema_check_finds_what_the_old_file_lacked() -> None:
    old = ET.fromstring('<testsuite name="popliner memory budget" tests="1" failures="1" errors="0">'
                        '<testcase classname="c" name="ipu0_fits"><failure message="m">x</failure>'
                        '<system-out>o</system-out></testcase></testsuite>')
    assert strict_ant_problems(old) == [
        "testsuite @timestamp=None", "testsuite @hostname=None", "testsuite @time=None",
        "testsuite children ['testcase']",
        "testcase {'classname': 'c', 'name': 'ipu0_fits'}",
        "testcase ipu0_fits holds [('failure', {'message': 'm'}), ('system-out', {})]",
    ]


def test_junit_is_valid_against_the_strict_ant_schema(wrapped: tuple[Path, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    profile, config = wrapped
    junit = tmp_path / "ci.xml"
    invoke("check", config, "--profile", profile, "--budget", "0.3", "--junit", junit, ok=(1,))
    suite = ET.parse(junit).getroot()
    assert strict_ant_problems(suite) == []
    assert suite.get("failures") == str(sum(c.find("failure") is not None for c in suite.iter("testcase"))) != "0"
    assert (suite.findtext("system-out") or "").startswith("IPU 0: layers ")
    # A reproducible build fixes the timestamp: the same inputs then give the same bytes.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    again = tmp_path / "again.xml"
    invoke("check", config, "--profile", profile, "--budget", "0.3", "--junit", again, ok=(1,))
    assert ET.parse(again).getroot().get("timestamp") == "1970-01-02T00:00:00"


# ------------------------------------------------------------------ the workbook's planner sheet


def test_the_planner_status_points_at_the_typed_column(tmp_path: Path) -> None:
    import openpyxl

    from popliner.writers.formula import column_letter
    from popliner.writers.planner import ESTIMATE_TEXT, FIRST_LAYER_ROW, IPU_COL, STATUS_ROW

    book = tmp_path / "review.xlsx"
    invoke(FIXTURES / "bert-tiny-training.json", "--solve", "--num-ipus", "4", "--recompute", "pipeline", "-o", book)
    sheet = next(ws for ws in openpyxl.load_workbook(book).worksheets
                 if ws.cell(STATUS_ROW, 1).value == "IPUs used")
    typed_at = f"column {column_letter(IPU_COL)} from row {FIRST_LAYER_ROW}"
    assert typed_at == "column B from row 19" and typed_at in ESTIMATE_TEXT
    # The status formula carries the text, and the cell it names is where a layer's IPU is typed.
    assert typed_at in str(sheet.cell(STATUS_ROW, 4).value)
    assert sheet.cell(FIRST_LAYER_ROW - 1, IPU_COL).value == "IPU"
    assert sheet.cell(FIRST_LAYER_ROW, IPU_COL).value == 0


# ------------------------------------------------------------------ plots


def drawn_figure(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from popliner.writers import plots

    figures: list[Any] = []
    monkeypatch.setattr(plots, "_save", lambda figure, *_: figures.append(figure))
    return figures


def test_the_tiles_plot_fills_its_width_with_heatmaps(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from popliner.writers.plots import plot_tiles
    from tests.helpers import ipu_memory

    figures = drawn_figure(monkeypatch)
    per_tile = np.zeros((5, 1472), np.int64)
    per_tile[0] = 100 + np.arange(1472) % 300
    ipus = [ipu_memory(k, (str(k),), per_tile, np.zeros(1472, np.int64), 1000) for k in range(4)]
    plot_tiles(ipus, "tiles.png", force=True)
    figure = figures[0]
    figure.draw_without_rendering()  # constrained layout places the axes on drawing
    heatmaps = [a for a in figure.axes if a.images]
    assert len(heatmaps) == 4
    # The maps' widths on the page, as a share of the figure's (was 0.63: a legend beside the sorted
    # plot and a fixed row height left a band of white space on the right).
    share = sum(a.get_window_extent().width for a in heatmaps) / figure.bbox.width
    assert share > 0.68, share
    sorted_plot = next(a for a in figure.axes if a.lines and not a.images and a.get_legend() is not None)
    assert sorted_plot.get_legend().get_bbox_to_anchor().bounds == sorted_plot.bbox.bounds  # inside its axes


def test_the_layer_plot_shows_the_operations_of_no_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    from popliner.analysis import AnalysisOptions, load_analysis
    from popliner.breakdown import build_breakdown, layer_rows, unlayered_row
    from popliner.writers.plots import plot_layers

    analysis = load_analysis(str(FIXTURES / "bert-tiny-training.json"), AnalysisOptions(), use_cache=False)
    no_layer = unlayered_row(analysis)
    assert no_layer is not None and no_layer.num_operations == 367 - 325  # as the log line counts
    figures = drawn_figure(monkeypatch)
    plot_layers(build_breakdown(analysis), "layers.png", budget_bytes=600_000, force=True)
    worst = figures[0].axes[1]
    labels = [t.get_text() for t in worst.get_xticklabels()]
    assert labels == ["(no layer)", *(r.layer for r in layer_rows(analysis))]
    heights = [p.get_height() for p in worst.patches]
    assert heights[0] == no_layer.worst_tile_bytes


# ------------------------------------------------------------------ notebook API


def test_load_takes_the_training_options_as_keywords() -> None:
    import popliner
    from popliner.errors import UsageProblem
    from popliner.memory.training import TrainingOptions

    path = str(FIXTURES / "bert-tiny-training.json")
    model = popliner.load(path, use_cache=False, recompute="every-layer", optimizer_state="off-chip",
                          head_placement="wrap")
    assert model.analysis.options.training == TrainingOptions(recompute="every-layer", optimizer_state="off-chip",
                                                              head_placement="wrap")
    same = popliner.load(path, use_cache=False, training=TrainingOptions(recompute="every-layer",
                                                                         optimizer_state="off-chip",
                                                                         head_placement="wrap"))
    plain = popliner.load(path, use_cache=False)
    assert model.layers().equals(same.layers()) and not model.layers().equals(plain.layers())
    with pytest.raises(UsageProblem, match="request, not a mode"):
        popliner.load(path, recompute="auto")
    with pytest.raises(UsageProblem, match="not both"):
        popliner.load(path, recompute="pipeline", training=TrainingOptions())
    with pytest.raises(UsageProblem, match="unknown option.*recompute"):
        popliner.load(path, recomputation="pipeline")
