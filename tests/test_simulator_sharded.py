"""Sharded execution (optimum-graphcore's inference): one stage at a time, each micro-batch through every IPU.

Expected figures are worked out by hand from the time model of
popliner.simulator.engine: a cycle lasts compute + sync + copy, and in a
sharded cycle only the stage that ran computes and sends.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from popliner.cli import cli
from popliner.simulator import SimStage, simulate
from popliner.simulator.schedule import Fragment, sharded_schedule
from tests.helpers import FIXTURES

CLOCK = 1e9
BANDWIDTH = 1e9  # one byte per clock cycle: send_bytes are copy cycles
TINY_TRAINING = FIXTURES / "tiny-training.json"


def two_stages() -> list[SimStage]:
    return [SimStage(0, 0, "forward", 100, 50), SimStage(1, 1, "forward", 300, 0)]


def test_the_schedule_runs_one_stage_at_a_time() -> None:
    sched = sharded_schedule(2, 3)
    assert [[(f.stage, f.kind, f.microbatch) for f in frags if f.kind == "M"] for frags in sched] == [
        [(0, "M", 0)], [(1, "M", 0)], [(0, "M", 1)], [(1, "M", 1)], [(0, "M", 2)], [(1, "M", 2)]]
    assert sched[0] == (Fragment(0, "D", 0), Fragment(0, "M", 0), Fragment(0, "C", 0))
    assert sched[1] == (Fragment(1, "M", 0), Fragment(1, "H", 0), Fragment(1, "C", 0))


def test_a_sharded_step_is_the_sum_of_the_stages_per_micro_batch() -> None:
    # Per micro-batch: stage 0 (100) + sync (10) + its copy (50), then stage 1 (300), which sends nothing
    # and so syncs with no one: 460; three micro-batches: 1380.
    sharded = simulate(two_stages(), 3, clock_hz=CLOCK, link_bandwidth=BANDWIDTH, sync_cycles=10, sharded=True)
    assert sharded.step_cycles == 3 * (100 + 10 + 50 + 300) == 1380
    assert sharded.num_cycles == 6 and sharded.execution == "sharded"
    # The same stages pipelined: 4 cycles of max(active) + 10 + 50 (every cycle copies): 160 + 3 x 360 = 1240.
    pipelined = simulate(two_stages(), 3, clock_hz=CLOCK, link_bandwidth=BANDWIDTH, sync_cycles=10)
    assert pipelined.step_cycles == 160 + 3 * 360 == 1240 and pipelined.execution == "pipelined"
    assert sharded.throughput == pytest.approx(3 / (1380 / CLOCK))


def test_sharded_execution_needs_no_micro_batch_per_stage() -> None:
    # A pipeline refuses fewer micro-batches than stages; sharded execution runs one.
    assert simulate(two_stages(), 1, clock_hz=CLOCK, link_bandwidth=BANDWIDTH, sync_cycles=10,
                    sharded=True).step_cycles == 460


def test_an_optimum_inference_config_simulates_sharded(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    result = CliRunner().invoke(cli, [str(TINY_TRAINING), "--solve", "--num-ipus", "2", "--exact-ipus",
                                      "--mem-per-tile", "800", "--mode", "inference", "--head-placement", "last",
                                      "--framework", "optimum", "--config-out", str(config)])
    assert result.exit_code == 0, result.stderr
    doc = yaml.safe_load(config.read_text())
    assert (doc["framework"], doc["execution"]) == ("optimum", "sharded")
    out = CliRunner().invoke(cli, ["simulate", str(config), "--json"])
    assert out.exit_code == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["execution"] == "sharded"
    g, p = doc["gradient_accumulation"], doc["pipeline_stages"]
    assert summary["pipeline_cycles"] == g * p
    text = CliRunner().invoke(cli, ["simulate", str(config)]).stdout
    assert f"Sharded cycles: {g * p} = {p} stages x {g} micro-batches" in text
    # PopTorch run by hand (no optimum) pipelines the same split.
    doc["framework"], doc["execution"] = "poptorch", "pipelined"
    buf = io.StringIO()
    yaml.safe_dump(doc, buf, sort_keys=False)
    (tmp_path / "poptorch.yaml").write_text(buf.getvalue())
    piped = json.loads(CliRunner().invoke(cli, ["simulate", str(tmp_path / "poptorch.yaml"), "--json"]).stdout)
    assert piped["execution"] == "pipelined" and piped["pipeline_cycles"] == g + p - 1
