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
from popliner.ops.layers import compile_regex
from popliner.profile.loader import parse_profile_bytes
from tests.helpers import chain_document
from tests.hostile import context_chain, no_contexts, write_json

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "fixtures" / "profiles" / "tiny.json"
RUNAWAY = "(a|aa)+$"


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "popliner", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("popliner: error:")]


# -- regexes from options and files ----------------------------------------------------


def test_runaway_regex_is_stopped_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLINER_REGEX_SECONDS", "0.2")
    regex = compile_regex(RUNAWAY, "--layer-name-regex")
    assert regex.search("aaaa") is not None and regex.search("b") is None
    with pytest.raises(UsageProblem) as info:
        regex.search("a" * 40 + "!")  # about 2**20 times the work of 20 characters: hours with `re`
    message = str(info.value)
    assert RUNAWAY in message and "--layer-name-regex" in message and "POPLINER_REGEX_SECONDS" in message
    assert "\n" not in message


def test_many_names_share_one_total_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLINER_REGEX_SECONDS", "0.01")  # 0.01 s per name, 0.2 s in all
    regex = compile_regex("(a|aa)+x", "--backward-regex")
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
    from popliner.memory.training import update_operations

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
