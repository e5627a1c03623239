"""``--recompute pipeline`` in the range table: the incremental figure against the engine's direct one.

A re-run stage peaks at the larger of its forward window (recomputed
variables cut at their last forward read) and its backward window. The
range table reads both from running liveness (:mod:`popliner.memory.rerun`);
the engine computes them with two sweeps over the stage's variables. Every
check here builds a second engine of the same profile and options, with
its own memo, so that each expected figure is a sweep the table never saw:
on bundled fixtures and on generated profiles named as other frameworks
name them (PopTorch's contexts, GPT-2's ``h.N`` blocks, a tied MLM head),
in random order from a lazy table, over grids of the default blocks and of
tiny ones (windows that start, end and span blocks).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pytest

from popliner.analysis import Analysis, AnalysisOptions, load_analysis
from popliner.memory.facts import MemoryFacts
from popliner.memory.liveness import window_peak
from popliner.memory.ranges import ProfileRanges
from popliner.memory.running import PIECES, Pieces
from popliner.memory.stages import pipeline_rerun_window, range_ops, stage_memory
from popliner.memory.training import TrainingOptions
from popliner.synth import generate_document, preset_spec
from tests.helpers import FIXTURES, analyse_document


@cache
def _generated(name: str) -> dict[str, Any]:
    specs = {
        "gpt2-tiny": preset_spec("gpt2-tiny", "training", layers=3),
        "poptorch-bert-tiny": preset_spec("poptorch-bert-tiny", "training", vocab=4096, tiles=64, batch=2),
        "bert-tiny-mlm-tf": preset_spec("bert-tiny", "training", layers=3, head="mlm", framework="tensorflow"),
    }
    return generate_document(specs[name])


def _engines(source: str, **training: str) -> tuple[Analysis, MemoryFacts]:
    """Two scenarios of one profile and options: one for the table, one whose figures are all direct sweeps."""
    options = AnalysisOptions(training=TrainingOptions(**training))  # type: ignore[arg-type]
    if source.endswith((".json", ".json.gz")):
        made = [load_analysis(str(FIXTURES / source), options, use_cache=False) for _ in range(2)]
    else:
        made = [analyse_document(_generated(source), options) for _ in range(2)]
    assert made[0].mode == "training"
    return made[0], made[1].facts


SOURCES = ["tiny-training.json", "bert-tiny-training.json", "resnet-small-training.json.gz", "gpt2-tiny",
           "poptorch-bert-tiny", "bert-tiny-mlm-tf"]
PLACEMENTS = [{"head_placement": "first"}, {"head_placement": "last", "optimizer_state": "off-chip"},
              {"head_placement": "wrap"}]


#: Grid blocks of 3 segments: windows start, end and span blocks on small profiles.
TINY = Pieces(grid_block=3)


def _wrapped_total(table: ProfileRanges, j: int) -> np.ndarray | None:
    found = table._wrapped_range(j)
    return None if found is None else found[0]


def _cases() -> list[Any]:
    """Every source, placement and grid. The main suite runs both grids on the two small fixtures and the tiny
    grid on the others; their default grid runs in the slow step (suite time)."""
    return [pytest.param(source, placement, pieces, id=f"{source}-{'-'.join(placement.values())}-{name}",
                         marks=[pytest.mark.slow] if name == "default" and source not in SOURCES[:2] else [])
            for source in SOURCES for placement in PLACEMENTS for name, pieces in (("default", PIECES), ("tiny", TINY))]


@pytest.mark.parametrize(("source", "placement", "pieces"), _cases())
def test_pipeline_ranges_equal_the_direct_model(source: str, placement: dict[str, str], pieces: Pieces) -> None:
    tabled, direct = _engines(source, recompute="pipeline", **placement)
    table = tabled.range_table(2**62, pieces=pieces, lazy=True)
    n = table.num_layers
    pairs = [(i, j) for i in range(n) for j in range(i, n)]
    rng = np.random.default_rng(len(source) * 31 + n)
    rerun = 0
    for k in rng.permutation(len(pairs)).tolist():  # a lazy table grows rows from wherever it stopped
        i, j = pairs[k]
        got = table.per_tile(i, j)
        assert got is not None
        ops = range_ops(direct, i, j)
        assert got[0].tolist() == stage_memory(direct, ops).total_per_tile.tolist(), (i, j)
        rerun += pipeline_rerun_window(direct, ops) is not None
        if table.head_wraps and i == 0:
            wrapped = _wrapped_total(table, j)
            assert wrapped is not None
            assert wrapped.tolist() == stage_memory(direct, table.stage_ops(0, j)).total_per_tile.tolist(), j
    # Every range but those holding the last layer is re-run (with a wrapped head the head's stage is that one).
    assert rerun == len(pairs) - (0 if table.head_wraps else n)
    for i, j in pairs[:: max(len(pairs) // 5, 1)]:  # the exact figure of a chosen stage, from a running set
        ops = table.stage_ops(i, j)
        assert table.stage_memory(i, j).per_tile.tolist() == stage_memory(direct, ops).per_tile.tolist(), (i, j)


@pytest.mark.parametrize("source", ["bert-tiny-training.json", "gpt2-tiny", "poptorch-bert-tiny"])
def test_rerun_peak_equals_two_sweeps_on_random_windows(source: str) -> None:
    """The running set's two readings against the sweeps, for every split step ``b0`` of a window, not only PopART's."""
    tabled, direct = _engines(source, recompute="pipeline", head_placement="wrap")
    rng = np.random.default_rng(3)
    for pieces in (PIECES, TINY):
        state_of = tabled.range_memo.state(tabled.facts, pieces)
        n = tabled.facts.num_layers
        for _ in range(12):
            i = int(rng.integers(0, n))
            j = int(rng.integers(i, n))
            state = state_of.running_set()
            kept = bool(rng.integers(0, 2)) and tabled.facts.head_wraps
            if kept:  # IPU 0 with the head: its variables keep their live steps
                state.add(state_of.layer_parts(tabled.facts.head_layer),
                          kept=state_of.private_variables(tabled.facts.head_layer))
            for k in range(i, j + 1):
                if not (kept and k == tabled.facts.head_layer):
                    state.add(state_of.layer_parts(k))
            ops = np.concatenate(state.ops)
            lo, hi = direct.model.window(ops)
            var = direct.model.counted_variables(np.unique(ops))
            cut = direct.forward_cut_profile(kept)
            for b0 in sorted({lo - 1, lo, hi + 1, *rng.integers(lo, hi + 2, 4).tolist()}):
                expect = np.maximum(window_peak(cut, var, lo, b0 - 1), window_peak(direct.profile, var, b0, hi))
                assert state.rerun_variables_peak(b0).tolist() == expect.tolist(), (pieces, i, j, b0)


def test_the_forward_cut_changes_figures() -> None:
    """The check above can fail: the re-run figure differs from the plain model's on some ranges."""
    _, direct = _engines("bert-tiny-training.json", recompute="pipeline")
    differ = 0
    for i in range(direct.num_layers - 1):
        for j in range(i, direct.num_layers - 1):
            ops = range_ops(direct, i, j)
            differ += stage_memory(direct, ops).per_tile[0].tolist() != direct.model.stage(ops).per_tile[0].tolist()
    assert differ > 0


