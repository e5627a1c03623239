"""Hand-crafted hostile inputs (issue 22): bounded work, regexes with a time bound, one line per error."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.cli import cli
from popliner.errors import UsageProblem
from popliner.ops import operations
from popliner.profile.loader import parse_profile_bytes
from popliner.regexes import compile_bounded
from tests.helpers import FIXTURES, chain_document
from tests.hostile import context_chain, no_contexts, write_json

REPO = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
RUNAWAY = "(a|aa)+$"


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "popliner", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("popliner: error:")]


# -- regexes from options and files ----------------------------------------------------


def test_runaway_regex_is_stopped_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLINER_REGEX_SECONDS", "0.2")
    regex = compile_bounded(RUNAWAY, "--layer-name-regex")
    assert regex.search("aaaa") is not None and regex.search("b") is None
    with pytest.raises(UsageProblem) as info:
        regex.search("a" * 40 + "!")  # about 2**20 times the work of 20 characters: hours with `re`
    message = str(info.value)
    assert RUNAWAY in message and "--layer-name-regex" in message and "POPLINER_REGEX_SECONDS" in message
    assert "\n" not in message


def test_many_names_share_one_total_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLINER_REGEX_SECONDS", "0.01")  # 0.01 s per name, 0.2 s in all
    regex = compile_bounded("(a|aa)+x", "--backward-regex")
    with pytest.raises(UsageProblem, match="names"):
        for _ in range(100_000):
            regex.search("a" * 16 + "!")  # each search is well under 0.01 s, together they are not


def _long_name_profile(tmp_path: Path) -> Path:
    name = "a" * 40 + "!"
    doc = chain_document([{"name": name, "data": {"opName": name}}, {"name": "x"}])
    doc["variables"] = {"id": [7], "bytes": [8], "tile": [0], "class": [0]}
    doc["livenessClasses"] = [[[0, 2]]]
    doc["programs"][1]["vars"] = [7]
    return write_json(doc, tmp_path / "long-name.json")


@pytest.mark.parametrize("option", ["--layer-name-regex", "--backward-regex"])
def test_runaway_regex_option_exits_2(tmp_path: Path, option: str) -> None:
    extra = ["--head-placement", "wrap"] if option == "--backward-regex" else []
    r = _run("--no-cache", str(_long_name_profile(tmp_path)), option, RUNAWAY, *extra,
             env={"POPLINER_REGEX_SECONDS": "0.3"})
    assert r.returncode == 2, r.stderr
    (line,) = _error_lines(r.stderr)
    assert RUNAWAY in line and option in line
    assert "Traceback" not in r.stderr


def test_runaway_update_regex_in_a_config_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from popliner.config.yaml_io import read_config as load_config
    from popliner.ops.roles import update_operations

    cfg_path = tmp_path / "pipeline.yaml"
    r = CliRunner().invoke(cli, ["-q", str(REPO / "fixtures/profiles/tiny-training.json"), "--solve", "--num-ipus",
                                 "2", "--config-out", str(cfg_path)])
    assert r.exit_code == 0, r.output
    text = cfg_path.read_text().replace("  head_placement: first\n",
                                        f"  head_placement: first\n  update_regex: '{RUNAWAY}'\n")
    cfg_path.write_text(text)
    cfg = load_config(str(cfg_path))
    assert cfg.training_options.update_regex == RUNAWAY
    analysis = load_analysis(str(_long_name_profile(tmp_path)), use_cache=False)
    monkeypatch.setenv("POPLINER_REGEX_SECONDS", "0.2")
    with pytest.raises(UsageProblem, match=r"training\.update_regex"):
        update_operations(analysis.profile, analysis.ops, cfg.training_options.update_regex)


def test_invalid_regex_in_a_config_names_the_key(tmp_path: Path) -> None:
    from popliner.config.yaml_io import read_config as load_config
    from popliner.errors import ConfigError

    cfg_path = tmp_path / "pipeline.yaml"
    CliRunner().invoke(cli, ["-q", str(REPO / "fixtures/profiles/tiny-training.json"), "--solve", "--num-ipus", "2",
                             "--config-out", str(cfg_path)])
    cfg_path.write_text(cfg_path.read_text().replace("  head_placement: first\n",
                                                     "  head_placement: first\n  update_regex: '(a'\n"))
    with pytest.raises(ConfigError, match="update_regex"):
        load_config(str(cfg_path))


# -- internal errors: one line unless -v -------------------------------------------------


def test_internal_error_is_one_line_at_the_default_verbosity(monkeypatch: pytest.MonkeyPatch) -> None:
    import popliner.analysis

    def crash(*a: Any, **k: Any) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(popliner.analysis, "derive_operations", crash)
    r = CliRunner().invoke(cli, ["--no-cache", str(TINY)])
    assert r.exit_code == 70
    assert "Traceback" not in r.stderr
    (line,) = _error_lines(r.stderr)
    assert "ZeroDivisionError" in line and "rerun with -v" in line
    r = CliRunner().invoke(cli, ["-v", "--no-cache", str(TINY)])
    assert r.exit_code == 70 and "Traceback (most recent call last)" in r.stderr


# -- profiles without debug contexts -----------------------------------------------------


def test_profile_without_debug_contexts_is_analysed_and_says_so(tmp_path: Path) -> None:
    path = write_json(no_contexts(3), tmp_path / "no-contexts.json")
    r = _run("--no-cache", str(path), "-o", str(tmp_path / "t.csv"))
    assert r.returncode == 0, r.stderr
    assert "none of its 4 programs carries a debug context" in r.stderr
    r = _run("--no-cache", str(path), "--solve")
    assert r.returncode == 2 and len(_error_lines(r.stderr)) == 1 and "Traceback" not in r.stderr
    a = load_analysis(str(path), use_cache=False)
    assert a.ops.count == 0 and a.ops.unattributed_programs == a.ops.reachable_programs == 4
    assert a.ops.op_of_program.tolist() == [-1] * 4


# -- long debug-context chains: every context looked at once -------------------------------


class _Counting(tuple):  # type: ignore[type-arg]
    reads = 0

    def __getitem__(self, i: Any) -> Any:
        type(self).reads += 1
        return super().__getitem__(i)


def test_operation_names_look_at_each_context_once() -> None:
    depth = 2000
    doc = context_chain(depth)
    doc["debugContexts"][0]["data"] = {"opName": "root", "opType": "Root"}
    profile = parse_profile_bytes(json.dumps(doc).encode(), "chain.json")
    counting = _Counting(profile.contexts.data)
    profile = dataclasses.replace(profile, contexts=dataclasses.replace(profile.contexts, data=counting))
    ops = operations.derive_operations(profile)
    assert ops.count == depth
    assert set(ops.op_type) == {"Root"}  # every operation inherits its type from the root, 2000 levels up
    assert names_of_depth(ops.names, depth)
    assert _Counting.reads <= 2 * depth  # a walk to the root per operation read 2 million


def names_of_depth(names: tuple[str, ...], depth: int) -> bool:
    # The root's opName is the nearest name for all but the contexts that have none of their own.
    return names.count("root") == depth


def test_nearest_data_matches_a_plain_walk() -> None:
    rng = np.random.default_rng(5)
    contexts = []
    for i in range(300):
        c: dict[str, Any] = {"name": f"c{i}", "layer": "popart" if rng.random() < 0.5 else "poplar"}
        if i and rng.random() < 0.8:
            c["parent"] = int(rng.integers(0, i))
        keys = [k for k in ("opName", "op_name", "opType", "op_type", "inputs", "tensorId", "instanceId")
                if rng.random() < 0.2]
        if keys:
            c["data"] = {k: ([f"in{i}"] if k == "inputs" else rng.choice(["", f"v{i}"])) for k in keys}
        contexts.append(c)
    profile = parse_profile_bytes(json.dumps(chain_document(contexts)).encode(), "r.json")
    table = operations._nearest_data(profile, list(range(len(contexts))))
    for c in range(len(contexts)):
        chain = []
        node = c
        while node != -1:
            if profile.contexts.data[node]:
                chain.append(profile.contexts.data[node])
            node = int(profile.contexts.parent[node])
        for keys in operations._NEAREST:
            want = next((d[k] for d in chain for k in keys if d.get(k) not in (None, "")), None)
            assert table[c].get(keys[0]) == want, (c, keys)


@pytest.mark.slow
def test_sixty_thousand_contexts_in_one_chain_load_in_seconds(tmp_path: Path) -> None:
    path = write_json(context_chain(60_000), tmp_path / "chain.json")
    a = load_analysis(str(path), AnalysisOptions(), use_cache=False)
    assert a.ops.count == 60_000


# -- bounded work: refused from the sizes, before anything is allocated --------------------


def test_liveness_amplification_of_the_issue_is_refused_fast(tmp_path: Path) -> None:
    from tests.hostile import liveness_amplification

    path = write_json(liveness_amplification(), tmp_path / "amplified.json")  # 1 MB: 25 M events, 3.5 GB before
    assert path.stat().st_size < 1_100_000
    r = _run("--no-cache", str(path))
    assert r.returncode == 2, r.stderr
    (line,) = _error_lines(r.stderr)
    assert str(path) in line and "25,000,000 liveness events" in line and "8,000,000" in line
    assert "POPLINER_MAX_LIVENESS_EVENTS" in line


def test_liveness_limit_counts_events_and_the_variable_raises_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from popliner.memory.work import liveness_events
    from tests.hostile import liveness_amplification

    doc = liveness_amplification(steps=200, intervals=50, variables=6, ops=2)
    path = write_json(doc, tmp_path / "small.json")
    monkeypatch.setenv("POPLINER_MAX_LIVENESS_EVENTS", "299")
    with pytest.raises(Exception, match="300 liveness events in the whole-program sweep") as info:
        load_analysis(str(path), use_cache=False)
    assert "above the limit of 299" in str(info.value)
    monkeypatch.setenv("POPLINER_MAX_LIVENESS_EVENTS", "300")  # whole: 6 tiles x 50; per operation: 2 x 300
    with pytest.raises(Exception, match="600 liveness events over the per-operation sweeps"):
        load_analysis(str(path), use_cache=False)
    monkeypatch.setenv("POPLINER_MAX_LIVENESS_EVENTS", "600")
    a = load_analysis(str(path), use_cache=False)
    assert liveness_events(a.profile, a.ops) == (300, 600)
    # Variables that share a class and a tile are one aggregate: the count does not grow with them.
    doc["variables"]["tile"] = [0] * 6
    a = load_analysis(str(write_json(doc, tmp_path / "one-tile.json")), use_cache=False)
    assert liveness_events(a.profile, a.ops) == (50, 100)


def test_real_profiles_are_far_below_the_limits() -> None:
    from popliner.memory.work import LIMITS, liveness_events, range_cells, tile_cells

    for name in ("bert-base-training.json.gz", "gpt2-small-inference.json.gz", "tiny-training.json"):
        a = load_analysis(str(FIXTURES / name), use_cache=False)
        assert max(liveness_events(a.profile, a.ops)) < LIMITS["POPLINER_MAX_LIVENESS_EVENTS"] / 100
        assert tile_cells(a.profile, a.ops) < LIMITS["POPLINER_MAX_TILE_CELLS"] / 100
        assert range_cells(a.profile.tiles, len(a.layer_names)) < LIMITS["POPLINER_MAX_RANGE_CELLS"] / 100


def test_many_vertex_types_on_many_tiles_are_refused(tmp_path: Path) -> None:
    from tests.hostile import many_vertex_types

    path = write_json(many_vertex_types(types=400), tmp_path / "types.json")  # 26 M dense cells
    r = _run("--no-cache", str(path))
    assert r.returncode == 2, r.stderr
    (line,) = _error_lines(r.stderr)
    assert "65,536 tiles x 400 vertex types = 26,214,400 per-tile cells" in line
    assert "POPLINER_MAX_TILE_CELLS" in line
    r = _run("--no-cache", "-q", str(path), "-o", str(tmp_path / "t.csv"), env={"POPLINER_MAX_TILE_CELLS": "3e7"})
    assert r.returncode == 2 and "POPLINER_MAX_TILE_CELLS='3e7': expected a whole number" in r.stderr


def test_tile_cells_are_refused_by_the_loader_before_any_tilevector_is_decoded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 50,000 types of the issue took 2.5-4.1 s to refuse, all but 0.5 s of it decoding their TileVectors."""
    from popliner.profile import builder
    from popliner.profile.tilevector import decode_tilevector
    from tests.hostile import many_vertex_types

    decoded: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        decoded.append(args)
        return decode_tilevector(*args, **kwargs)

    monkeypatch.setattr(builder, "decode_tilevector", counting)
    raw = json.dumps(many_vertex_types(types=400)).encode()
    with pytest.raises(Exception, match=r"65,536 tiles x 400 vertex types = 26,214,400 per-tile cells"):
        parse_profile_bytes(raw, "types.json")
    assert decoded == []
    monkeypatch.setenv("POPLINER_MAX_TILE_CELLS", str(65_536 * 400))  # exactly at the limit: loaded
    assert len(parse_profile_bytes(raw, "types.json").vertex_types.names) == 400
    assert len(decoded) >= 400


