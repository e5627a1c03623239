"""One scenario, every door: the same request through each entry point gives the same answer, byte for byte.

The command line's ``--solve`` (its JSON, the pipeline config and the report
it writes), the notebook (``popliner.load(...).plan()``), ``popliner plan``'s
row of the same configuration, ``popliner check`` and ``popliner report`` on
the written config: each must give the same split, the same worst tile per
IPU, the same budget, framework and applied training options. The profiles
are the bundled fixtures and generated PopTorch, PopART and TensorFlow-named
profiles compiled with a recomputation checkpoint in every layer and their
optimizer state off chip (the facts every door must read the same way).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import popliner
from popliner.cli import cli
from popliner.config.yaml_io import read_config
from popliner.errors import UsageProblem
from popliner.synth import generate_document, preset_spec
from tests.paths import FIXTURES

IPUS = 2
#: The module's generated profiles, by framework (the fixture ``generated``).
Generated = Callable[[str], Path]


def _invoke(*args: object, ok: tuple[int, ...] = (0,)) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code in ok, result.output
    return result.stdout


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    """A generated profile per framework, compiled with a checkpoint in every layer and its state off chip: made
    once for the module's tests (each only reads it), not again by every test."""
    folder = tmp_path_factory.mktemp("generated")

    def make(framework: str) -> Path:
        path = folder / f"bert-tiny-{framework}.json"
        if not path.exists():
            spec = preset_spec("bert-tiny", "training", layers=3, framework=framework, checkpoints=True,
                               optimizer_state="off-chip", compiler_categories=True)
            path.write_text(json.dumps(generate_document(spec)))
        return path

    return make


def _record(split: list[list[str]], worst: list[int], budget: int, framework: str,
            options: dict[str, Any] | None) -> str:
    """The answer one door gives, as one canonical text (compared byte for byte)."""
    keys = ("recompute", "optimizer_state", "head_placement", "replication_factor", "sharded_optimizer_state")
    applied = None if options is None else {k: options[k] for k in keys}
    return json.dumps({"split": split, "worst_tile_bytes": worst, "budget": budget, "framework": framework,
                       "options": applied}, sort_keys=True)


def _cli(profile: Path, tmp_path: Path, given: dict[str, str]) -> tuple[str, dict[str, Any]]:
    flags = [part for key, value in given.items() for part in (f"--{key.replace('_', '-')}", value)]
    doc = json.loads(_invoke(profile, "--solve", "--num-ipus", IPUS, *flags, "--no-cache", "--config-out",
                             tmp_path / "c.yaml", "--report", tmp_path / "r.html"))
    return _record([s["layers"] for s in doc["stages"]], [s["worst_tile_bytes"] for s in doc["stages"]],
                   doc["budget_bytes_per_tile"], doc["framework"]["name"], doc.get("training")), doc


def _notebook(profile: Path, given: dict[str, str]) -> str:
    plan = popliner.load(str(profile), use_cache=False).plan(num_ipus=IPUS, **given)
    training = plan.training.as_document() if plan.training is not None else None
    return _record([list(s.layers) for s in plan.split.stages], [s.worst_tile_bytes for s in plan.split.stages],
                   plan.split.budget_bytes, plan.analysis.framework.name, training)


def _pod_row(profile: Path, solved: dict[str, Any]) -> str:
    ipus = solved["num_ipus_used"]
    doc = json.loads(_invoke("plan", profile, "--ipus", ipus, "--all", "--no-cache"))
    t = solved.get("training")
    rows = [c for c in doc["configurations"] if c["ipus_per_replica"] == ipus and (
        t is None or (c["recompute"], c["head_placement"], c["optimizer_state"])
        == (t["recompute"], t["head_placement"], t["optimizer_state"]))]
    assert len(rows) == 1, rows
    row = rows[0]
    options = None if t is None else {"recompute": row["recompute"], "optimizer_state": row["optimizer_state"],
                                      "head_placement": row["head_placement"], "replication_factor": row["replicas"],
                                      "sharded_optimizer_state": row["sharded_optimizer_state"]}
    # The plan's row names the framework in the config it writes; the row itself carries the split's figures.
    return _record([i["layers"] for i in row["ipus"]], [i["worst_tile_bytes"] for i in row["ipus"]],
                   doc["budget_bytes"], solved["framework"]["name"], options)


