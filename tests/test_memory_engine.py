"""The incremental range engine against the direct model, and the pipeline rules.

For every fixture profile and every contiguous layer range, the range table
(:class:`popliner.memory.ranges.ProfileRanges`) must give the same per-tile
total and stash entry as the memory engine applied to the range's
operations, in pieces of any size (grid blocks, stash horizons), in training and in inference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from popliner.analysis import Analysis, AnalysisOptions, load_analysis
from popliner.memory.running import PIECES, Pieces
from popliner.pipeline import (
    backward_stage,
    copy_buffer_per_tile,
    extra_stash_entries,
    num_pipeline_stages,
    range_figure,
    stage_figures,
    stash_depth,
)
from tests.helpers import FIXTURES, range_table_equals_engine

PROFILES = sorted(FIXTURES.glob("*.json*"))


def _analysis(path: Path, mode: str) -> Analysis:
    return load_analysis(str(path), AnalysisOptions(mode=mode), use_cache=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("pieces", [PIECES, Pieces(grid_block=3)], ids=["default", "small"])
@pytest.mark.parametrize("mode", ["training", "inference"])
# BERT-Base (the largest fixture, about 2 s a case) in the slow step.
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.name.startswith("bert-base") else p
                                  for p in PROFILES], ids=lambda p: p.name.split(".")[0])
def test_incremental_ranges_equal_the_direct_model(path: Path, mode: str, pieces: Pieces) -> None:
    analysis = _analysis(path, mode)
    engine = analysis.facts
    table = analysis.range_table(2**62, pieces=pieces)
    n = engine.num_layers
    range_table_equals_engine(table, engine, n)
    for i in range(n):
        for j in range(i, n):
            got = table.per_tile(i, j)
            assert got is not None
            total, stash = got
            if mode == "inference":
                assert not stash.any()
            # What the solvers read is the worst tile of the same figure.
            assert table.memory(i, j, 2) == int((total + 2 * stash).max())


@pytest.mark.parametrize("path", PROFILES[:2], ids=lambda p: p.name.split(".")[0])
def test_a_lower_limit_reuses_and_stops(path: Path) -> None:
    made = _analysis(path, "training")
    engine = made.facts
    wide = made.range_table(2**62)
    full = wide.memory(0, engine.num_layers - 1, 0)
    narrow = made.range_table(int(full) - 1)
    assert narrow.memory(0, engine.num_layers - 1, 0) == np.inf
    assert narrow.per_tile(0, engine.num_layers - 1) is None


def test_stash_depth_and_stage_numbering_match_popart() -> None:
    # K = 4 IPUs: 7, 5, 3 entries, none on the last; the profile holds one already.
    assert [stash_depth(k, 4) for k in range(4)] == [7, 5, 3, 0]
    assert [extra_stash_entries(k, 4) for k in range(4)] == [6, 4, 2, 0]
    assert stash_depth(0, 1) == 0
    assert num_pipeline_stages(True, 3) == 5 and num_pipeline_stages(False, 3) == 3
    # IPU i holds stages i and 2K-2-i; the last IPU one stage for both passes.
    assert [backward_stage(i, 3) for i in range(3)] == [4, 3, 2]


def test_copy_buffers_by_hand() -> None:
    # 1000 B in, 3000 B out over 8 tiles: 500 per tile. In training the bytes crossing already hold the
    # gradients sent back (each tensor once): nothing is doubled.
    assert copy_buffer_per_tile(1000, 3000, 8) == 500
    assert copy_buffer_per_tile(1, 0, 8) == 1  # rounded up per tile
    assert copy_buffer_per_tile(1, 0, 0) == 0


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_range_figure_equals_the_placement_figure(mode: str) -> None:
    # bert-tiny: 3 layers; split 0 | 1..2. The contiguous form and the general form agree.
    path = next(p for p in PROFILES if p.name.startswith("bert-tiny-training"))
    engine = _analysis(path, mode).facts
    general = stage_figures(engine, [[0], [1, 2]])
    contiguous = (range_figure(engine, 0, 0, 0, 2), range_figure(engine, 1, 2, 1, 2))
    for a, b in zip(general, contiguous):
        assert a.total_per_tile.tolist() == b.total_per_tile.tolist()
        assert (a.bytes_in, a.bytes_out, a.copy_buffer) == (b.bytes_in, b.bytes_out, b.copy_buffer)
    assert general[0].bytes_out == general[1].bytes_in == int(engine.boundaries.crossing[0])
    assert general[0].stash_entries == (3 if mode == "training" else 0)
