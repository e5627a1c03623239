"""Same inputs, byte-identical outputs: every file popliner writes, produced twice."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from tests.helpers import FIXTURES


def produce(folder: Path, profile: Path) -> dict[str, bytes]:
    folder.mkdir()
    runner = CliRunner()
    outputs: dict[str, bytes] = {}

    def run(*args: str) -> None:
        result = runner.invoke(cli, list(args))
        assert result.exit_code == 0, result.stderr
        outputs[" ".join(a.replace(str(folder), "OUT") for a in args)] = result.stdout_bytes

    run(str(profile), "--operation-breakdown", "--format", "tsv", "-o", str(folder / "ops.tsv"))
    run(str(profile), "--layer-breakdown", "--memory-totals", "--memory-affinity")
    run(str(profile), "-o", str(folder / "review.xlsx"), "--solve", "--num-ipus", "4",
        "--config-out", str(folder / "pipeline.yaml"), "--plot", str(folder / "plot.svg"))
    run("simulate", str(folder / "pipeline.yaml"), "--profile", str(profile),
        "--trace", str(folder / "trace.json"))
    run("synth", "--preset", "bert-tiny", "--mode", "training", "-o", str(folder / "synth.json.gz"))
    for path in sorted(folder.iterdir()):
        outputs[path.name] = path.read_bytes()
    return outputs


@pytest.mark.slow  # a long case (about 8 s): every output written twice, in fresh processes
def test_two_runs_are_byte_identical(tmp_path):
    profile = tmp_path / "model.json.gz"
    shutil.copy(FIXTURES / "bert-base-training.json.gz", profile)
    first = produce(tmp_path / "a", profile)
    time.sleep(1.1)  # a timestamp anywhere would now differ
    second = produce(tmp_path / "b", profile)
    assert sorted(first) == sorted(second)
    assert "review.xlsx" in first and "plot-split.svg" in first and "trace.json" in first
    for name in first:
        assert first[name] == second[name], f"{name} differs between two runs"