def _check(profile: Path, tmp_path: Path) -> str:
    config = tmp_path / "c.yaml"
    cfg = read_config(str(config))
    table = _invoke("check", config, "--profile", profile, "--no-cache")
    rows = [line.split() for line in table.splitlines() if line[:3].strip().isdigit()]
    worst = [int(r[3].replace(",", "")) for r in rows]
    budgets = {int(r[7].replace(",", "")) for r in rows}
    assert len(budgets) == 1, table
    training = cfg.options.as_document() if cfg.options is not None else None
    return _record([list(s.layers) for s in cfg.stages], worst, budgets.pop(), cfg.framework or "", training)


class _Tables(HTMLParser):
    """The report's tables by id: rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
            self.tables[self._table].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _report(path: Path, split: list[list[str]], framework: str) -> str:
    """The report's answer: its IPU table's worst tiles and budget, its options table's framework and options."""
    parsed = _Tables()
    parsed.feed(path.read_text())
    head, *ipus = parsed.tables["ipu-table"]
    total, budget, layers = head.index("Total"), head.index("Budget"), head.index("Layers")
    options = {row[0]: row[1] for row in parsed.tables["option-table"][1:] if len(row) >= 2}
    budgets = {int(r[budget].replace(",", "")) for r in ipus}
    assert len(budgets) == 1
    applied = None
    if "recompute" in options:
        applied = {"recompute": options["recompute"], "optimizer_state": options["optimizer_state"],
                   "head_placement": options["head_placement"],
                   "replication_factor": int(options["replication_factor"]),
                   "sharded_optimizer_state": options["sharded_optimizer_state"] == "yes"}
    assert options["framework"] == popliner_title(framework)
    # The report names IPUs by first .. last layer; the split itself is the config's.
    assert [r[layers] for r in ipus] == [s[0] if len(s) == 1 else f"{s[0]} .. {s[-1]}" for s in split]
    return _record(split, [int(r[total].replace(",", "")) for r in ipus], budgets.pop(), framework, applied)


def popliner_title(name: str) -> str:
    from popliner.framework import framework_title

    return framework_title(name)


#: Each profile, with the options given to every door (the BERT fixture fits 2 IPUs only with recomputation).
CASES = [("bert-tiny-training.json", {"recompute": "pipeline"}), ("tiny-training.json", {}), ("poptorch", {}),
         ("popart", {}), ("tensorflow", {}), ("poptorch", {"head_placement": "wrap", "recompute": "pipeline"})]


@pytest.mark.parametrize(("case", "given"), CASES)
def test_every_entry_point_gives_the_same_answer(tmp_path: Path, generated: Generated, case: str,
                                                 given: dict[str, str]) -> None:
    profile = FIXTURES / case if case.endswith(".json") else generated(case)
    cli_answer, solved = _cli(profile, tmp_path, given)
    answers = {
        "notebook": _notebook(profile, given),
        "plan": _pod_row(profile, solved),
        "check": _check(profile, tmp_path),
        "report (--solve)": _report(tmp_path / "r.html", [s["layers"] for s in solved["stages"]],
                                    solved["framework"]["name"]),
    }
    _invoke("report", tmp_path / "c.yaml", "--profile", profile, "-o", tmp_path / "r2.html", "--no-cache")
    answers["report (config)"] = _report(tmp_path / "r2.html", [s["layers"] for s in solved["stages"]],
                                         solved["framework"]["name"])
    for door, answer in answers.items():
        assert answer == cli_answer, f"{case}: {door} differs from the command line"


