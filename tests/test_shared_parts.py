"""Layer parts: the profile's once, each option set's delta on top (:mod:`popliner.memory.ranges_shared`).

Every engine's range tables take each layer's parts from its profile base's
:class:`SharedParts`: the events and stash columns of the variables as
profiled, plus the delta of the variables its options change. ``popliner
plan`` asks the parts to be shared and builds one engine per option set on
them, in turn. Here the option sets are built in turn on ONE base that shares
(each later one finding the parts, deltas and range figures the earlier ones
left), and every range figure
(total per tile, stash entry, the wrapped head's ranges, stage figures) is
held against the direct model (:meth:`MemoryFacts.stage_memory` and
:meth:`MemoryFacts.stash_entry_per_tile`: a sweep over the range's own
variables, no layer parts) of an engine of the same options on a base of its
own, loaded again, which sees no other option set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest

from popliner.analysis import Analysis, AnalysisOptions, load_analysis, scenario
from popliner.memory import figure_share, ranges_shared
from popliner.memory.facts import MemoryFacts
from popliner.memory.layer_vars import LayerVariables
from popliner.memory.range_state import RangeMemo
from popliner.memory.ranges import release
from popliner.memory.ranges_shared import SharedParts
from popliner.memory.running import PIECES, Pieces
from popliner.memory.stages import range_ops, stage_memory, stash_entry_per_tile
from popliner.memory.training import TrainingOptions
from popliner.synth import generate_document, preset_spec
from tests.helpers import FIXTURES, analyse_document

#: Every kind of change: none, off-chip state, every-layer cuts, pipeline's forward cut, sharded bytes, head placements.
OPTION_SETS = [
    {"recompute": "none"},
    {"recompute": "pipeline"},
    {"recompute": "every-layer", "optimizer_state": "off-chip"},
    {"recompute": "none", "optimizer_state": "off-chip", "head_placement": "last"},
    {"recompute": "pipeline", "optimizer_state": "off-chip", "head_placement": "wrap"},
    {"recompute": "every-layer", "head_placement": "wrap"},
    {"recompute": "pipeline", "head_placement": "last"},
    {"recompute": "none", "replication_factor": 4, "sharded_optimizer_state": True},
]


@cache
def _generated(name: str) -> dict[str, Any]:
    specs = {
        "gpt2-tiny": preset_spec("gpt2-tiny", "training", layers=3),
        "bert-tiny-mlm": preset_spec("bert-tiny", "training", layers=3, head="mlm"),
    }
    return generate_document(specs[name])


def _analysis(source: str) -> Analysis:
    if source.endswith((".json", ".json.gz")):
        return load_analysis(str(FIXTURES / source), AnalysisOptions(), use_cache=False)
    return analyse_document(_generated(source), AnalysisOptions())


def _option_engines(source: str) -> Iterator[tuple[dict[str, Any], Analysis, Analysis]]:
    """(options, scenario on the one shared base, scenario of the same options on a base of its own) per option set."""
    shared_base = _analysis(source).base
    shared_base.shared.share_between_option_sets()
    for changes in OPTION_SETS:
        options = dataclasses.replace(TrainingOptions(), **changes)
        own_base = _analysis(source).base  # loaded again: its parts and memos see this option set only
        made, made_alone = scenario(shared_base, options), scenario(own_base, options)
        engine, alone = made.facts, made_alone.facts
        assert engine.memo is shared_base.shared.view_memo and alone.memo is own_base.shared.view_memo
        assert made.range_memo.shared is shared_base.shared and made_alone.range_memo.shared is own_base.shared
        # The training view shares the roles and recomputation spans across option sets: the same as alone.
        np.testing.assert_array_equal(engine.view.rerun_ops, alone.view.rerun_ops)
        for part in ("at", "lo", "hi"):
            np.testing.assert_array_equal(getattr(engine.view.forward_cut, part), getattr(alone.view.forward_cut, part))
        np.testing.assert_array_equal(engine.view.never_stash, alone.view.never_stash)
        yield changes, made, made_alone


#: Grid blocks of 3 segments (the profile's own grid, which the shared parts' events are made on, keeps the
#: default): windows start, end and span blocks on small profiles.
TINY = Pieces(grid_block=3)


def _all_ranges(n: int) -> Iterator[tuple[int, int]]:
    rng = np.random.default_rng(7)
    pairs = [(i, j) for i in range(n) for j in range(i, n)]
    for k in rng.permutation(len(pairs)):  # random order: rows resumed, grids restored
        yield pairs[int(k)]


def _direct(engine: MemoryFacts, i: int, j: int) -> tuple[list[int], list[int]]:
    """The direct model's total and stash entry per tile of the range ``i..j``."""
    ops = range_ops(engine, i, j)
    return stage_memory(engine, ops).total_per_tile.tolist(), stash_entry_per_tile(engine, ops).tolist()


