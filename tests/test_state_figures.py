"""Both optimizer-state placements of a recomputation in one evaluation (range_state.StateFigures).

``popliner plan`` builds the off-chip option set of a recomputation before the on-chip one, on one shared base:
the off-chip tables read each range's on-chip figure on their own running sets (the state's live rows taken out
of the grids, its bytes per tile put in), and the on-chip tables take those. Here both are built in turn on one
base, as the plan does, and every figure the on-chip table gives (taken or evaluated) is held against the direct
model of an on-chip engine on a base of its own, which sees no other option set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from popliner.analysis import Analysis, scenario
from popliner.memory import figure_share, running
from popliner.memory.layer_vars import LayerVariables
from popliner.memory.range_state import share_state_figures
from popliner.memory.ranges import release
from popliner.memory.running import PIECES, Pieces
from popliner.memory.stages import stage_memory
from popliner.memory.training import TrainingOptions
from tests.test_shared_parts import SOURCES, TINY, _all_ranges, _analysis, _direct

RECOMPUTES = ("none", "pipeline", "every-layer")


def _both(source: str, options: TrainingOptions, pieces: Pieces, limit: int = 2**62,
          read_off: bool = True) -> tuple[Analysis, Any, Analysis]:
    """The on-chip scenario built after the off-chip one on one shared base (every off-chip range read when
    ``read_off``), the on-chip range state, and the on-chip scenario on a base of its own."""
    base = _analysis(source).base
    base.shared.share_between_option_sets()
    share_state_figures(base.shared)
    off = scenario(base, dataclasses.replace(options, optimizer_state="off-chip"))
    table = off.range_table(limit, pieces=pieces)
    if read_off:
        for i in range(table.num_layers):
            table.per_tile(i, table.num_layers - 1)  # the whole row, up to the limit
    release(off.range_memo)
    base.shared.forget_deltas()  # as the plan does between the two states' groups
    on = scenario(base, dataclasses.replace(options, optimizer_state="on-chip"))
    alone = scenario(_analysis(source).base, dataclasses.replace(options, optimizer_state="on-chip"))
    return on, on.range_memo.state(on.facts, pieces), alone


def _held(on: Analysis, alone: Analysis, pieces: Pieces, limit: int = 2**62) -> None:
    """Every range of the on-chip table against the direct model alone; a few stage figures too."""
    table = on.range_table(limit, pieces=pieces, lazy=True)
    for i, j in _all_ranges(table.num_layers):
        got = table.per_tile(i, j)
        total, stash = _direct(alone.facts, i, j)
        if got is None:
            assert max(total) > limit, (i, j)
            continue
        assert got[0].tolist() == total, f"total {i}..{j}"
        assert got[1].tolist() == stash, f"stash {i}..{j}"
    n = table.num_layers
    for i, j in [(0, 0), (0, n - 1), (n - 1, n - 1), (1, max(n - 2, 1))]:
        if table.per_tile(i, j) is not None:
            ops = table.stage_ops(i, j)
            np.testing.assert_array_equal(table.stage_memory(i, j).per_tile, stage_memory(alone.facts, ops).per_tile)


@pytest.mark.parametrize("pieces", [PIECES, TINY], ids=["default", "tiny"])
@pytest.mark.parametrize("recompute", RECOMPUTES)
@pytest.mark.parametrize("source", SOURCES)
def test_the_on_chip_figures_the_off_chip_tables_give_are_the_direct_models(source: str, recompute: str,
                                                                             pieces: Pieces) -> None:
    options = TrainingOptions(recompute=recompute)  # type: ignore[arg-type]
    on, state, alone = _both(source, options, pieces)
    taken = state._state_figure(0, 0)
    if on.facts.view.recompute == recompute and on.facts.view.optimizer_state.any():
        assert taken is not None  # every range was offered: the on-chip table evaluates none
    _held(on, alone, pieces)
    if taken is not None:
        assert not state._parts  # no layer's parts were made on chip


@pytest.mark.parametrize("placement", ["last", "wrap"])
def test_the_head_placements_take_the_figures_of_their_own_layering(placement: str) -> None:
    options = TrainingOptions(recompute="pipeline", head_placement=placement)  # type: ignore[arg-type]
    on, state, alone = _both("bert-tiny-training.json", options, TINY)
    assert state._state_figure(1, 1) is not None
    _held(on, alone, TINY)


def test_a_limit_stops_the_offer_at_the_first_range_over_it() -> None:
    """Off chip the rows go on past the on-chip limit: the offer stops at the first range over it on chip, which the
    on-chip table reads (and stops at)."""
    options = TrainingOptions(recompute="every-layer")
    _, _, alone = _both("bert-tiny-training.json", options, TINY, read_off=False)
    totals = [max(_direct(alone.facts, 0, j)[0]) for j in range(alone.facts.num_layers)]
    limit = (totals[0] + totals[-1]) // 2
    on, state, alone = _both("bert-tiny-training.json", options, TINY, limit)
    assert state._state_figure(0, 0) is not None and state._taken is not None
    offered = state._taken[0].figures
    assert offered and all(worst <= limit or (i, j - 1) in offered and offered[(i, j - 1)][0] <= limit
                           for (i, j), (worst, *_) in offered.items())
    assert any(worst > limit for worst, *_ in offered.values())
    _held(on, alone, TINY, limit)


def test_a_range_whose_stash_could_hold_the_state_is_evaluated_on_chip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(running.RunningStage, "stash_holds_no_state", lambda self: False)
    on, state, alone = _both("bert-tiny-training.json", TrainingOptions(recompute="every-layer"), TINY)
    assert state._state_figure(0, 0) is None
    _held(on, alone, TINY)


def test_a_state_live_in_the_forward_cut_window_is_taken_out_of_that_grid_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pipeline recomputation the state is first live after a re-run set's forward window, whose reading then
    keeps the set's own; were it live earlier, the forward-cut grid's reading takes it out too."""
    add = running.StateSide.add

    def early(self: running.StateSide, rows: running.StateRows) -> None:
        add(self, rows)
        self.first = 0

    monkeypatch.setattr(running.StateSide, "add", early)
    # The state is still never stashed in fact (the bundled profiles update after the backward part).
    monkeypatch.setattr(running.RunningStage, "stash_holds_no_state", lambda self: True)
    on, state, alone = _both("bert-tiny-training.json", TrainingOptions(recompute="pipeline"), TINY)
    assert state._state_figure(0, 0) is not None
    _held(on, alone, TINY)