def test_the_generated_profiles_carry_the_compiled_facts(generated: Generated) -> None:
    """What the cross-door test relies on: each generated profile is read as compiled (checkpoints, off chip)."""
    for framework in ("poptorch", "popart", "tensorflow"):
        base = popliner.load(str(generated(framework)), use_cache=False).analysis.base
        assert base.framework.name == framework
        assert base.checkpointed and base.state_off_chip


def test_on_chip_state_is_refused_for_a_profile_compiled_off_chip(generated: Generated) -> None:
    """The user's option contradicts what the profile was compiled with: one line naming both, not a relabel."""
    profile = generated("poptorch")
    result = CliRunner().invoke(cli, [str(profile), "--solve", "--num-ipus", "2", "--optimizer-state", "on-chip",
                                      "--no-cache"])
    assert result.exit_code == 2 and result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]
    assert "optimizer state on-chip was asked" in line and "compiled with its optimizer state off chip" in line
    with pytest.raises(UsageProblem, match="compiled with its optimizer state off chip"):
        popliner.load(str(profile), use_cache=False).plan(num_ipus=2, optimizer_state="on-chip")


def test_plan_counts_the_streamed_state_of_a_profile_compiled_off_chip(generated: Generated) -> None:
    """Its on-chip rows are left out with a note; every off-chip row streams the state the update loads."""
    profile = generated("poptorch")
    result = CliRunner().invoke(cli, ["plan", str(profile), "--ipus", "2", "--all", "--no-cache"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {c["optimizer_state"] for c in doc["configurations"]} == {"off-chip"}
    assert any("compiled with its optimizer state off chip" in note for note in doc["notes"])
    fitting = [c for c in doc["configurations"] if c["fits"]]
    assert fitting and all(c["step_parts_seconds"]["streaming"] > 0 for c in fitting)
    # What each IPU streams: the bytes of the state its update loads (Adam's two moments, float32 per
    # float16 weight byte: 4 bytes per weight byte), by hand from the profile's remote loads.
    base = popliner.load(str(profile), use_cache=False).analysis.base
    ops = base.ops
    loads = [k for k in range(ops.count) if ops.op_type[k] == "RemoteLoad"]
    variables = {int(v) for k in loads for v in ops.var_idx[ops.var_ptr[k]:ops.var_ptr[k + 1]]}
    total = sum(int(base.profile.variables.bytes[v]) for v in variables)
    for c in fitting:
        if c["replicas"] == 1:
            assert sum(i["streamed_state_bytes"] for i in c["ipus"]) == total


def test_a_model_and_a_scenario_print_as_one_line(tmp_path: Path) -> None:
    model = popliner.load(str(FIXTURES / "bert-tiny-training.json"), use_cache=False)
    for value in (model, model.analysis, model.analysis.base):
        text = repr(value)
        assert "\n" not in text and len(text) < 300, text


def test_check_refuses_a_config_recording_on_chip_state_for_a_profile_compiled_off_chip(
        tmp_path: Path, generated: Generated) -> None:
    profile = generated("popart")
    _cli(profile, tmp_path, {})
    config = tmp_path / "c.yaml"
    text = config.read_text()
    assert "optimizer_state: off-chip" in text
    config.write_text(text.replace("optimizer_state: off-chip", "optimizer_state: on-chip"))
    result = CliRunner().invoke(cli, ["check", str(config), "--profile", str(profile), "--no-cache"])
    assert result.exit_code == 2 and result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]
    assert str(config) in line and "compiled with its optimizer state off chip" in line


def test_a_recomputation_asked_of_a_profile_compiled_with_one_is_refused(tmp_path: Path) -> None:
    spec = preset_spec("bert-tiny", "training", layers=3, recompute="every-layer")
    profile = tmp_path / "recomputed.json"
    profile.write_text(json.dumps(generate_document(spec)))
    result = CliRunner().invoke(cli, [str(profile), "--solve", "--num-ipus", "2", "--recompute", "pipeline",
                                      "--no-cache"])
    assert result.exit_code == 2 and result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]
    assert "recompute pipeline was asked" in line and "compiled with recomputation" in line
    # Left out, the profile's own recomputation is taken, and recorded as such.
    doc = json.loads(_invoke(profile, "--solve", "--num-ipus", 2, "--no-cache"))
    assert doc["training"]["recompute"] == "compiled"


