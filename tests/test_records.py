"""One record per IPU and one stage layout per split (issue 21, points 3 and 4), checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from popliner.layout import Layout
from popliner.memory.types import ComponentBytes, StageMemory
from popliner.pipeline import LayerPlacement, StageFigure, StageLayout
from popliner.solvers.result import StageResult, stage_result

NAMES = ("embedding", "0", "1", "2", "head")


def test_stage_layout_of_a_wrapped_head_in_training() -> None:
    layout = Layout.of(NAMES, "wrap")
    plan = StageLayout.of(layout, [["embedding", "0", "head"], ["1"], ["2"]], training=True)
    # K = 3 with the head wrapped: forwards 0, 1, 2, the head at 3, backwards 2K-i = 6, 5, 4; 2K+1 = 7 stages.
    assert (plan.wraps, plan.num_stages, plan.head_stage) == (True, 7, 3)
    assert [plan.ipu_stages(k) for k in range(3)] == [(0, 3, 6), (1, 5), (2, 4)]
    # Stash: 2(K-i)+1 on every IPU, the last included.
    assert [plan.stash_depth(k) for k in range(3)] == [7, 5, 3]
    assert plan.placements(NAMES) == (
        LayerPlacement("embedding", 0, 0, 6), LayerPlacement("0", 0, 0, 6), LayerPlacement("1", 1, 1, 5),
        LayerPlacement("2", 2, 2, 4), LayerPlacement("head", 0, 3, 3))


def test_stage_layout_without_a_wrap() -> None:
    layout = Layout.of(NAMES, "last")
    plan = StageLayout.of(layout, [["embedding", "0"], ["1"], ["2", "head"]], training=True)
    # 2K-1 = 5 stages; the last IPU runs forward and backward in stage K-1 = 2; backwards 2K-2-i.
    assert (plan.wraps, plan.num_stages, plan.head_stage) == (False, 5, None)
    assert [plan.ipu_stages(k) for k in range(3)] == [(0, 4), (1, 3), (2,)]
    assert [plan.stash_depth(k) for k in range(3)] == [5, 3, 0]
    assert plan.placements(NAMES)[-1] == LayerPlacement("head", 2, 2, 2)
    inference = StageLayout.of(layout, [["embedding", "0"], ["1"], ["2", "head"]], training=False)
    assert inference.num_stages == 3 and inference.ipu_stages(0) == (0,) and inference.stash_depth(0) == 0
    assert inference.placements(NAMES)[0] == LayerPlacement("embedding", 0, 0, None)


def test_a_wrap_layout_on_one_ipu_or_with_the_head_elsewhere_does_not_wrap() -> None:
    layout = Layout.of(NAMES, "wrap")
    assert not StageLayout.of(layout, [list(NAMES)], training=True).wraps
    assert not StageLayout.of(layout, [["embedding", "0"], ["1", "2", "head"]], training=True).wraps


def _figure(per_tile: np.ndarray, copy_buffer: int = 0) -> StageFigure:
    return StageFigure(position=0, num_ipus=2, layers=(0,), memory=StageMemory(per_tile),
                       stash_entry_per_tile=np.zeros(per_tile.shape[1], np.int64), stash_entries=0,
                       copy_buffer=copy_buffer, bytes_in=0, bytes_out=0, forward_cycles=0, backward_cycles=0)


def test_headroom_is_the_budget_less_the_worst_tile() -> None:
    per_tile = np.zeros((5, 3), np.int64)
    per_tile[0] = [100, 700, 300]  # variables; the worst tile is 1
    per_tile[2] = 50  # vertex state on every tile
    result = stage_result(_figure(per_tile, copy_buffer=25), ("a",), budget=1000)
    # Worst tile: 700 + 50 + 25 (copy buffers) = 775; 1000 - 775 = 225 left, 22.5 % of the budget.
    assert (result.worst_tile, result.worst_tile_bytes, result.headroom, result.fits) == (1, 775, 225, True)
    assert result.headroom_share == 0.225
    assert result.memory == ComponentBytes(1100, 0, 150, 0, 0)
    over = stage_result(_figure(per_tile, copy_buffer=25), ("a",), budget=700)
    assert (over.headroom, over.fits, over.peak_step, over.largest_live) == (-75, False, -1, ())
    assert over.worst_components["copy_buffers"] == 25 and over.label == "IPU 0: a"


def test_a_result_given_as_numbers_has_no_per_tile_figure() -> None:
    result = StageResult(0, 0, ("a",), ComponentBytes(), 0, 500, 0, 0, 0, 0, budget=400)
    assert (result.headroom, result.fits, result.headroom_share) == (-100, False, -0.25)
    with pytest.raises(ValueError, match="without its per-tile figure"):
        _ = result.total_per_tile
