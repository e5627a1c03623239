"""arrays.csr_span, arrays.widen_span, arrays.rank_by_table and arrays.flagged_entries against plain loops or numpy
over random tables."""

from __future__ import annotations

import numpy as np
import pytest

from popliner.arrays import csr_span, flagged_entries, rank_by_table, span_at, widen_span


def _random_table(seed: int) -> tuple[np.random.Generator, int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A random CSR table (rng, rows, size, ptr, idx, values, picked rows): entries repeat within a row too, values
    are layers or units (never negative), about 70 % of the rows picked."""
    rng = np.random.default_rng(seed)
    rows, size = int(rng.integers(0, 40)), int(rng.integers(1, 60))
    counts = rng.integers(0, 12, rows)
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    idx = rng.integers(0, size, int(ptr[-1])).astype(np.int32)
    values = rng.integers(0, 20, rows)
    picked = np.flatnonzero(rng.random(rows) < 0.7)
    return rng, rows, size, ptr, idx, values, picked


@pytest.mark.parametrize("seed", range(30))
def test_span_of_each_entry_is_the_smallest_and_largest_value_of_its_rows(seed: int) -> None:
    rng, rows, size, ptr, idx, values, picked = _random_table(seed)
    lo, hi = csr_span(ptr, idx, picked, values, size, np.int16, lo_none=99)
    seen: dict[int, list[int]] = {}
    for row in picked.tolist():
        for entry in idx[ptr[row]:ptr[row + 1]].tolist():
            seen.setdefault(entry, []).append(int(values[row]))
    expect_lo = [min(seen[e]) if e in seen else 99 for e in range(size)]
    expect_hi = [max(seen[e]) if e in seen else -1 for e in range(size)]
    assert lo.dtype == hi.dtype == np.int16
    assert lo.tolist() == expect_lo and hi.tolist() == expect_hi
    # The other rows taken in afterwards, by widen_span, give the span of all rows, whatever the split.
    more = np.setdiff1d(np.arange(rows), picked)
    wide = widen_span((lo, hi), ptr, idx, more, values)
    for row in more.tolist():
        for entry in idx[ptr[row]:ptr[row + 1]].tolist():
            seen.setdefault(entry, []).append(int(values[row]))
    assert wide[0].tolist() == [min(seen[e]) if e in seen else 99 for e in range(size)]
    assert wide[1].tolist() == [max(seen[e]) if e in seen else -1 for e in range(size)]
    assert lo.tolist() == expect_lo and hi.tolist() == expect_hi  # copies: the span given is unchanged


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64])
def test_ranks_by_table_are_the_ranks_of_a_sort(dtype: type[np.signedinteger]) -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        values = rng.integers(-50, 300, int(rng.integers(0, 200))).astype(dtype)
        found = rank_by_table(values)
        assert found is not None
        distinct, rank = np.unique(values, return_inverse=True)
        assert found[0].dtype == found[1].dtype == np.int64
        assert found[0].tolist() == distinct.tolist() and found[1].tolist() == rank.tolist()
    assert rank_by_table(np.array([0, 1 << 30])) is None


@pytest.mark.parametrize("seed", range(30))
def test_span_at_some_entries_is_csr_span_there(seed: int) -> None:
    rng, rows, size, ptr, idx, values, picked = _random_table(seed)
    at = np.flatnonzero(rng.random(size) < 0.3)
    lo, hi = span_at(ptr, idx, picked, values, at, size, np.int32, lo_none=99)
    whole = csr_span(ptr, idx, picked, values, size, np.int32, lo_none=99)
    assert lo.dtype == hi.dtype == np.int32
    assert lo.tolist() == whole[0][at].tolist() and hi.tolist() == whole[1][at].tolist()


@pytest.mark.parametrize("entries", [0, 1, 70_000, (1 << 16) * 2])
def test_flagged_entries_are_flatnonzero_of_the_gathered_flags(entries: int) -> None:
    # Across the pieces it gathers in (1 << 16 entries), exactly on a piece's end, and with nothing to gather.
    rng = np.random.default_rng(entries)
    flags = rng.random(1000) < 0.1
    idx = rng.integers(0, flags.size, entries).astype(np.int32)
    found = flagged_entries(flags, idx)
    assert found.dtype == np.int64
    assert found.tolist() == np.flatnonzero(flags[idx]).tolist()