def _held(source: str, pieces: Pieces) -> int:
    """Every range of every option set's table on the shared base against the direct model alone; ranges checked."""
    checked = 0
    for changes, made, made_alone in _option_engines(source):
        engine, alone = made.facts, made_alone.facts
        table = made.range_table(2**62, pieces=pieces, lazy=True)
        for i, j in _all_ranges(table.num_layers):
            got = table.per_tile(i, j)
            assert got is not None
            total, stash = _direct(alone, i, j)
            assert got[0].tolist() == total, f"{source} {changes} total {i}..{j}"
            assert got[1].tolist() == stash, f"{source} {changes} stash {i}..{j}"
            checked += 1
        if engine.head_wraps:  # range 0..j with the head: the model of the union of both stages' operations
            head = range_ops(alone, alone.head_layer, alone.head_layer)
            for j in range(table.num_layers):
                wrapped = table._wrapped_range(j)
                assert wrapped is not None
                ops = np.union1d(range_ops(alone, 0, j), head)
                assert wrapped[0].tolist() == stage_memory(alone, ops).total_per_tile.tolist(), (changes, j)
        n = table.num_layers
        for i, j in [(0, 0), (0, n - 1), (n - 1, n - 1), (1, max(n - 2, 1)), (min(1, n - 1), min(1, n - 1))]:
            ops = table.stage_ops(i, j)
            np.testing.assert_array_equal(table.stage_memory(i, j).per_tile, stage_memory(alone, ops).per_tile)
        np.testing.assert_array_equal(engine.boundaries.crossing, alone.boundaries.crossing)
        np.testing.assert_array_equal(engine.boundaries.gradient_crossing, alone.boundaries.gradient_crossing)
        release(made.range_memo)  # as the planner does: the next option set's grids take this one's buffers
    return checked


SOURCES = ["tiny-training.json", "bert-tiny-training.json", "resnet-small-training.json.gz", "gpt2-tiny",
           "bert-tiny-mlm"]
#: Sources whose default grid runs in the slow step (suite time): the main suite keeps both grids on the two
#: small fixtures and the tiny grid (windows that start, end and span blocks) on these.
DEFAULT_GRID_IN_SLOW = ("resnet-small-training.json.gz", "gpt2-tiny", "bert-tiny-mlm")


def source_grids(default: Pieces, tiny: Pieces, tiny_grid_in_slow: tuple[str, ...] = ()) -> list[Any]:
    """(source, pieces) parameters: every source with the default and the tiny grid, ids ``source-grid``.

    ``tiny_grid_in_slow``: the sources whose tiny-grid case is long too (run in the slow step).
    """
    slow = {(s, "default") for s in DEFAULT_GRID_IN_SLOW} | {(s, "tiny") for s in tiny_grid_in_slow}
    return [pytest.param(source, pieces, id=f"{source}-{name}",
                         marks=[pytest.mark.slow] if (source, name) in slow else [])
            for source in SOURCES for name, pieces in (("default", default), ("tiny", tiny))]


@pytest.mark.parametrize(("source", "pieces"), source_grids(PIECES, TINY))
def test_parts_and_deltas_give_the_direct_model_of_every_option_set(source: str, pieces: Pieces) -> None:
    assert _held(source, pieces) > 0


def test_grids_buffers_go_back_to_the_parts() -> None:
    """A released engine's grids are given back, cleared, for the next option set's grids."""
    *_, (_, made, _alone) = _option_engines("bert-tiny-training.json")
    made.range_table(2**62, pieces=TINY).per_tile(0, 0)
    release(made.range_memo)
    shared = made.range_memo.shared
    assert any(found for found in shared._buffers.values())
    assert all(not b.any() for found in shared._buffers.values() for bufs in found for b in bufs)


