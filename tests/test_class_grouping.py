"""Stash columns grouped per liveness class against the per-variable grouping they replace (the same rows)."""

from __future__ import annotations

import numpy as np
import pytest

from popliner.memory import stash_row

Columns = tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray, np.ndarray, np.ndarray, int]


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
    got = stash_row._grouped_by_class(var, candidate, klass, steps, tile, nbytes, tiles)
    expect = stash_row.candidate_columns(var, candidate, steps[0][klass], steps[1][klass], tile, nbytes, tiles)
    if got is None:  # only where the columns stay ungrouped
        assert "dense" not in expect
        return
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
        seen.add(stash_row._grouped_by_class(var, candidate, klass, steps, tile, nbytes, tiles) is None)
    assert seen == {True, False}