def test_layers_treated_otherwise_take_no_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were some other variable of a layer treated otherwise on chip, that layer's ranges are evaluated on chip."""
    real = figure_share.TableView.differs
    options = TrainingOptions(recompute="pipeline")
    layer = LayerVariables.of(scenario(_analysis("bert-tiny-training.json").base, options).facts).private(1)

    def differs(self: figure_share.TableView, reference: figure_share.TableView) -> np.ndarray | None:
        found = real(self, reference)
        if found is not None:
            found[layer[:1]] = True  # one of layer 1's variables
        return found

    monkeypatch.setattr(figure_share.TableView, "differs", differs)
    on, state, alone = _both("bert-tiny-training.json", options, TINY)
    n = on.facts.num_layers
    kept = [(i, j) for i in range(n) for j in range(i, n) if state._state_figure(i, j) is not None]
    assert kept == [(i, j) for i in range(n) for j in range(i, n) if not i <= 1 <= j]
    _held(on, alone, TINY)


def test_the_plan_builds_the_off_chip_option_sets_first() -> None:
    from popliner.pod.plan import PodRequest, _option_sets

    base = _analysis("bert-tiny-training.json").base
    order = [(o.recompute, o.optimizer_state) for o, _ in _option_sets(base, TrainingOptions(), PodRequest(4), [])]
    assert order[:3] == [("none", "off-chip")] * 3 and order[3:6] == [("none", "on-chip")] * 3