@pytest.mark.parametrize("flags", [("--budget", "0.9"), ("--headroom", "0.1")])
def test_plan_takes_the_budget_as_every_command_does(tmp_path: Path, flags: tuple[str, str]) -> None:
    profile = FIXTURES / "tiny-training.json"  # 1,000 bytes per tile
    solved = json.loads(_invoke(profile, "--solve", "--num-ipus", 2, *flags, "--no-cache"))
    planned = json.loads(_invoke("plan", profile, "--ipus", 2, *flags, "--no-cache"))
    assert solved["budget_bytes_per_tile"] == planned["budget_bytes"] == 900


def test_library_messages_name_parameters_and_the_command_line_names_options(
        caplog: pytest.LogCaptureFixture) -> None:
    profile = FIXTURES / "bert-tiny-training.json"
    with caplog.at_level("WARNING"):
        popliner.load(str(profile), use_cache=False).plan(num_ipus=40, recompute="auto", fit_facts=False)
    text = caplog.text
    assert "num_ipus=40 is more than the 3 layers" in text and "recompute='auto' chose" in text
    assert "--num-ipus" not in text and "--recompute" not in text
    result = CliRunner().invoke(cli, [str(profile), "--solve", "--num-ipus", "40", "--recompute", "auto",
                                      "--no-cache"])
    assert "--num-ipus 40 is more than the 3 layers" in result.stderr and "--recompute auto chose" in result.stderr


def _planner_options(path: Path) -> dict[str, Any]:
    import openpyxl

    book = openpyxl.load_workbook(path, read_only=True)
    try:
        value = book["Split planner"]["G4"].value
    finally:
        book.close()
    assert isinstance(value, str)
    loaded: dict[str, Any] = json.loads(value)
    return loaded


@pytest.mark.parametrize("framework,ipus,recompute", [
    # PopTorch pipelines with recomputation on by itself; on one IPU there is no pipeline to recompute for;
    # PopART leaves autoRecomputation off unless it is set (docs/frameworks.md).
    ("poptorch", 2, "pipeline"), ("poptorch", 1, "none"), ("popart", 2, "none")])
def test_tables_without_a_solve_read_the_options_a_solve_plans(tmp_path: Path, framework: str, ipus: int,
                                                               recompute: str) -> None:
    spec = preset_spec("bert-tiny", "training", layers=3, framework=framework)
    profile = tmp_path / f"{framework}.json"
    profile.write_text(json.dumps(generate_document(spec)))
    _invoke(profile, "--num-ipus", ipus, "-o", tmp_path / "tables.xlsx", "--no-cache")
    _invoke(profile, "--num-ipus", ipus, "--solve", "-o", tmp_path / "solved.xlsx", "--no-cache", ok=(0, 3))
    tables, solved = _planner_options(tmp_path / "tables.xlsx"), _planner_options(tmp_path / "solved.xlsx")
    assert tables["recompute"] == solved["recompute"] == recompute
    assert tables["optimizer_state"] == solved["optimizer_state"]
    # The notebook's tables read the same scenario as the command line's for the same IPUs.
    import csv
    import io

    rows = {r["Layer"]: r for r in csv.DictReader(io.StringIO(_invoke(profile, "--num-ipus", ipus, "--no-cache")))}
    model = popliner.load(str(profile), use_cache=False, num_ipus=ipus)
    assert model.analysis.options.training.recompute == recompute
    layers = model.layers()
    assert [(int(rows[name]["Worst-tile bytes"]), int(rows[name]["Total (bytes)"])) for name in layers["layer"]] \
        == list(zip(layers["worst_tile_bytes"], layers["total"]))
