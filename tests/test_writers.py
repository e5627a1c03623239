"""The writer map: one suffix convention for every command, and a new format as one writer plus one map line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO
from xml.etree import ElementTree as ET

import pytest

from popliner.checkreport import CheckReport
from popliner.errors import UsageProblem
from popliner.writers import formats
from popliner.writers.formats import suffixes_for, writer_for
from popliner.writers.writer import Functions, Writer
from tests.helpers import FIXTURES, invoke


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("writers")
    profile = folder / "bert-tiny.json"
    shutil.copy(FIXTURES / "bert-tiny-training.json", profile)
    config = folder / "pipeline.yaml"
    invoke(profile, "--solve", "--num-ipus", "3", "--head-placement", "last", "--config-out", config)
    return profile, config


def test_every_suffix_names_one_writer_per_kind() -> None:
    # Two writers may share a suffix only for different kinds (.json: a split or a simulation, or a config).
    seen: dict[tuple[str, str], str] = {}
    for w in formats.WRITERS:
        for suffix in w.suffixes:
            assert suffix == suffix.lower() and suffix.startswith(".")
            for kind in w.kinds:
                assert (suffix, kind) not in seen, (suffix, kind, seen.get((suffix, kind)), w.name)
                seen[(suffix, kind)] = w.name
    assert seen[(".json", "Simulation")] == "json" and seen[(".json", "PipelineConfig")] == "ipu_config"


def test_each_format_writes_exactly_the_kinds_its_map_line_names() -> None:
    # The map names modules without importing them; a line whose kinds drifted from its module's functions
    # would route a suffix to a format that cannot write it.
    for w in formats.WRITERS:
        assert set(w.functions()) == w.kinds, w.name


def test_reading_the_map_imports_no_format_module() -> None:
    # In a fresh interpreter: choosing the CSV writer loads the tables module only when it writes.
    code = ("import sys; from popliner.writers.formats import writer_for; w = writer_for('t.csv', 'Tables', 'csv'); "
            "print(sorted(m for m in sys.modules if m.startswith('popliner.writers.') and m not in "
            "('popliner.writers.formats', 'popliner.writers.writer')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_longest_suffix_wins_and_other_names_get_the_default() -> None:
    assert writer_for("step.trace.json", "Simulation", "text").name == "trace"
    assert writer_for("STEP.JSON", "Simulation", "text").name == "json"
    assert writer_for("step.log", "Simulation", "text").name == "text"
    assert writer_for(None, "Simulation", "text").name == "text"
    assert writer_for("-", "CheckReport", "text").name == "text"
    assert writer_for("memory.xml", "CheckReport", "text").name == "junit"
    assert writer_for("result.json", "CheckReport", "text").name == "check_json"
    assert writer_for("summary.md", "CheckReport", "text").name == "markdown"
    assert writer_for("layers.tsv", "Tables", "csv").name == "tsv"


def test_a_suffix_of_another_kind_is_refused_with_the_ones_that_fit() -> None:
    with pytest.raises(UsageProblem) as caught:
        writer_for("check.png", "CheckReport", "text", what="a check")
    # Issue 36 point 9: the message read ".txt or .xml; any other name: text", which .png is. It names the
    # ending it refuses, and what names popliner does not know get.
    assert str(caught.value) == ("-o check.png: a check can be written as .txt, .json, .md, .markdown or .xml, "
                                 "not as .png (png output); a name with none of popliner's endings gets text")
    assert suffixes_for("Figure") == (".png", ".svg")


def test_simulate_writes_each_format_by_the_name_of_o(split: tuple[Path, Path], tmp_path: Path) -> None:
    profile, config = split
    summary = json.loads(invoke("simulate", config, "--json").stdout)
    invoke("simulate", config, "-o", tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text()) == summary
    invoke("simulate", config, "-o", tmp_path / "s.trace.json")
    trace = json.loads((tmp_path / "s.trace.json").read_text())
    assert trace["otherData"]["generator"] == "popliner simulate"
    invoke("simulate", config, "-o", tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    invoke("simulate", config, "-o", tmp_path / "s.svg")
    ET.parse(tmp_path / "s.svg")  # well-formed SVG
    invoke("simulate", config, "-o", tmp_path / "s.txt")
    assert (tmp_path / "s.txt").read_text() == invoke("simulate", config).stdout
    # The aliases: --trace and --json take any name.
    invoke("simulate", config, "--trace", tmp_path / "t.json", "--json", "-o", tmp_path / "j.txt")
    assert json.loads((tmp_path / "t.json").read_text()) == trace
    assert json.loads((tmp_path / "j.txt").read_text()) == summary
    refused = invoke("simulate", config, "-o", tmp_path / "s.xml", ok=(2,))
    assert "a simulation can be written as .txt, .json, .trace.json, .png or .svg" in refused.stderr
    assert not (tmp_path / "s.xml").exists()


def test_check_writes_junit_by_the_name_of_o(split: tuple[Path, Path], tmp_path: Path) -> None:
    profile, config = split
    invoke("check", config, "--profile", profile, "--junit", tmp_path / "alias.xml")
    invoke("check", config, "--profile", profile, "-o", tmp_path / "memory.xml")
    suite = ET.parse(tmp_path / "memory.xml").getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "3" and suite.get("failures") == "0"
    table = invoke("check", config, "--profile", profile).stdout
    invoke("check", config, "--profile", profile, "-o", tmp_path / "table.txt")
    assert (tmp_path / "table.txt").read_text() == table
    assert invoke("check", config, "--profile", profile, "-o", tmp_path / "c.yaml", ok=(2,)).stderr.count("\n") == 1


def _write_fill(report: CheckReport, stream: IO[str]) -> None:
    for ipu in report.result.ipus:
        stream.write(f"{ipu.ipu} {ipu.worst_tile_bytes / ipu.budget:.4f}\n")


FILL: Functions = {"CheckReport": _write_fill}


def test_a_new_format_is_one_writer_and_one_line_in_the_map(split: tuple[Path, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # The walkthrough of docs/writers.md: a toy format (FILL, above) that says, per IPU, how full its worst
    # tile is.
    toy = Writer("fill", (".fill",), frozenset({"CheckReport"}), __name__, "FILL")
    monkeypatch.setattr(formats, "WRITERS", [*formats.WRITERS, toy])
    profile, config = split
    invoke("check", config, "--profile", profile, "-o", tmp_path / "ipus.fill")
    # Independently, from the per-IPU table the same command prints: worst-tile total over the budget.
    table = invoke("check", config, "--profile", profile).stdout
    rows = [line.split() for line in table.splitlines()[2:]]
    expected = [f"{r[0]} {int(r[3].replace(',', '')) / int(r[7].replace(',', '')):.4f}" for r in rows]
    assert len(expected) == 3
    assert (tmp_path / "ipus.fill").read_text().splitlines() == expected
    monkeypatch.undo()  # without the map's line, .fill is a name like any other: the table
    invoke("check", config, "--profile", profile, "-o", tmp_path / "again.fill")
    assert (tmp_path / "again.fill").read_text() == table