def test_range_tables_of_many_layers_on_many_tiles_are_refused(tmp_path: Path) -> None:
    from tests.hostile import many_operations

    path = write_json(many_operations(count=150, layers=150), tmp_path / "layers.json")
    r = _run("--no-cache", str(path), "--solve")  # before: out of memory past 5.7 GB after 47 s
    assert r.returncode == 2, r.stderr
    (line,) = _error_lines(r.stderr)
    assert ("(65,536 tiles + 512 for a range's fixed cost) x 11,325 ranges of 150 layers = 747,993,600 "
            "range-table cells") in line
    assert "POPLINER_MAX_RANGE_CELLS" in line and str(path) in line


def test_per_operation_totals_hold_no_operations_x_tiles_table(tmp_path: Path) -> None:
    """Each operation's variables summed over tiles: before, a dense (2,048 operations x tiles) table per chunk.

    100,000 operations on 65,536 tiles took 27 s of CPU and 2.2 GB for --operation-breakdown; the sums are
    the dense table's (checked here against it on the fixtures).
    """
    import tracemalloc

    from popliner.memory.liveness import group_peak_totals, group_peaks
    from tests.hostile import many_operations

    for name in ("tiny-training.json", "bert-base-training.json.gz"):
        a = load_analysis(str(FIXTURES / name), use_cache=False)
        ops = a.ops
        chunk = np.arange(ops.count)
        group = np.repeat(chunk, np.diff(ops.var_ptr))
        dense = group_peaks(a.profile, group, ops.var_idx, ops.first_step, ops.last_step).sum(axis=1)
        sums = group_peak_totals(a.profile, group, ops.var_idx, ops.first_step, ops.last_step)
        assert sums.dtype == np.int64 and np.array_equal(sums, dense) and sums.sum() > 0
    a = load_analysis(str(write_json(many_operations(count=3000, layers=3), tmp_path / "ops.json")), use_cache=False)
    tracemalloc.start()
    try:
        totals = a.model.per_operation_totals()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [t.variables for t in totals] == [4] * 3000  # one 4-byte variable each, live over all steps
    assert peak < 100 << 20  # the dense table: 3,000 x 65,536 x 8 bytes = 1.5 GB


