"""Stash columns grouped per liveness class against the per-variable grouping they replace (the same rows)."""

from __future__ import annotations

import numpy as np
import pytest

from popliner.memory import stash_row
from popliner.memory.liveness import SegmentGrid, variable_steps
from popliner.memory.liveness.grid import Columns as VarColumns
from popliner.memory.stages import range_ops
from tests.helpers import FIXTURES

Columns = tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray, np.ndarray, np.ndarray, int]


def candidate_columns(var: np.ndarray, candidate: np.ndarray, first: np.ndarray, last: np.ndarray, tile: np.ndarray,
                      nbytes: np.ndarray, tiles: int, with_owner: bool = False) -> dict[str, np.ndarray]:
    """The oracle: :func:`stash_row.stash_columns` from per-variable step columns (one row per candidate, then
    grouped per (first, last) pair as the stash row groups them)."""
    keep = np.flatnonzero(candidate[var])  # the others are never part of a stash entry
    sv = var[keep]
    cols = {"first": first[sv], "last": last[sv], "tile": tile[sv], "nbytes": nbytes[sv]}
    if with_owner:
        cols["owner"] = keep
        return cols
    return stash_row._grouped(cols, tiles)


def _columns(rng: np.random.Generator) -> Columns:
    """Variables with classes, tiles and bytes; classes with first and last steps (some never live)."""
    classes, count, tiles = int(rng.integers(1, 30)), int(rng.integers(1, 400)), int(rng.integers(1, 6))
    first = rng.integers(-1, 50, classes)
    last = np.where(first < 0, -1, first + rng.integers(0, 30, classes))
    klass = rng.integers(0, classes, count).astype(np.int32)
    return (klass, (first, last), rng.integers(0, tiles, count).astype(np.int32),
            rng.integers(0, 1000, count).astype(np.int64), rng.random(count) < 0.8, tiles)


@pytest.mark.parametrize("seed", range(40))
def test_grouped_by_class_equals_the_columns_grouped(seed: int) -> None:
    rng = np.random.default_rng(seed)
    klass, steps, tile, nbytes, candidate, tiles = _columns(rng)
    var = np.unique(rng.integers(0, len(klass), int(rng.integers(0, len(klass) + 1))))
    sv = var[candidate[var]]
    expect = candidate_columns(var, candidate, steps[0][klass], steps[1][klass], tile, nbytes, tiles)
    # The candidates' own columns, and all the variables' columns with the candidates' positions in them.
    for got in (stash_row._grouped_by_class(VarColumns(klass[sv], tile[sv], nbytes[sv]), None, steps, tiles),
                stash_row._grouped_by_class(VarColumns(klass[var], tile[var], nbytes[var]), candidate[var], steps,
                                            tiles)):
        if got is None:  # only where the columns stay ungrouped
            assert "dense" not in expect
            continue
        assert got.keys() == expect.keys()
        for key in got:
            assert got[key].dtype == expect[key].dtype and got[key].tolist() == expect[key].tolist(), key


def test_both_outcomes_are_met() -> None:
    # The random tables above give grouped rows and ungrouped columns both.
    seen = set()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        klass, steps, tile, nbytes, candidate, tiles = _columns(rng)
        var = np.unique(rng.integers(0, len(klass), int(rng.integers(0, len(klass) + 1))))
        sv = var[candidate[var]]
        seen.add(stash_row._grouped_by_class(VarColumns(klass[sv], tile[sv], nbytes[sv]), None, steps, tiles) is None)
    assert seen == {True, False}


@pytest.mark.parametrize("options", [{}, {"recompute": "every-layer", "optimizer_state": "off-chip"}])
@pytest.mark.parametrize("name", ["bert-tiny-training.json", "bert-base-training.json.gz"])
def test_stash_columns_of_an_engine_equal_the_columns_of_every_variable(name: str, options: dict[str, str]) -> None:
    """A real engine's layers, private and shared variables: the columns taken from per-variable step columns."""
    from popliner.analysis import AnalysisOptions, load_analysis
    from popliner.memory.training import TrainingOptions

    fixtures = FIXTURES
    analysis = load_analysis(str(fixtures / name), AnalysisOptions(training=TrainingOptions(**options)),  # type: ignore[arg-type]
                             use_cache=False)
    engine = analysis.facts
    v = engine.profile.variables
    first, last = variable_steps(engine.profile)
    for k in range(engine.num_layers):
        var = engine.model.counted_variables(range_ops(engine, k, k))
        multi = engine.boundaries.multi_layer_var[var]
        for part, with_owner in ((var[~multi], False), (var[multi], True)):
            expect = candidate_columns(part, engine.stash_candidate, first, last, v.tile, v.bytes, engine.tiles,
                                       with_owner)
            columns = VarColumns(v.klass[part], v.tile[part], v.bytes[part])  # as a layer's parts pass them
            for got in (stash_row.stash_columns(engine, part, with_owner),
                        stash_row.stash_columns(engine, part, with_owner, columns)):
                assert got is not None and got.keys() == expect.keys()
                for key in got:
                    assert got[key].dtype == expect[key].dtype and got[key].tolist() == expect[key].tolist(), (k, key)
            grid = SegmentGrid.of(engine.profile, block=3)
            alone, given = grid.merged(part), grid.merged(part, columns)
            assert alone.keys() == given.keys()
            assert all(alone[key].dtype == given[key].dtype and np.array_equal(alone[key], given[key]) for key in alone)
