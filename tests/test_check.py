"""popliner check: recomputed figures, exit codes, overflow details, JUnit; agreement with the simulator."""

from __future__ import annotations

import shutil
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from popliner.analysis import load_analysis
from popliner.check import check_config
from popliner.config.yaml_io import read_config
from popliner.pipeline import extra_stash_entries
from popliner.simulator.engine import simulate
from popliner.simulator.inputs import inputs_from_analysis
from tests.helpers import FIXTURES, boundary_bytes, invoke, stage_stash_entry


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check")
    profile = folder / "bert.json.gz"
    shutil.copy(FIXTURES / "bert-base-training.json.gz", profile)
    config = folder / "pipeline.yaml"
    invoke(profile, "--solve", "--num-ipus", "4", "--config-out", config)
    return profile, config


def test_check_recomputes_each_ipu_from_the_profile(training):
    profile, config = training
    analysis = load_analysis(str(profile))
    cfg = read_config(config)
    result = check_config(analysis, cfg, str(config), budget=analysis.profile.target.bytes_per_tile)
    assert result.fits and len(result.ipus) == 4
    for k, (ipu, stage) in enumerate(zip(result.ipus, cfg.stages)):
        # Independently: the stage's per-tile memory plus its extra stash entries, plus copy
        # buffers: what crosses its two boundaries (activations and gradients, each once), over the tiles.
        mem = analysis.stage_memory(stage.layers, first_stage=k == 0)
        extra = extra_stash_entries(k, 4)
        before = [x for s in cfg.stages[:k] for x in s.layers]
        after = [x for s in cfg.stages[k:] for x in s.layers]
        upto = [x for s in cfg.stages[: k + 1] for x in s.layers]
        rest = [x for s in cfg.stages[k + 1 :] for x in s.layers]
        crossing = (boundary_bytes(analysis, before, after) if before else 0) + (
            boundary_bytes(analysis, upto, rest) if rest else 0)
        buffers = -(-crossing // analysis.profile.tiles)
        assert ipu.copy_buffer == buffers > 0
        total = mem.total_per_tile + extra * stage_stash_entry(analysis, stage.layers, first_stage=k == 0) + buffers
        assert ipu.worst_tile_bytes == int(total.max())
        assert ipu.worst_tile == int(np.argmax(total))
        # The solver predicted the same figures when it wrote the config.
        assert ipu.worst_tile_bytes == stage.worst_tile_bytes


def test_simulated_memory_matches_the_check(training):
    profile, config = training
    analysis = load_analysis(str(profile))
    cfg = read_config(config)
    budget = analysis.profile.target.bytes_per_tile
    checked = check_config(analysis, cfg, str(config), budget=budget)
    t = analysis.profile.target
    inputs = inputs_from_analysis(cfg, analysis, tiles_per_ipu=t.tiles_per_ipu, clock_hz=t.clock_hz)
    sim = simulate(inputs.stages, cfg.gradient_accumulation, clock_hz=t.clock_hz, budget_bytes=budget,
                   tiles_per_ipu=t.tiles_per_ipu)
    for ipu_sim, ipu_check in zip(sim.ipus, checked.ipus):
        # Both count the copy buffers the IPU holds.
        assert ipu_sim.copy_buffer_bytes == ipu_check.copy_buffer
        assert ipu_sim.peak_bytes == ipu_check.worst_tile_bytes
        assert ipu_sim.worst_tile == ipu_check.worst_tile


def test_check_exit_codes_and_junit(training, tmp_path):
    profile, config = training
    assert "yes" in invoke("check", config, "--profile", profile).stdout
    junit = tmp_path / "ci.xml"
    failed = invoke("check", config, "--profile", profile, "--budget", "0.5", "--junit", junit, ok=(1,))
    assert "is over budget by" in failed.stdout
    assert "largest live there" in failed.stdout
    suite = ET.parse(junit).getroot()
    cases = suite.findall("testcase")
    assert suite.get("tests") == "4" and len(cases) == 4
    assert int(suite.get("failures")) == sum(case.find("failure") is not None for case in cases) >= 1


def test_check_bad_inputs_exit_2(training, tmp_path):
    profile, config = training
    edited = tmp_path / "edited.yaml"
    edited.write_text(config.read_text().replace("  - '11'\n", "  - '12'\n", 1))
    result = invoke("check", edited, "--profile", profile, ok=(2,))
    assert result.stderr.strip().splitlines()[-1].startswith("popliner: error:")
    result = invoke("check", tmp_path / "missing.yaml", "--profile", profile, ok=(2,))
    assert "missing.yaml" in result.stderr
    result = invoke("check", config, "--profile", profile, "--budget", "1.5", ok=(2,))
    assert "Invalid value" in result.stderr


def test_check_of_a_hand_moved_layer(training, tmp_path):
    profile, config = training
    cfg = read_config(config)
    first, second = cfg.stages[0].layers, cfg.stages[1].layers
    # Move the second IPU's first layer to the end of the first IPU: still in data-flow order.
    anchor = f"  - '{second[0]}'\n"
    text = config.read_text().replace(anchor, "", 1)
    text = text.replace(f"  - '{first[-1]}'\n", f"  - '{first[-1]}'\n{anchor}", 1)
    moved = tmp_path / "moved.yaml"
    moved.write_text(text)
    analysis = load_analysis(str(profile))
    result = check_config(analysis, read_config(moved), str(moved), budget=10**9)
    assert result.ipus[0].layers == (*first, second[0])
    expected = analysis.stage_memory([*first, second[0]], first_stage=True).total_per_tile
    stash = stage_stash_entry(analysis, [*first, second[0]], first_stage=True) * extra_stash_entries(0, 4)
    out = boundary_bytes(analysis, [*first, second[0]], [x for s in cfg.stages[1:] for x in s.layers if x != second[0]])
    buffers = -(-out // analysis.profile.tiles)
    assert result.ipus[0].worst_tile_bytes == int((expected + stash).max()) + buffers
    assert result.ipus[0].worst_tile_bytes > cfg.stages[0].worst_tile_bytes  # one more layer costs memory