@pytest.mark.slow  # a long case (about 3 s)
def test_review_workbook_rows_are_limited_before_any_work(tmp_path: Path) -> None:
    ops = load_analysis(str(TINY), use_cache=False).ops.count
    out = tmp_path / "review.xlsx"
    r = _run("--no-cache", str(TINY), "-o", str(out), env={"POPLINER_MAX_WORKBOOK_ROWS": str(ops - 1)})
    assert r.returncode == 2, r.stderr
    (line,) = _error_lines(r.stderr)
    assert f"{TINY}" in line and f"{ops:,} operations, one row each in the review workbook" in line
    assert f"above the limit of {ops - 1:,} rows" in line and "POPLINER_MAX_WORKBOOK_ROWS" in line
    assert "Traceback" not in r.stderr and list(tmp_path.iterdir()) == []
    r = _run("--no-cache", "-q", str(TINY), "-o", str(out), env={"POPLINER_MAX_WORKBOOK_ROWS": str(ops)})
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
    # CSV tables of the same operations are not limited.
    r = _run("--no-cache", "-q", str(TINY), "--operation-breakdown", "-o", str(tmp_path / "ops.csv"),
             env={"POPLINER_MAX_WORKBOOK_ROWS": "1"})
    assert r.returncode == 0, r.stderr


