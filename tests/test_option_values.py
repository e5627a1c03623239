"""Issue 22, points 8, 10 and 14: every number an option takes is checked, on every command.

Before: ``--link-bandwidth nan`` and a 23-digit ``--seed`` were internal
errors (exit 70), ``--time-limit nan`` and ``--mem-per-tile 10^23`` were
accepted, ``--num-ipus 99999999999`` on a 2-layer profile ran out of memory,
``report -G 10^23`` ran for minutes and gigabytes, and a config made with
``--layer-name-regex`` could not be checked at all.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import openpyxl
import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT
from popliner.textsafe import shown
from tests.helpers import FIXTURES
from tests.hostile_names import HOSTILE_CHARACTERS, LAYER_REGEX, VARIABLE, write_hostile

REPO = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
BIG = "1" + "0" * 22  # 10^22, 23 digits
#: A layer rule that names tiny.json's layers differently from every preset ("layer0" instead of "0").
REGEX = r"^(layer\d)"


def _run(*argv: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["-q", *argv])
    return r.exit_code, r.stdout, r.stderr


def _one_line(stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("popliner: error: "), stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A config and a workbook of tiny.json made with REGEX."""
    folder = tmp_path_factory.mktemp("made")
    out = {"config": folder / "p.yaml", "workbook": folder / "r.xlsx", "split": folder / "split.json"}
    r = CliRunner().invoke(cli, ["-q", str(TINY), "--layer-name-regex", REGEX, "--solve", "--num-ipus", "2",
                                 "--config-out", str(out["config"]), "-o", str(out["workbook"])])
    assert r.exit_code == 0, r.stderr
    out["split"].write_text(r.stdout)
    return out


def _cases(cfg: str, book: str) -> list[tuple[list[str], str]]:
    solve = [str(TINY), "--solve", "--num-ipus", "2"]
    check = ["check", cfg, "--profile", str(TINY)]
    report = ["report", cfg, "--profile", str(TINY), "-o", "/dev/null"]
    return [
        ([*solve, "--link-bandwidth", "nan"], "--link-bandwidth"),  # exit 70 before
        ([*solve, "--link-bandwidth", "inf"], "--link-bandwidth"),
        ([*solve, "--link-bandwidth", "-1"], "--link-bandwidth"),
        ([*solve, "--time-limit", "nan"], "--time-limit"),  # accepted before
        ([*solve, "--time-limit", "inf"], "--time-limit"),
        ([*solve, "--time-limit", "0"], "--time-limit"),
        ([*solve, "--mem-per-tile", "1e23"], "--mem-per-tile"),
        ([*solve, "--mem-per-tile", BIG], "--mem-per-tile"),  # accepted before
        ([*solve, "--seed", BIG], "--seed"),  # exit 70 before
        ([*solve, "--seed", "-1"], "--seed"),
        ([str(TINY), "--solve", "--num-ipus", "99999999999"], "--num-ipus"),  # out of memory before
        ([*solve, "--gradient-accumulation", BIG], "--gradient-accumulation"),
        ([*solve, "--replication-factor", BIG], "--replication-factor"),
        ([*solve, "--min-layers-per-stage", BIG], "--min-layers-per-stage"),
        ([*solve, "--headroom", "nan"], "--headroom"),
        ([*solve, "--matmul-proportion", "nan"], "--matmul-proportion"),
        ([*check, "--budget", "nan"], "--budget"),
        ([*check, "--replication-factor", BIG], "--replication-factor"),
        (["simulate", cfg, "--link-bandwidth", "nan"], "--link-bandwidth"),
        (["simulate", cfg, "--micro-batch-size", BIG], "--micro-batch-size"),
        (["simulate", cfg, "--sync-cycles", BIG], "--sync-cycles"),
        (["simulate", cfg, "-G", BIG], "--gradient-accumulation"),
        ([*report, "-G", BIG], "--gradient-accumulation"),  # minutes and GB before
        ([*report, "--link-bandwidth", "nan"], "--link-bandwidth"),
        ([*report, "--sync-cycles", BIG], "--sync-cycles"),
        (["config-from", book, "--profile", str(TINY), "--gradient-accumulation", BIG], "--gradient-accumulation"),
        (["synth", "-o", "/dev/null", "--seed", BIG], "seed"),
        (["synth", "-o", "/dev/null", "--scale", "nan"], "scale"),
        (["synth", "-o", "/dev/null", "--layers", "99999999999"], "layers"),
    ]


def test_bad_numbers_are_one_line_and_exit_2(made: dict[str, Path]) -> None:
    for argv, option in _cases(str(made["config"]), str(made["workbook"])):
        started = time.monotonic()
        code, out, err = _run(*argv)
        assert code == EXIT_BAD_INPUT, (argv, err)
        _one_line(err, option)
        assert out == "" and time.monotonic() - started < 10, argv