def test_tables_of_rising_limits_under_pipeline() -> None:
    """Rows stopped by a low limit and grown again by a higher one (a best effort): the direct figures still."""
    tabled, direct = _engines("bert-tiny-training.json", recompute="pipeline", head_placement="last")
    n = tabled.facts.num_layers
    totals = {(i, j): int(stage_memory(direct, range_ops(direct, i, j)).total_per_tile.max())
              for i in range(n) for j in range(i, n)}
    ordered = sorted(set(totals.values()))
    for limit in (ordered[0], ordered[len(ordered) // 2], ordered[-1]):
        table = tabled.range_table(limit, pieces=TINY, lazy=True)
        for (i, j), worst in totals.items():
            got = table.memory(i, j, 0)
            assert got == (worst if worst <= limit and all(totals[(i, k)] <= limit for k in range(i, j)) else np.inf)


@pytest.mark.parametrize("source", ["tiny-training.json", "bert-tiny-training.json", "gpt2-tiny"])
def test_first_user_is_the_earliest_user(source: str) -> None:
    """The operation table's first user (shared by every engine of a profile) against a walk over the operations."""
    engine, _ = _engines(source)
    ops = engine.ops
    boundaries = engine.facts.boundaries
    expect = [-1] * engine.profile.variables.count
    ran = [op for op in range(ops.count) if ops.first_step[op] >= 0]
    for op in sorted(ran, key=lambda o: (int(ops.first_step[o]), o)):
        for v in ops.vars_of(op).tolist():
            if expect[v] < 0:
                expect[v] = op
    assert ops.first_user.tolist() == expect
    assert boundaries.first_user is ops.first_user