# -- pipeline configs that are no configs -----------------------------------------------------


def _config_text(tmp_path: Path) -> str:
    cfg = tmp_path / "base.yaml"
    r = CliRunner().invoke(cli, ["-q", str(REPO / "fixtures/profiles/tiny-training.json"), "--solve", "--num-ipus",
                                 "2", "--config-out", str(cfg)])
    assert r.exit_code == 0, r.output
    return cfg.read_text()


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda t: t.replace("gradient_accumulation: 16", "gradient_accumulation: 1" + "0" * 4400),
     "a number in it is too long to read"),
    pytest.param(lambda t: t.replace("mode: training", "mode: training\nextra: " + "[" * 50_000 + "]" * 50_000),
                 "YAML nested too deeply", marks=pytest.mark.slow),  # a long case (about 5 s)
    (lambda t: t + "extra:\n" + "".join(" " * i + "a:\n" for i in range(1200)), "YAML nested too deeply"),
    (lambda t: t.replace("clock_hz: 1000000000.0", "clock_hz: .inf"), "expected a positive finite number, got inf"),
    (lambda t: t.replace("clock_hz: 1000000000.0", "clock_hz: 1" + "0" * 400),
     "expected a positive finite number, got a number of 401 digits"),
], ids=["int-4400-digits", "nested-50k", "nested-maps-1200", "clock-inf", "clock-huge-int"])
def test_config_that_is_no_config_is_one_line_exit_2(tmp_path: Path, edit: Any, expected: str) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(edit(_config_text(tmp_path)))
    for args in (["check", str(path), "--profile", str(REPO / "fixtures/profiles/tiny-training.json")],
                 ["simulate", str(path)]):
        r = _run("-q", *args)
        assert r.returncode == 2, r.stderr
        (line,) = _error_lines(r.stderr)
        assert expected in line and str(path) in line
        assert len(r.stderr.splitlines()) == 1 and len(line) < 400


@pytest.mark.slow  # a long case (about 3 s)
def test_config_larger_than_the_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    text = _config_text(tmp_path)
    path = tmp_path / "big.yaml"
    path.write_text(text + "# padding\n" * 200_000)  # 2 MB of comments: minutes of PyYAML if it were parsed
    r = _run("-q", "simulate", str(path))
    assert r.returncode == 2, r.stderr
    (line,) = _error_lines(r.stderr)
    assert "larger than 1,048,576 characters" in line and "POPLINER_MAX_CONFIG_BYTES" in line
    r = _run("-q", "simulate", str(path), env={"POPLINER_MAX_CONFIG_BYTES": "4000000"})
    assert r.returncode == 0, r.stderr