def test_the_options_change_variables_the_delta_corrects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the delta (every variable taken as profiled) the figures are wrong: the check above can fail."""
    monkeypatch.setattr(ranges_shared, "_changed",
                        lambda profile, base, changed: np.zeros(base.variables.count, bool))
    with pytest.raises(AssertionError):
        _held("bert-tiny-training.json", TINY)


def test_parts_of_another_profile_are_refused() -> None:
    one, other = _analysis("tiny-training.json"), _analysis("tiny-training.json")
    with pytest.raises(ValueError, match="its own profile"):
        RangeMemo(SharedParts(one.profile, one.ops)).state(other.facts, PIECES)
    memo = RangeMemo(other.base.shared)
    memo.state(other.facts, PIECES)
    with pytest.raises(ValueError, match="one scenario only"):  # another scenario of the same profile
        memo.state(scenario(other.base, TrainingOptions(recompute="every-layer")).facts, PIECES)


def test_every_layer_with_the_head_first_and_last_share_the_figures_of_the_layers_between() -> None:
    """Two variable tables that differ only in the head's variables (every-layer recomputation cuts the head's
    activations by its own layer when it is placed last): the ranges between share their figures by the
    layers' variables treated alike (figure_share), each the direct model's."""
    base = _analysis("bert-tiny-training.json").base
    base.shared.share_between_option_sets()
    assert base.has_unlayered
    first = scenario(base, TrainingOptions(recompute="every-layer"))
    for i in range(first.facts.num_layers):
        first.range_table(2**62).per_tile(i, i)  # every row, in full
    first_table = first.range_memo.state(first.facts, PIECES).share.grid.table
    release(first.range_memo)
    options = TrainingOptions(recompute="every-layer", head_placement="last")
    last = scenario(base, options)
    alone = scenario(_analysis("bert-tiny-training.json").base, options).facts
    state = last.range_memo.state(last.facts, PIECES)
    assert state.share.grid.table != first_table  # another table: only the layers treated alike share
    n = last.facts.num_layers
    found = [(i, j) for i in range(1, n - 1) for j in range(i, n - 1) if state.other_figure(i, j) is not None]
    assert found and all(state.other_figure(0, j) is None for j in range(n))  # layer 0 holds the head under first
    for i, j in found:
        total, stash = _direct(alone, i, j)
        assert state.figures[(i, j)][2].tolist() == total and state.figures[(i, j)][1].tolist() == stash


def test_the_comparison_with_the_reference_tells_the_option_sets_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were every variable treated alike by every option set, figures would be taken from the wrong option set."""
    monkeypatch.setattr(figure_share.TableView, "differs",
                        lambda self, reference: np.zeros(self.grids[0].klass.size, bool))
    with pytest.raises(AssertionError):
        _held("bert-tiny-training.json", TINY)


def test_a_sets_sides_read_from_its_columns_as_profiled_are_the_grids_profiles() -> None:
    """VarSet.picked takes every side from the set's columns as profiled (SharedParts.profiled: ranks, narrowed),
    and the made side's own classes from the what-if profile: whichever side read first, each holds the side's
    classes, tiles and bytes in the grid's profile."""
    base = _analysis("bert-tiny-training.json").base
    base.shared.share_between_option_sets()
    made = scenario(base, TrainingOptions(recompute="every-layer", optimizer_state="off-chip"))
    state = made.range_memo.state(made.facts, PIECES)
    own, profile = state.share.grid.own, made.facts.profile
    assert own is not None and own.any()
    assert profile.variables.klass is not base.shared.profile.variables.klass  # the made side's classes its own
    v = profile.variables
    for j in range(made.facts.num_layers):
        var = state.private_variables(j)
        made_first, taken_first = ranges_shared.VarSet(base.shared, var), ranges_shared.VarSet(base.shared, var)
        made_first.picked(profile, own, ranges_shared.MADE)
        taken_first.picked(profile, own, ranges_shared.TAKEN)
        split = made_first.split(own)
        taken, always, at = split.taken.at, split.always.at, split.made
        assert at.size and taken.size and always.size  # every side holds variables
        sides = ((ranges_shared.TAKEN, taken), (ranges_shared.ALWAYS, always), (ranges_shared.MADE, at))
        for vs in (made_first, taken_first):
            for side, where in sides:
                got = vs.picked(profile, own, side)
                for values, column in zip((got.klass, got.tile, got.nbytes), (v.klass, v.tile, v.bytes)):
                    np.testing.assert_array_equal(values, column[var[where]])


def test_a_private_sets_key_from_its_runs_is_the_key_of_its_values() -> None:
    """RangeState keys a layer's private variables from their runs (LayerVariables.private_runs), with no pass over
    them: the same key as their values give, so that every option set finds the same parts."""
    base = _analysis("bert-tiny-training.json").base
    base.shared.share_between_option_sets()
    made = scenario(base, TrainingOptions(recompute="pipeline"))
    layers = LayerVariables.of(made.facts)
    for j in range(made.facts.num_layers):
        var = layers.private(j)
        assert ranges_shared.VarSet(base.shared, var, layers.private_runs(j)).key == base.shared.key(var)