def test_more_ipus_than_layers_are_clamped_or_refused(tmp_path: Path) -> None:
    started = time.monotonic()
    r = CliRunner().invoke(cli, [str(TINY), "--solve", "--num-ipus", "4000"])
    assert r.exit_code == 0, r.stderr
    assert "--num-ipus 4000 is more than the 2 layers: using at most 2 IPUs" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["num_ipus_requested"] == 4000 and doc["num_ipus_used"] == 2
    assert "the split uses 2 of the 4000 IPUs asked for" in r.stderr
    book = tmp_path / "r.xlsx"
    code, _, err = _run(str(TINY), "-o", str(book), "--num-ipus", "4000")
    assert code == 0, err
    planner = openpyxl.load_workbook(book, read_only=True)["Split planner"]
    ipu_row = next(row for row in planner.iter_rows(values_only=True) if row[0] == "IPU")
    assert [v for v in ipu_row[1:] if v is not None] == [0, 1]  # one column per layer, not 4000
    assert time.monotonic() - started < 30
    code, _, err = _run(str(TINY), "--solve", "--num-ipus", "3", "--exact-ipus")
    assert code == EXIT_BAD_INPUT
    _one_line(err, "--exact-ipus --num-ipus 3", "2 layers", "--num-ipus 2")


def test_config_commands_take_the_layer_options_the_config_was_made_with(made: dict[str, Path]) -> None:
    cfg, book = str(made["config"]), str(made["workbook"])
    solved = {s["ipu"]: s["worst_tile_bytes"] for s in json.loads(made["split"].read_text())["stages"]}
    # The config records the rule (layer_options) and the commands apply it; before, it could not be checked.
    assert "layer_options:\n  layer_name_regex: ^(layer\\d)\n" in made["config"].read_text()
    for extra in ([], ["--layer-name-regex", REGEX]):  # the same option again is fine
        code, out, err = _run("check", cfg, "--profile", str(TINY), *extra)
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()[2:]]
        assert {int(r[0]): int(r[3].replace(",", "")) for r in rows} == solved  # IPU, layers, tile, total
    code, out, err = _run("simulate", cfg, "--profile", str(TINY))
    assert code == 0 and "layer0" in out, err
    code, _, err = _run("report", cfg, "--profile", str(TINY), "-o", "/dev/null")
    assert code == 0, err
    # Another rule than the recorded one is refused, naming both.
    code, _, err = _run("check", cfg, "--profile", str(TINY), "--layer-name-regex", "^(layer)")
    assert code == EXIT_BAD_INPUT
    _one_line(err, "--layer-name-regex '^(layer)'", "layer_options.layer_name_regex")
    # The workbook records no rule: without it one line says what to give; with it, the same figures.
    for argv in (["check", book, "--profile", str(TINY)], ["config-from", book, "--profile", str(TINY)]):
        code, _, err = _run(*argv)
        assert code == EXIT_BAD_INPUT, argv
        _one_line(err, "'layer0'", "--layer-name-regex")
    code, out, err = _run("check", book, "--profile", str(TINY), "--layer-name-regex", REGEX)
    assert code == 0, err
    assert {int(r[0]): int(r[3].replace(",", "")) for r in (x.split() for x in out.splitlines()[2:])} == solved
    code, out, err = _run("config-from", book, "--profile", str(TINY), "--layer-name-regex", REGEX)
    assert code == 0 and "layer_name_regex: ^(layer\\d)" in out, err


@pytest.mark.parametrize(("block", "needle"), [
    ("layer_options:\n  layer_name_regex: '('\n", "layer_options.layer_name_regex: not a regular expression"),
    ("layer_options:\n  layer_preset: nope\n", "layer_options.layer_preset"),
    ("layer_options:\n  layer_colour: red\n", "layer_colour"),
    ("layer_options:\n  all_vars: maybe\n", "layer_options.all_vars"),
    ("layer_options:\n  op_layers: ','\n", "layer_options.op_layers"),
])
def test_bad_layer_options_in_a_config(made: dict[str, Path], tmp_path: Path, block: str, needle: str) -> None:
    text = made["config"].read_text()
    start = text.index("layer_options:")
    end = text.index("solver:", start)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text[:start] + block + text[end:])
    code, _, err = _run("check", str(bad), "--profile", str(TINY))
    assert code == EXIT_BAD_INPUT
    _one_line(err, str(bad), needle)


def test_junit_and_check_table_with_hostile_names(tmp_path: Path) -> None:
    hostile = write_hostile(tmp_path / "hostile.json")
    tables = {}
    for profile in (TINY, hostile):
        cfg, junit = tmp_path / f"{profile.stem}.yaml", tmp_path / f"{profile.stem}.xml"
        code, _, err = _run(str(profile), "--layer-name-regex", LAYER_REGEX, "--solve", "--num-ipus", "2",
                            "--config-out", str(cfg))
        assert code == 0, err
        code, out, err = _run("check", str(cfg), "--profile", str(profile), "--layer-name-regex", LAYER_REGEX,
                              "--budget", "0.3", "--junit", str(junit))
        assert code == EXIT_DOES_NOT_FIT, err
        tables[profile.stem] = out
        ET.parse(junit)  # expat refuses every character XML forbids
    out = tables["hostile"]
    assert len(out.splitlines()) == len(tables[TINY.stem].splitlines())
    assert not HOSTILE_CHARACTERS - {"\n"} & set(out)
    assert shown(VARIABLE) in out
