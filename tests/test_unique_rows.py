"""whatif._unique_rows against a plain sort of the rows (their steps capped as it caps them)."""

from __future__ import annotations

import numpy as np
import pytest

from popliner.memory.whatif import _NEVER, _merged_rows, _unique_rows


@pytest.mark.parametrize("seed", range(25))
def test_distinct_rows_in_order_with_each_first_occurrence(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, steps = int(rng.integers(0, 300)), int(rng.integers(1, 40))
    choices = np.array([-1, _NEVER, steps + 1, steps + 5] + list(range(steps)))  # "never" markers, steps past the end
    columns = [rng.integers(0, int(rng.integers(1, 30)), n)] + [
        rng.choice(choices[: int(rng.integers(2, choices.size + 1))], n) for _ in range(4)]
    uniq, inverse = _unique_rows(columns, steps)
    cap = steps + 2
    keys = [tuple([int(columns[0][i])] + [min(cap if int(c[i]) < 0 else int(c[i]), cap) for c in columns[1:]])
            for i in range(n)]
    distinct = sorted(set(keys))
    first = {key: keys.index(key) for key in distinct}
    assert uniq.dtype == np.int64 and uniq.shape == (len(distinct), 5)
    assert uniq.tolist() == [[int(c[first[key]]) for c in columns] for key in distinct]
    assert inverse.tolist() == [distinct.index(key) for key in keys]


@pytest.mark.parametrize("seed", range(25))
def test_merged_parts_as_one_table(seed: int) -> None:
    """_merged_rows of each part's own distinct rows is _unique_rows of the parts' rows one after another, rows
    found in several parts (or equal once capped) included."""
    rng = np.random.default_rng(seed)
    steps = int(rng.integers(1, 40))
    choices = np.array([-1, _NEVER, steps + 1, steps + 5] + list(range(steps)))
    parts = []
    for _ in range(int(rng.integers(1, 4))):
        n = int(rng.integers(0, 200))
        parts.append([rng.integers(0, 8, n)] + [rng.choice(choices[: int(rng.integers(2, 7))], n) for _ in range(4)])
    merged = _merged_rows([_unique_rows(columns, steps) for columns in parts], steps)
    whole = _unique_rows([np.concatenate(columns) for columns in zip(*parts)], steps)
    assert merged[0].tolist() == whole[0].tolist()
    assert merged[1].tolist() == whole[1].tolist()
