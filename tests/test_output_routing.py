"""One ``-o`` convention: the main command, ``plan`` and ``config-from`` write what FILE's name says.

Through the one map of endings (:mod:`popliner.writers.formats`): the main
command's ``-o`` writes the tables (``.csv``, ``.tsv``, ``.txt``, ``.xlsx``,
any other name) or, with ``--solve``, the split JSON (``.json``), the
pipeline config (``.yaml``) or the report (``.html``), each byte for byte
what the other way of asking writes; ``plan -o x.yaml`` is ``--config-out``;
``config-from -o x.json`` writes optimum's ``ipu_config.json``. An ending of
another kind of output is refused with exit 2, one line, and no file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from popliner.cli import cli
from popliner.config.yaml_io import read_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profiles"
PROFILE = FIXTURES / "bert-tiny-training.json"
TINY = FIXTURES / "tiny-training.json"
SOLVE = ("--solve", "--num-ipus", "3", "--no-cache")


def run(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def refused(result: Result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("popliner: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_main_json_is_the_split_json_that_stdout_gets(tmp_path: Path) -> None:
    printed = run(PROFILE, *SOLVE)
    out = tmp_path / "split.json"
    written = run(PROFILE, *SOLVE, "-o", out)
    assert printed.exit_code == written.exit_code == 3  # bert-tiny does not fit 3 IPUs at full budget
    assert written.stdout == ""
    assert out.read_text() == printed.stdout
    assert json.loads(out.read_text())["num_ipus_requested"] == 3


def test_main_yaml_is_the_config_out_config(tmp_path: Path) -> None:
    via_flag, via_o = tmp_path / "a.yaml", tmp_path / "b.YML"
    flag = run(PROFILE, *SOLVE, "--config-out", via_flag)
    routed = run(PROFILE, *SOLVE, "-o", via_o)
    assert flag.stdout == routed.stdout and json.loads(routed.stdout)["stages"]  # the split JSON stays on stdout
    assert via_o.read_bytes() == via_flag.read_bytes()
    assert read_config(via_o).num_ipus == len(json.loads(routed.stdout)["stages"])


def test_main_html_is_the_report(tmp_path: Path) -> None:
    via_flag, via_o = tmp_path / "a.html", tmp_path / "b.html"
    run(PROFILE, *SOLVE, "--report", via_flag)
    run(PROFILE, *SOLVE, "-o", via_o)
    assert via_o.read_bytes() == via_flag.read_bytes()


def test_main_tables_go_to_stdout_when_o_takes_the_split(tmp_path: Path) -> None:
    out = tmp_path / "split.json"
    result = run(PROFILE, *SOLVE, "-o", out, "--layer-breakdown")
    assert result.stdout.startswith("Layer,Operations,")
    assert json.loads(out.read_text())["stages"]


def test_main_format_keeps_meaning_the_tables(tmp_path: Path) -> None:
    out = tmp_path / "tables.json"
    result = run(PROFILE, "--format", "tsv", "-o", out)
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("Layer\t")


@pytest.mark.parametrize(("args", "needles"), [
    (("-o", "{d}/x.json"), ("-o", "x.json: the split JSON needs --solve", ".csv, .tsv, .txt or .xlsx")),
    (("-o", "{d}/x.yaml"), ("the pipeline config needs --solve",)),
    ((*SOLVE, "-o", "{d}/x.png"), ("x.png", ".txt, .csv, .tsv, .xlsx, .json, .yaml, .yml, .html or .htm",
                                   "not as .png", "a name with none of popliner's endings gets csv")),
    ((*SOLVE, "-o", "{d}/x.trace.json"), ("x.trace.json", ".json, .yaml")),
    ((*SOLVE, "-o", "{d}/x.yaml", "--config-out", "{d}/y.yaml"), ("-o", "and --config-out both write",)),
    ((*SOLVE, "-o", "{d}/x.html", "--report", "{d}/y.html"), ("and --report both write",)),
])
def test_main_refuses_an_ending_of_another_output(tmp_path: Path, args: tuple[str, ...],
                                                  needles: tuple[str, ...]) -> None:
    refused(run(PROFILE, *(a.format(d=tmp_path) for a in args)), *needles)
    assert list(tmp_path.iterdir()) == []  # before any work: no file


def test_main_json_is_written_safely(tmp_path: Path) -> None:
    out = tmp_path / "split.json"
    out.write_text("keep")
    refused(run(PROFILE, *SOLVE, "-o", out), "exists", "--force")
    assert out.read_text() == "keep"
    assert run(PROFILE, *SOLVE, "-o", out, "--force").exit_code == 3 and out.read_text().startswith("{")
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    refused(run(PROFILE, *SOLVE, "-o", link), "symbolic link", "--force")
    assert run(PROFILE, *SOLVE, "-o", link, "--force").exit_code == 3
    assert not link.is_symlink() and link.read_text() == out.read_text()  # the link replaced, not written through
    assert not (tmp_path / "elsewhere.json").exists()


def test_plan_yaml_is_the_picked_config(tmp_path: Path) -> None:
    via_flag, via_o, as_json = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "plan.json"
    flag = run("plan", TINY, "--ipus", 4, "--global-batch", 64, "--config-out", via_flag)
    routed = run("plan", TINY, "--ipus", 4, "--global-batch", 64, "-o", via_o)
    assert flag.exit_code == routed.exit_code == 0, routed.output
    assert via_o.read_bytes() == via_flag.read_bytes()
    assert routed.stdout == flag.stdout  # the plan JSON stays on stdout
    to_file = run("plan", TINY, "--ipus", 4, "--global-batch", 64, "-o", as_json)
    assert to_file.stdout == "" and as_json.read_text() == flag.stdout
    refused(run("plan", TINY, "--ipus", 4, "-o", tmp_path / "plan.csv"), "plan.csv: a pod plan can be written as",
            ".json, .yaml or .yml, not as .csv (csv output); a name with none of popliner's endings gets json")
    refused(run("plan", TINY, "--ipus", 4, "-o", via_o, "--config-out", tmp_path / "c.yaml", "--force"),
            "both write")


@pytest.fixture()
def review(tmp_path: Path) -> Path:
    profile = tmp_path / "model.json"
    shutil.copy(PROFILE, profile)
    book = tmp_path / "review.xlsx"
    assert run(profile, "-o", book, "--num-ipus", 3, "--head-placement", "last").exit_code == 0
    return book


def test_config_from_json_is_optimums_ipu_config(review: Path, tmp_path: Path) -> None:
    yaml_out, json_out = tmp_path / "p.yaml", tmp_path / "ipu_config.json"
    assert run("config-from", review, "-o", yaml_out).exit_code == 0
    result = run("config-from", review, "-o", json_out)
    assert result.exit_code == 0, result.output
    cfg = read_config(yaml_out)
    document = json.loads(json_out.read_text())
    assert document["ipus_per_replica"] == cfg.num_ipus
    assert sum(document["layers_per_ipu"]) == sum(cfg.layers_per_ipu)
    assert run("config-from", review).stdout == yaml_out.read_text()  # stdout: the YAML
    refused(run("config-from", review, "-o", tmp_path / "p.csv"), "a pipeline config can be written as",
            ".yaml, .yml or .json")
