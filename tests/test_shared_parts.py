"""Layer parts shared across option sets (:mod:`popliner.memory.ranges_shared`) against engines built alone.

``popliner plan`` builds one engine per option set and lets them share each
layer's option-free parts: the events and stash columns of the variables as
profiled, corrected for the variables an option set changes. Here every
option set's engine takes its parts from one :class:`SharedParts` that the
option sets before it filled, and every range figure (total per tile, stash
entry, the wrapped head's ranges, the direct model's stage figures) is held
against an engine of the same options that shares nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest

from popliner.analysis import Analysis, AnalysisOptions, load_analysis, scenario
from popliner.memory import ranges_shared
from popliner.memory.ranges import ProfileRanges, release
from popliner.memory.ranges_shared import SharedParts
from popliner.memory.running import PIECES, Pieces
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


def _option_engines(source: str) -> Iterator[tuple[dict[str, Any], Any, Any]]:
    """(options, engine sharing parts with the ones before it, engine sharing nothing) per option set."""
    shared_base, alone_base = _analysis(source), _analysis(source)
    shared = SharedParts(shared_base.profile, shared_base.ops)
    for changes in OPTION_SETS:
        options = dataclasses.replace(TrainingOptions(), **changes)
        a, b = scenario(shared_base.base, options, shared), scenario(alone_base.base, options)
        engine = a.engine  # its training view shares the roles and recomputation spans too
        assert engine.shared_parts is shared and b.engine.shared_parts is None
        np.testing.assert_array_equal(engine.view.rerun_ops, b.engine.view.rerun_ops)
        np.testing.assert_array_equal(engine.view.forward_cut, b.engine.view.forward_cut)
        np.testing.assert_array_equal(engine.view.never_stash, b.engine.view.never_stash)
        yield changes, engine, b.engine


#: Grid blocks of 3 segments (the profile's own grid, which the shared parts' events are made on, keeps the
#: default): windows start, end and span blocks on small profiles.
TINY = Pieces(grid_block=3)


def _all_ranges(table: ProfileRanges) -> Iterator[tuple[int, int]]:
    n = table.num_layers
    rng = np.random.default_rng(7)
    pairs = [(i, j) for i in range(n) for j in range(i, n)]
    for k in rng.permutation(len(pairs)):  # random order: rows resumed, grids restored
        yield pairs[int(k)]


#: A range's total and stash entry per tile.
_Figure = tuple[np.ndarray, np.ndarray]


def _figure_pairs(shared: Any, alone: Any, pieces: Pieces) -> Iterator[tuple[int, int, _Figure, _Figure]]:
    """Every range's (total, stash entry) per tile from a table of each engine, in a random order."""
    t1 = ProfileRanges(shared, limit=2**62, pieces=pieces, lazy=True)
    t2 = ProfileRanges(alone, limit=2**62, pieces=pieces, lazy=True)
    for i, j in _all_ranges(t1):
        a, b = t1.per_tile(i, j), t2.per_tile(i, j)
        assert a is not None and b is not None
        yield i, j, a, b


SOURCES = ["tiny-training.json", "bert-tiny-training.json", "resnet-small-training.json.gz", "gpt2-tiny",
           "bert-tiny-mlm"]


@pytest.mark.parametrize("pieces", [PIECES, TINY], ids=["default", "tiny"])
@pytest.mark.parametrize("source", SOURCES)
def test_shared_parts_give_the_figures_of_engines_built_alone(source: str, pieces: Pieces) -> None:
    checked = 0
    parts = None
    for changes, shared, alone in _option_engines(source):
        parts = shared.shared_parts
        t1 = ProfileRanges(shared, limit=2**62, pieces=pieces, lazy=True)
        t2 = ProfileRanges(alone, limit=2**62, pieces=pieces, lazy=True)
        assert t1._shared.share is not None and t2._shared.share is None
        for i, j in _all_ranges(t1):
            a, b = t1.per_tile(i, j), t2.per_tile(i, j)
            assert a is not None and b is not None
            np.testing.assert_array_equal(a[0], b[0], err_msg=f"{source} {changes} total {i}..{j}")
            np.testing.assert_array_equal(a[1], b[1], err_msg=f"{source} {changes} stash {i}..{j}")
            assert t1.memory(i, j, 2) == t2.memory(i, j, 2)
            checked += 1
        if shared.head_wraps:
            for j in range(t1.num_layers):
                np.testing.assert_array_equal(t1._wrapped_range(j)[0], t2._wrapped_range(j)[0])  # type: ignore[index]
        n = t1.num_layers
        for i, j in [(0, 0), (0, n - 1), (n - 1, n - 1), (1, max(n - 2, 1)), (min(1, n - 1), min(1, n - 1))]:
            np.testing.assert_array_equal(t1.stage_memory(i, j).per_tile, t2.stage_memory(i, j).per_tile)
        np.testing.assert_array_equal(shared.crossing, alone.crossing)
        np.testing.assert_array_equal(shared.gradient_crossing, alone.gradient_crossing)
        release(shared)  # as the planner does: the next option set's grids take this one's buffers
    assert checked > 0
    assert parts is not None and any(found for found in parts._buffers.values())  # buffers were given back


def test_the_options_change_variables_the_sharing_corrects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the correction (every variable taken as profiled) the figures are wrong: the check above can fail."""
    monkeypatch.setattr(ranges_shared, "_changed",
                        lambda profile, base: np.zeros(base.variables.count, bool))
    differ = 0
    for _, shared, alone in _option_engines("bert-tiny-training.json"):
        for _i, _j, a, b in _figure_pairs(shared, alone, TINY):
            differ += int(not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])))
    assert differ > 0


def test_parts_of_another_profile_are_refused() -> None:
    one, other = _analysis("tiny-training.json"), _analysis("tiny-training.json")
    assert not other.engine.share_parts(SharedParts(one.profile, one.ops))
    assert other.engine.shared_parts is None
