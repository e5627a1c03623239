"""Recomputation never makes a stage bigger (docs/solvers.md): checked on every range of the training fixtures."""

from __future__ import annotations

import numpy as np
import pytest

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.memory.stages import range_ops, stage_memory, stash_entry_per_tile
from popliner.memory.training import TrainingOptions
from tests.helpers import FIXTURES


def analysed(name: str, **kwargs):
    return load_analysis(str(FIXTURES / name), AnalysisOptions(training=TrainingOptions(**kwargs)), use_cache=False)


@pytest.mark.parametrize("fixture", ["tiny-training.json", "bert-tiny-training.json"])
@pytest.mark.parametrize("placement", ["first", "last", "wrap"])
def test_recomputation_never_increases_a_stage(fixture, placement):
    none = analysed(fixture, head_placement=placement).facts
    every = analysed(fixture, head_placement=placement, recompute="every-layer").facts
    pipe = analysed(fixture, head_placement=placement, recompute="pipeline").facts
    n = none.num_layers
    # With a wrapped head, IPU 0 holds range 0..j and the head: those unions are stages too.
    head = range_ops(none, n - 1, n - 1) if none.head_wraps else None
    unions = [np.union1d(range_ops(none, 0, j), head) for j in range(n - 1)] if head is not None else []
    for i in range(n):
        for j in range(i, n):
            for ops in [range_ops(none, i, j), *(unions[j:j + 1] if i == 0 else [])]:
                _never_more(none, every, pipe, ops, (i, j))


def _never_more(none, every, pipe, ops, where) -> None:
    base = stage_memory(none, ops).per_tile
    # The in-stage figure only falls: live steps are only taken away.
    assert (stage_memory(every, ops).per_tile <= base).all(), where
    assert (stage_memory(pipe, ops).per_tile <= base).all(), where
    # The stash entry loses recomputed members and gains at most the stage's
    # received inputs, which are exactly pipeline's entry.
    inputs = stash_entry_per_tile(pipe, ops)
    assert (stash_entry_per_tile(every, ops) <= stash_entry_per_tile(none, ops) + inputs).all(), where
    assert np.array_equal(every.cycles.op_cycles, none.cycles.op_cycles)


@pytest.mark.parametrize("fixture", ["tiny-training.json", "bert-tiny-training.json"])
def test_off_chip_and_sharding_never_increase_a_stage(fixture):
    none = analysed(fixture).facts
    off = analysed(fixture, optimizer_state="off-chip").facts
    shard = analysed(fixture, replication_factor=4, sharded_optimizer_state=True).facts
    for i in range(none.num_layers):
        for j in range(i, none.num_layers):
            ops = range_ops(none, i, j)
            base = stage_memory(none, ops).total_per_tile
            assert (stage_memory(off, ops).total_per_tile <= base).all(), (i, j)
            assert (stage_memory(shard, ops).total_per_tile <= base).all(), (i, j)


@pytest.mark.parametrize("fixture", ["bert-tiny-training.json", "bert-base-training.json.gz",
                                     "resnet-small-training.json.gz", "tiny-training.json"])
def test_every_training_fixture_fits_with_the_options_engineers_use(fixture):
    from popliner.analysis import solve_split
    from popliner.solvers.problem import SplitProblem

    analysis = analysed(fixture, recompute="every-layer", optimizer_state="off-chip")
    assert analysis.mode == "training"
    budget = analysis.profile.target.bytes_per_tile
    split = solve_split(analysis, SplitProblem(4, budget, training=True), solver="greedy")
    assert split.fits, [s.worst_tile_bytes for s in split.stages]
