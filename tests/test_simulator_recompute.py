"""Recompute fragments in the simulator, by hand on fixtures/profiles/tiny-training.json (tiny-training.md).

Head placement ``last``, 2 IPUs ``embedding 0 | 1 head``. IPU 0 runs its
forward (steps 0-2) in 130 cycles and its backward in 310; IPU 1 its forward
(steps 3-6) in 175 and its backward in 390. ``every-layer`` re-runs layer 0's
forward (120 cycles) before IPU 0's backward and layer 1's (120) inside IPU
1's loss stage, after its forward; ``pipeline`` re-runs all of IPU 0's
forward (130) and leaves the last IPU as it is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from popliner.analysis import AnalysisOptions, analyse_profile
from popliner.config import config_from_split
from popliner.errors import UsageProblem
from popliner.memory.training import TrainingOptions
from popliner.profile import load_profile
from popliner.simulator import SimStage, simulate
from popliner.simulator.inputs import inputs_from_analysis, inputs_from_config
from popliner.solvers.result import SplitResult, stage_result
from popliner.training_record import training_of
from popliner.writers.gantt import legend_entries, schedule_bars
from tests.helpers import FIXTURES

TINY = FIXTURES / "tiny-training.json"
STAGES = [["embedding", "0"], ["1", "head"]]


def config_and_analysis(recompute: str):
    training = TrainingOptions(recompute=recompute, optimizer_state="off-chip", head_placement="last")  # type: ignore[arg-type]
    analysis = analyse_profile(load_profile(TINY), AnalysisOptions(training=training))
    figures = analysis.pipeline_figures(STAGES)
    stages = tuple(stage_result(f, analysis.layer_names, 1000) for f in figures)
    split = SplitResult("test", "TEST", "training", 2, 1000, stages)
    cfg = config_from_split(split, profile_path=str(TINY), profile_sha256=analysis.profile.sha256, tiles=2,
                            bytes_per_tile=1000, clock_hz=1e9, gradient_accumulation=3,
                            training=training_of(analysis))
    return cfg, analysis


# (kind, cycles, recompute cycles, recompute after) per pipeline stage.
EXPECTED = {
    "every-layer": [("forward", 130, 0, 0), ("forward+backward", 175 + 510, 120, 175), ("backward", 430, 120, 0)],
    "pipeline": [("forward", 130, 0, 0), ("forward+backward", 175 + 390, 0, 175), ("backward", 440, 130, 0)],
    "none": [("forward", 130, 0, 0), ("forward+backward", 175 + 390, 0, 175), ("backward", 310, 0, 0)],
}


@pytest.mark.parametrize("recompute", list(EXPECTED))
def test_stages_carry_the_rerun_cycles_by_hand(recompute: str) -> None:
    cfg, analysis = config_and_analysis(recompute)
    from_profile = inputs_from_analysis(cfg, analysis, tiles_per_ipu=2, clock_hz=1e9).stages
    from_config = inputs_from_config(cfg).stages  # the config records forward and recompute cycles
    for stages in (from_profile, from_config):
        got = [(s.kind, s.cycles, s.recompute_cycles, s.recompute_after if s.recompute_cycles else
                (175 if s.kind == "forward+backward" else 0)) for s in stages]
        assert got == EXPECTED[recompute]


def fragments(recompute: str):
    cfg, analysis = config_and_analysis(recompute)
    stages = inputs_from_analysis(cfg, analysis, tiles_per_ipu=2, clock_hz=1e9).stages
    return simulate(stages, 3, clock_hz=1e9, sync_cycles=0, budget_bytes=1000, tiles_per_ipu=2)


def test_every_layer_draws_a_recompute_fragment_before_each_backward() -> None:
    result = fragments("every-layer")
    for stage, mb in ((2, 0), (1, 1)):
        mine = [(f.kind, f.duration) for f in result.fragments if f.stage == stage and f.microbatch == mb
                and f.kind in ("M", "R")]
        # The backward stage opens with the re-run; the loss stage re-runs after its forward.
        assert mine == ([("R", 120.0), ("M", 310.0)] if stage == 2 else [("M", 175.0), ("R", 120.0), ("M", 390.0)])
    # Back to back: each part starts where the one before ends.
    backward = [f for f in result.fragments if f.stage == 2 and f.microbatch == 0 and f.kind in ("M", "R")]
    assert backward[0].start + backward[0].duration == backward[1].start
    # The step time is that of the same stages drawn without the split.
    plain = simulate([SimStage(s.index, s.ipu, s.kind, s.cycles, s.send_bytes, s.memory_per_tile,
                               s.stash_entry_per_tile, s.label) for s in result.stages],
                     3, clock_hz=1e9, sync_cycles=0, budget_bytes=1000, tiles_per_ipu=2)
    assert plain.step_cycles == result.step_cycles


def test_recompute_bars_and_legend() -> None:
    result = fragments("pipeline")
    bars = [b for b in schedule_bars(result) if b.kind == "recompute"]
    # 3 micro-batches through IPU 0's backward, 130 cycles (0.13 us at 1 GHz) each; none on the loss stage.
    assert [(b.ipu, b.stage, round(b.duration_us, 6)) for b in bars] == [(0, 2, 0.13)] * 3
    assert dict(legend_entries(result, schedule_bars(result)))["recompute"] == "recompute"
    none = fragments("none")
    assert dict(legend_entries(none, schedule_bars(none)))["recompute"] == "recompute (none)"


def test_peak_memory_is_checks_with_the_options() -> None:
    # Model and stash by hand (tiny-training.md), plus 50 bytes of copy buffers per tile.
    result = fragments("every-layer")
    assert [(u.worst_tile, u.peak_bytes) for u in result.ipus] == [(0, 340 + 25), (1, 325 + 25)]
    # Stash entries hold the checkpoints only: x0 (20 bytes on tile 0), 3 in flight on IPU 0.
    assert result.ipus[0].stash_bytes == 3 * 20
    cfg, analysis = config_and_analysis("every-layer")
    assert [f.worst_bytes for f in analysis.pipeline_figures(STAGES)] == [365, 350]


def test_recompute_outside_the_stage_is_refused() -> None:
    stage = SimStage(0, 0, "forward+backward", 100, 0, np.zeros(2, np.int64), None, "x", 80, 30)
    with pytest.raises(UsageProblem, match="recompute cycles must lie within"):
        simulate([stage], 1, clock_hz=1e9)


def test_memory_over_time_holds_the_checkpoints_by_hand() -> None:
    from popliner.simulator.engine import memory_over_time
    from popliner.writers.trace import trace_document

    cfg, analysis = config_and_analysis("every-layer")
    stages = inputs_from_analysis(cfg, analysis, tiles_per_ipu=2, clock_hz=1e9).stages
    result = simulate(stages, 4, clock_hz=1e9, sync_cycles=0, budget_bytes=1000, tiles_per_ipu=2)
    points = memory_over_time(result)
    # IPU 0, tile 0: resident 300 - one entry of 20 = 280, plus 25 of copy buffers (50 B once over 2 tiles),
    # plus 20 per entry in flight. Forward pushes on cycles 0-3, backward pops on cycles 2-5:
    # 0 1 2 3 | 2 3 | 2 1 0 entries.
    assert [p.entries for p in points[0]] == [0, 1, 2, 3, 2, 3, 2, 1, 0]
    assert [p.bytes for p in points[0]] == [305 + 20 * p.entries for p in points[0]]
    assert max(p.bytes for p in points[0]) == result.ipus[0].peak_bytes == 365
    # The last IPU stashes nothing: one point, its peak.
    assert [(p.entries, p.bytes) for p in points[1]] == [(0, 350)]
    times = [p.time for p in points[0]]
    assert times == sorted(times)
    counters = [e for e in trace_document(result)["traceEvents"] if e.get("ph") == "C"]
    assert [e["args"]["bytes"] for e in counters if e["pid"] == 0] == [p.bytes for p in points[0]]


def test_simulate_says_which_options_its_figures_assume(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from popliner.cli import cli
    from popliner.fileio import atomic_write
    from popliner.writers.pipeline_yaml import write_config

    cfg, _ = config_and_analysis("every-layer")
    path = tmp_path / "p.yaml"
    with atomic_write(path, force=False) as f:
        write_config(cfg, f)
    text = CliRunner().invoke(cli, ["simulate", str(path)])
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith(
        "Training options (from the config): recompute every-layer, optimizer state off-chip, head placement last\n")
    doc = json.loads(CliRunner().invoke(cli, ["simulate", str(path), "--json"]).stdout)
    assert doc["training"]["recompute"] == "every-layer"
    # Without --profile the recorded forward and recompute cycles split each stage.
    assert [(s["cycles"], s["recompute_cycles"]) for s in doc["stages"]] == [(130, 0), (685, 120), (430, 120)]
