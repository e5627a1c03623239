"""Pipeline simulator: PopART's schedule, the time and memory model, outputs and the CLI.

Expected numbers are worked out by hand in the comments, not copied from output.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import popliner.cli
from popliner.config import PipelineConfig, config_from_split
from popliner.errors import ConfigError, UsageProblem
from popliner.fileio import atomic_write
from popliner.memory.types import ComponentBytes, StageMemory
from popliner.pipeline import StageFigure, copy_buffer_per_tile, stash_depth
from popliner.simulator import (
    Fragment,
    SimStage,
    num_cycles,
    render_ipu_view,
    render_stage_view,
    schedule,
    simulate,
)
from popliner.simulator.inputs import inputs_from_analysis, inputs_from_config
from popliner.solvers.result import SplitResult, StageResult
from popliner.writers.gantt import write_gantt
from popliner.writers.jsondoc import result_document
from popliner.writers.pipeline_yaml import write_config
from popliner.writers.simulation import render_text
from popliner.writers.trace import trace_document
from tests.helpers import FIXTURES, stage_cycles_split

# ------------------------------------------------------------------ schedule

# The reference pipeline: 3 IPUs in training = 5 pipeline stages (PS2 holds the
# loss and streams to the host), 5 micro-batches, 9 pipeline cycles. Transcribed
# from the diagram in the PopART pipelining notes: PS0 reads the host (D) in
# cycles 0-4, PS2 writes to it (H) in cycles 2-6, and every stage copies (C)
# in every cycle.
REFERENCE_STAGE_VIEW = """\
cycle  0        1        2        3        4        5        6        7      8
phase  fill     fill     fill     fill     main     flush    flush    flush  flush
PS0    D0.M0.C  D1.M1.C  D2.M2.C  D3.M3.C  D4.M4.C  C        C        C      C
PS1    C        M0.C     M1.C     M2.C     M3.C     M4.C     C        C      C
PS2    C        C        M0.H0.C  M1.H1.C  M2.H2.C  M3.H3.C  M4.H4.C  C      C
PS3    C        C        C        M0.C     M1.C     M2.C     M3.C     M4.C   C
PS4    C        C        C        C        M0.C     M1.C     M2.C     M3.C   M4.C
"""

REFERENCE_STAGE_VIEW_NO_COPIES = """\
cycle  0      1      2      3      4      5      6      7      8
phase  fill   fill   fill   fill   main   flush  flush  flush  flush
PS0    D0.M0  D1.M1  D2.M2  D3.M3  D4.M4
PS1           M0     M1     M2     M3     M4
PS2                  M0.H0  M1.H1  M2.H2  M3.H3  M4.H4
PS3                         M0     M1     M2     M3     M4
PS4                                M0     M1     M2     M3     M4
"""

# IPU i runs forward stage i and backward stage 4-i; the reference IPU diagram.
REFERENCE_IPU_VIEW = """\
cycle  0       1       2       3              4              5              6       7       8
phase  fill    fill    fill    fill           main           flush          flush   flush   flush
IPU0   PS0(0)  PS0(1)  PS0(2)  PS0(3)         PS0(4).PS4(0)  PS4(1)         PS4(2)  PS4(3)  PS4(4)
IPU1           PS1(0)  PS1(1)  PS1(2).PS3(0)  PS1(3).PS3(1)  PS1(4).PS3(2)  PS3(3)  PS3(4)
IPU2                   PS2(0)  PS2(1)         PS2(2)         PS2(3)         PS2(4)
"""
REFERENCE_IPUS = (0, 1, 2, 1, 0)


def test_reference_schedule_stage_view() -> None:
    cycles = schedule(5, 5, to_host_stage=2)  # the loss's stage: K-1 of 2K-1 (K = 3)
    assert len(cycles) == 9
    assert render_stage_view(cycles, 5) == REFERENCE_STAGE_VIEW
    assert render_stage_view(cycles, 5, copies=False) == REFERENCE_STAGE_VIEW_NO_COPIES


def test_reference_schedule_ipu_view() -> None:
    cycles = schedule(5, 5, to_host_stage=2)
    assert render_ipu_view(cycles, REFERENCE_IPUS) == REFERENCE_IPU_VIEW


def test_reference_program_order() -> None:
    # Reading the diagram down the columns: ps0[D], ps0[M], C; ps0[D], ps0[M], ps1[M], C; ...
    cycles = schedule(5, 5, to_host_stage=2)
    no_copy = [Fragment(s, "C", None) for s in range(5)]
    assert cycles[0] == (Fragment(0, "D", 0), Fragment(0, "M", 0), Fragment(0, "C", 0), *no_copy[1:])
    assert cycles[1][:3] == (Fragment(0, "D", 1), Fragment(0, "M", 1), Fragment(1, "M", 0))
    assert cycles[2][:5] == (Fragment(0, "D", 2), Fragment(0, "M", 2), Fragment(1, "M", 1), Fragment(2, "M", 0),
                             Fragment(2, "H", 0))
    assert cycles[8] == (Fragment(4, "M", 4), *no_copy[:4], Fragment(4, "C", 4))


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 12), extra=st.integers(0, 40))
def test_cycle_count_and_participation(p: int, extra: int) -> None:
    g = p + extra
    cycles = schedule(p, g)
    assert len(cycles) == 2 * (p - 1) + (g - (p - 1)) == num_cycles(p, g)
    seen = {(f.stage, f.microbatch): c for c, frags in enumerate(cycles) for f in frags if f.kind == "M"}
    assert seen == {(s, m): s + m for s in range(p) for m in range(g)}  # stage s runs micro-batch c-s
    for frags in cycles:
        kinds = [f.kind for f in frags]
        assert kinds == sorted(kinds, key="DMHC".index)  # D, then M, then H, then all copies
        assert [f.stage for f in frags if f.kind == "C"] == list(range(p))
        assert {f.stage for f in frags if f.kind == "D"} <= {0}
        assert {f.stage for f in frags if f.kind == "H"} <= {p - 1}


@pytest.mark.parametrize(("p", "g"), [(5, 4), (2, 1), (8, 7)])
def test_fewer_micro_batches_than_stages_is_rejected(p: int, g: int) -> None:
    with pytest.raises(UsageProblem, match=f"use --gradient-accumulation {p} or more"):
        schedule(p, g)
    stages = [SimStage(i, i, "forward", 10, 0) for i in range(p)]
    with pytest.raises(UsageProblem):
        simulate(stages, g, clock_hz=1e9)


def test_long_runs_elide_the_main_phase() -> None:
    text = render_stage_view(schedule(3, 40), 3, max_columns=12)
    header = text.splitlines()[0].split()
    assert header[:6] == ["cycle", "0", "1", "2", "3", "4"] and "..." in header and header[-1] == "41"


# ---------------------------------------------------------------- time model


def test_balanced_inference_bubble() -> None:
    # 4 equal stages of w cycles, no copies, no sync, G = 8: N = 8 + 3 = 11 cycles
    # of w each; each IPU computes 8w of 11w, so the bubble is (P-1)/(G+P-1) = 3/11.
    w, g = 1000, 8
    stages = [SimStage(i, i, "forward", w, 0) for i in range(4)]
    r = simulate(stages, g, clock_hz=1e9, sync_cycles=0, micro_batch_size=2)
    assert r.step_cycles == 11 * w
    assert r.bubble_share == pytest.approx(3 / 11)
    assert r.fill_flush_share == pytest.approx(3 / 11)
    assert r.imbalance_share == 0
    assert r.compute_share == pytest.approx(8 / 11)
    assert r.step_seconds == pytest.approx(11e-6)
    assert r.throughput == pytest.approx(8 * 2 / 11e-6)
    assert all(u.utilisation == pytest.approx(8 / 11) for u in r.ipus)


def test_imbalance_is_split_from_fill_and_flush() -> None:
    # PS0 100 cycles, PS1 300, G = 4, N = 5 cycles; compute phases:
    # cycle 0: PS0 only -> 100; cycles 1-3: both -> 300; cycle 4: PS1 only -> 300. Step 1300.
    # IPU0: busy 4*100; waits for PS1 in cycles 1-4: imbalance 4*200; no work in cycle 4
    #       (it would do 100 in a full cycle): fill/flush 100. 400+800+100 = 1300.
    # IPU1: busy 4*300; idle in cycle 0 (100, the slowest IPU then): fill/flush 100.
    stages = [SimStage(0, 0, "forward", 100, 0), SimStage(1, 1, "forward", 300, 0)]
    r = simulate(stages, 4, clock_hz=1e9, sync_cycles=0)
    assert r.step_cycles == 1300
    u0, u1 = r.ipus
    assert (u0.busy_cycles, u0.imbalance_cycles, u0.fill_flush_cycles) == (400, 800, 100)
    assert (u1.busy_cycles, u1.imbalance_cycles, u1.fill_flush_cycles) == (1200, 0, 100)
    assert r.imbalance_share == pytest.approx(800 / 2600)
    assert r.fill_flush_share == pytest.approx(200 / 2600)


def test_copies_and_sync() -> None:
    # 64 kB per micro-batch over 64 GB/s is 1 us = 1000 cycles at 1 GHz; sync 500.
    # G = 2, N = 3 cycles of 1000 compute + 500 sync + 1000 copy = 2500 each.
    stages = [SimStage(0, 0, "forward", 1000, 64_000), SimStage(1, 1, "forward", 1000, 0)]
    r = simulate(stages, 2, clock_hz=1e9, link_bandwidth=64e9, sync_cycles=500)
    assert [c.duration for c in r.cycles] == [2500, 2500, 2500]
    assert r.step_seconds == pytest.approx(7.5e-6)
    assert r.communication_share == pytest.approx(1500 / 2500)
    copies = [f for f in r.fragments if f.kind == "C"]
    assert [(f.cycle, f.start, f.duration) for f in copies] == [(0, 1500, 1000), (1, 4000, 1000), (2, 6500, 1000)]


def test_stages_on_one_ipu_run_one_after_the_other() -> None:
    # Training, 2 IPUs: PS0 fwd IPU0 (10), PS1 fwd+bwd IPU1 (30), PS2 bwd IPU0 (20). G = 3, N = 5.
    # IPU0 runs PS0 then PS2 in cycle 2: 10 + 20 = 30 = PS1's 30 -> no imbalance there.
    stages = [SimStage(0, 0, "forward", 10, 0), SimStage(1, 1, "forward+backward", 30, 0),
              SimStage(2, 0, "backward", 20, 0)]
    r = simulate(stages, 3, clock_hz=1e9, sync_cycles=0)
    assert [c.compute for c in r.cycles] == [10, 30, 30, 30, 20]
    ps2 = [f for f in r.fragments if f.kind == "M" and f.stage == 2]
    # cycles start at 0, 10, 40, 70, 100; PS2 follows PS0 only in cycle 2 (PS0 is done after mb 2).
    assert [(f.cycle, f.start) for f in ps2] == [(2, 40 + 10), (3, 70), (4, 100)]
    assert [f.stage for f in r.fragments if f.kind == "H"] == [1, 1, 1]  # the loss stage


# -------------------------------------------------------------- memory model


def training_stages(k: int, memory: list[np.ndarray] | None = None,
                    stash: list[np.ndarray] | None = None) -> list[SimStage]:
    """2K-1 stages: forward i on IPU i, the last IPU fwd+bwd, backward 2K-2-i on IPU i."""
    out = [SimStage(i, i, "forward", 10, 0, memory[i] if memory else None, stash[i] if stash else None)
           for i in range(k - 1)]
    out.append(SimStage(k - 1, k - 1, "forward+backward", 30, 0, memory[k - 1] if memory else None))
    out += [SimStage(2 * k - 2 - i, i, "backward", 20, 0) for i in range(k - 2, -1, -1)]
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_stash_entries_in_flight_match_popart(k: int) -> None:
    p = 2 * k - 1
    r = simulate(training_stages(k), p + 3, clock_hz=1e9)
    # PopART's stash depth: 2(K-1-i)+1 on IPU i < K-1 (forward pushes before its
    # backward pops within the cycle), none on the last IPU (one stage does both).
    assert [u.max_stash_entries for u in r.ipus] == [2 * (k - 1 - i) + 1 for i in range(k - 1)] + [0]


def test_memory_peak_on_the_worst_tile() -> None:
    # K = 3, two tiles per IPU, no copies. IPU0: resident [100, 50], entry [10, 30], 5 entries
    # -> [150, 200]: tile 1, 200. IPU1: [80, 0] + 3 * [5, 0] = 95 on tile 0. IPU2: 70, no stash.
    memory = [np.array([100, 50]), np.array([80, 0]), np.array([70, 70])]
    stash = [np.array([10, 30]), np.array([5, 0])]
    r = simulate(training_stages(3, memory, stash), 5, clock_hz=1e9, budget_bytes=150)
    got = [(u.worst_tile, u.base_bytes, u.stash_bytes, u.peak_bytes, u.fits) for u in r.ipus]
    assert got == [(1, 50, 150, 200, False), (0, 80, 15, 95, True), (0, 70, 0, 70, True)]
    assert r.fits is False


def test_copy_buffers_are_spread_over_the_tiles() -> None:
    # PS0 sends 1000 B per micro-batch to PS1; 4 tiles each: ceil(1000 / 4) = 250 on both IPUs.
    stages = [SimStage(0, 0, "forward", 10, 1000, np.array([0, 0, 7, 0])),
              SimStage(1, 1, "forward", 10, 0, np.zeros(4, dtype=np.int64))]
    r = simulate(stages, 2, clock_hz=1e9, budget_bytes=257)
    assert [(u.worst_tile, u.copy_buffer_bytes, u.peak_bytes) for u in r.ipus] == [(2, 250, 257), (0, 250, 250)]
    assert r.fits is True


def test_memory_unknown_without_arrays() -> None:
    r = simulate([SimStage(0, 0, "forward", 10, 0)], 1, clock_hz=1e9, budget_bytes=100)
    assert r.ipus[0].peak_bytes is None and r.fits is None


# ------------------------------------------------------------------- inputs


def make_config(mode: str = "training", g: int = 16) -> PipelineConfig:
    groups = (("a", "b"), ("c",), ("d", "e"))
    stages = []
    for i, layers in enumerate(groups):
        depth = 2 * (2 - i) + 1 if mode == "training" and i < 2 else 0
        stages.append(StageResult(
            index=i, ipu=i, layers=layers, memory=ComponentBytes(1, 1, 1, 1, 1), worst_tile=i,
            worst_tile_bytes=10_000, stash_bytes=800 * max(depth - 1, 0), stash_entries=depth,
            cycles=3000 * (i + 1), bytes_in=0 if i == 0 else 1000 * i, budget=20_000))
    split = SplitResult("greedy", "GREEDY", mode, 3, 20_000, tuple(stages))
    return config_from_split(split, profile_path="m.json", profile_sha256="ab" * 32, tiles=8,
                             bytes_per_tile=30_000, clock_hz=1e9, gradient_accumulation=g)


def test_inputs_from_config_training() -> None:
    inputs = inputs_from_config(make_config("training"))
    got = [(s.index, s.ipu, s.kind, s.cycles, s.send_bytes) for s in inputs.stages]
    # cycles 3000/6000/9000 split 1/3 forward, 2/3 backward; activations forward,
    # gradients (same size as the boundary) backward; IPU0's backward sends nothing.
    assert got == [(0, 0, "forward", 1000, 1000), (1, 1, "forward", 2000, 2000),
                   (2, 2, "forward+backward", 9000, 2000), (3, 1, "backward", 4000, 1000),
                   (4, 0, "backward", 2000, 0)]
    # IPU0: 4 extra entries hold 3200 B -> one entry 800 B = 100 B on each of 8 tiles;
    # its copy buffers: 1000 B out, twice in training, over 8 tiles = 250 B per tile (the
    # prediction includes them; the simulator adds its own). Resident on the worst tile:
    # 10000 - 5 * 100 - 250 = 9250.
    entry, resident = inputs.stages[0].stash_entry_per_tile, inputs.stages[0].memory_per_tile
    assert entry is not None and resident is not None
    assert int(entry[0]) == 100
    assert int(resident.max()) == 9250


def test_config_prediction_reproduced_when_entries_agree() -> None:
    cfg = make_config("training")
    inputs = inputs_from_config(cfg)
    r = simulate(inputs.stages, 16, clock_hz=1e9, budget_bytes=cfg.effective_budget, tiles_per_ipu=8)
    # Peak = the predicted 10000, which holds the copy buffers. The simulator's own buffers over
    # 8 tiles: IPU0 sends 1000 (PS0) and receives 1000 (PS3's gradients) -> 250; IPU1 sends
    # 2000 (PS1) + 1000 (PS3), receives 1000 (PS0) + 2000 (PS2) -> 750; IPU2 receives 2000 and
    # sends 2000 back -> 500: the same as popliner.pipeline's rule.
    assert [u.copy_buffer_bytes for u in r.ipus] == [250, 750, 500]
    assert [u.peak_bytes for u in r.ipus] == [10_000, 10_000, 10_000]
    assert [u.worst_tile for u in r.ipus] == [0, 1, 2]


class FakeAnalysis:
    """The analysis contract with simple hand-made figures (2 tiles)."""

    layer_names: tuple[str, ...] = ("a", "b", "c", "d", "e")
    mode = "training"
    profile = SimpleNamespace(sha256="cd" * 32, target=SimpleNamespace(tiles_per_ipu=2, clock_hz=2e9,
                                                                       bytes_per_tile=1000))

    def stage_memory(self, layers: Any, first_stage: bool) -> StageMemory:
        per_tile = np.zeros((5, 2), dtype=np.int64)
        per_tile[0] = [100 * len(layers) + (50 if first_stage else 0), 10]
        return StageMemory(per_tile)

    def stage_cycles_split(self, layers: Any, first_stage: bool) -> tuple[int, int]:
        return 100 * len(layers), 200 * len(layers)

    def stash_entry_per_tile(self, layers: Any, first_stage: bool = False) -> np.ndarray:
        return np.array([20, 0], dtype=np.int64)

    def boundary_bytes(self, before: Any, after: Any) -> int:
        return 10 * len(before) + len(after)

    def pipeline_figures(self, stages: Any) -> tuple[StageFigure, ...]:
        count = len(stages)
        out = []
        crossing = [0] * (count + 1)  # into IPU k, both ways: the activations and their gradients, of one size
        for k in range(1, count):
            crossing[k] = self.boundary_bytes([x for g in stages[:k] for x in g], [x for g in stages[k:] for x in g])
        for k, layers in enumerate(stages):
            forward, backward = self.stage_cycles_split(layers, k == 0)
            bytes_in, bytes_out = 2 * crossing[k], 2 * crossing[k + 1]
            out.append(StageFigure(
                position=k, num_ipus=count, layers=tuple(self.layer_names.index(x) for x in layers),
                memory=self.stage_memory(layers, k == 0),
                stash_entry_per_tile=self.stash_entry_per_tile(layers), stash_entries=stash_depth(k, count),
                copy_buffer=copy_buffer_per_tile(bytes_in, bytes_out, 2), bytes_in=bytes_in,
                bytes_out=bytes_out, forward_cycles=forward, backward_cycles=backward, gradient_bytes_in=crossing[k]))
        return tuple(out)


def test_inputs_from_analysis() -> None:
    inputs = inputs_from_analysis(make_config("training"), FakeAnalysis(), tiles_per_ipu=2, clock_hz=2e9)
    got = [(s.kind, s.cycles, s.send_bytes) for s in inputs.stages]
    # boundaries: after a,b: 10*2 + 3 = 23; after c: 10*3 + 2 = 32.
    assert got == [("forward", 200, 23), ("forward", 100, 32), ("forward+backward", 600, 32),
                   ("backward", 200, 23), ("backward", 400, 0)]
    # the profile already holds one stash entry: resident = total - one entry, on the worst tile (tile 0), the
    # one tile the simulator reads (the figure goes through the config's record, as a saved config does)
    resident = inputs.stages[0].memory_per_tile
    assert resident is not None and resident.tolist() == [250 - 20, 0]
    entry = inputs.stages[0].stash_entry_per_tile
    assert entry is not None and entry.tolist() == [20, 20]
    assert inputs.source == "profile"


def test_analysis_must_know_the_layers() -> None:
    fake = FakeAnalysis()
    fake.layer_names = ("a", "b", "c", "d")
    with pytest.raises(ConfigError, match=r"stages\[2\].layers\[1\]: layer 'e' is not in the profile"):
        inputs_from_analysis(make_config(), fake, tiles_per_ipu=2, clock_hz=1e9)


# ------------------------------------------------------------------ outputs


def small_result() -> Any:
    stages = [SimStage(0, 0, "forward", 1000, 0, np.array([5, 6])), SimStage(1, 1, "forward", 1000, 0)]
    return simulate(stages, 3, clock_hz=1e9, sync_cycles=0, budget_bytes=100)


def test_trace_structure() -> None:
    doc = json.loads(json.dumps(trace_document(small_result())))
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ns"
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"IPU0", "IPU1"}
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= e.keys()
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0
            assert re.fullmatch(r"PS\d+ [MC](\(\d+\))?|sync", e["name"])
    compute = [e for e in events if e.get("cat") == "compute"]
    assert len(compute) == 2 * 3
    # PS1 (IPU 1) runs micro-batch 0 in cycle 1, which starts after cycle 0's 1000 cycles = 1 us.
    first = next(e for e in compute if e["name"] == "PS1 M(0)")
    assert (first["pid"], first["tid"], first["ts"], first["dur"]) == (1, 1, 1.0, 1.0)


def test_text_and_json_reports() -> None:
    r = small_result()
    text = render_text(r)
    assert "Stage view" in text and "IPU view" in text and "Per IPU" in text
    assert "throughput: 750,000.0 samples/s" in text  # 3 samples in 4 cycles of 1 us
    doc = result_document(r)
    assert doc["pipeline_cycles"] == 4 and doc["throughput_samples_per_s"] == pytest.approx(750_000)


def test_gantt_png() -> None:
    buf = io.BytesIO()
    write_gantt(small_result(), buf)
    assert buf.getvalue().startswith(b"\x89PNG\r\n\x1a\n")


def test_no_matplotlib_at_import() -> None:
    code = ("import sys, popliner.simulator, popliner.writers.gantt, popliner.writers.trace, popliner.cli.simulate; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------- CLI


@pytest.fixture()
def config_file(tmp_path: Any) -> Any:
    path = tmp_path / "pipeline.yaml"
    with atomic_write(path, force=False) as f:
        write_config(make_config("training", g=16), f)
    return path


def run(*args: Any) -> Any:
    return CliRunner().invoke(popliner.cli.cli, ["simulate", *map(str, args)])


def test_cli_text(config_file: Any) -> None:
    result = run(config_file)
    assert result.exit_code == 0, result.output
    assert "Pipeline: 3 IPUs, training, 5 pipeline stages, 16 micro-batches" in result.stdout
    assert "Pipeline cycles: 20 = fill 4 + main 12 + flush 4" in result.stdout
    assert "predicted" in result.stderr


def test_cli_json(config_file: Any) -> None:
    result = run(config_file, "--json", "-G", "10", "--micro-batch-size", "4")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["pipeline_cycles"] == 2 * 4 + (10 - 4)
    assert doc["figures_from"] == "config" and doc["micro_batch_size"] == 4
    assert [u["max_stash_entries"] for u in doc["ipus"]] == [5, 3, 0]


def test_cli_bad_input_exits_2(config_file: Any, tmp_path: Any) -> None:
    result = run(config_file, "-G", "4")
    assert result.exit_code == 2 and "fewer than the 5 pipeline stages" in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: [1\n", encoding="utf-8")
    result = run(broken)
    assert result.exit_code == 2 and "YAML syntax error" in result.stderr
    assert run(tmp_path / "missing.yaml").exit_code == 2
    assert run(config_file, "--link-bandwidth", "0").exit_code == 2


def test_cli_edited_config_rejected(config_file: Any) -> None:
    doc = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    doc["stages"][1]["layers"].append("zz")
    config_file.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = run(config_file)
    assert result.exit_code == 2
    assert f"{config_file}: stages[1].layers[1]: unknown layer 'zz'" in result.stderr


def test_cli_trace_and_plot_refuse_to_overwrite(config_file: Any, tmp_path: Any) -> None:
    trace, plot = tmp_path / "t.json", tmp_path / "g.png"
    assert run(config_file, "--trace", trace, "--plot", plot).exit_code == 0
    assert json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    assert plot.read_bytes().startswith(b"\x89PNG")
    trace.write_text("keep", encoding="utf-8")
    result = run(config_file, "--trace", trace)
    assert result.exit_code == 2 and "pass --force" in result.stderr
    assert trace.read_text(encoding="utf-8") == "keep"
    assert run(config_file, "--trace", trace, "--force").exit_code == 0
    assert trace.read_text(encoding="utf-8") != "keep"


def test_cli_profile_uses_the_analysis(config_file: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import popliner.analysis
    import popliner.config.options
    import popliner.scenario

    # The profile is read through cli/configured.py's analysis_for_config, as check and report read it.
    monkeypatch.setattr(popliner.analysis, "load_analysis", lambda path, options, **kw: FakeAnalysis())
    monkeypatch.setattr(popliner.config.options, "check_applied", lambda t, analysis, source: None)
    monkeypatch.setattr(popliner.scenario, "resolve_recorded", lambda analysis, source, num_ipus=1: None)
    result = run(config_file, "--profile", "other.json", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["figures_from"] == "profile" and doc["clock_hz"] == 2e9
    assert [s["cycles"] for s in doc["stages"]] == [200, 100, 600, 200, 400]
    assert "differs from the profile the config was written for" in result.stderr  # sha256 differs


def test_single_ipu_has_no_sync() -> None:
    # One IPU, G = 2: two cycles of 10 compute cycles; nothing to sync with or copy to.
    r = simulate([SimStage(0, 0, "forward", 10, 0)], 2, clock_hz=1e9, sync_cycles=1000)
    assert r.step_cycles == 20


TINY = FIXTURES / "tiny.json"


@pytest.mark.skipif(not TINY.exists(), reason="fixture profile not present")
def test_cli_with_a_real_profile(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from popliner.analysis import AnalysisOptions, load_analysis

    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    analysis = load_analysis(str(TINY), AnalysisOptions(), use_cache=False)
    names = analysis.layer_names
    groups = tuple((name,) for name in names)
    target = analysis.profile.target
    stages = tuple(StageResult(index=i, ipu=i, layers=g, memory=ComponentBytes(), worst_tile=0,
                               worst_tile_bytes=0, stash_bytes=0, stash_entries=0, cycles=0, bytes_in=0,
                               budget=target.bytes_per_tile) for i, g in enumerate(groups))
    cfg = config_from_split(SplitResult("greedy", "GREEDY", analysis.mode, len(stages), target.bytes_per_tile,
                                        stages),
                            profile_path=str(TINY), profile_sha256=analysis.profile.sha256,
                            tiles=target.tiles_per_ipu, bytes_per_tile=target.bytes_per_tile,
                            clock_hz=target.clock_hz, gradient_accumulation=None)
    path = tmp_path / "tiny.yaml"
    with atomic_write(path, force=False) as f:
        write_config(cfg, f)
    result = run(path, "--profile", TINY, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["figures_from"] == "profile" and "differs" not in result.stderr
    first = stage_cycles_split(analysis, groups[0], True)
    # stage 0 is the forward pass in training, the whole stage in inference
    assert doc["stages"][0]["cycles"] == (first[0] if analysis.mode == "training" else sum(first))
    assert doc["ipus"][0]["peak_bytes"] >= int(analysis.stage_memory(groups[0], True).worst_bytes)
