"""The worst tiles a range table keeps per range (:func:`popliner.memory.ranges.worst_tiles`) against the plain
largest over every tile, at every stash depth, and against the undominated pairs found pair by pair; values with
many ties, as tiles of one layout have."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popliner.memory.ranges import worst_tiles
from tests.sizes import examples, sized


@pytest.mark.parametrize("count", examples(80, 600))
def test_the_kept_tiles_give_the_largest_at_every_depth(count: int) -> None:
    @sized(count)
    @given(st.integers(1, 60).flatmap(lambda n: st.tuples(
        st.lists(st.integers(0, 12), min_size=n, max_size=n), st.lists(st.integers(0, 5), min_size=n, max_size=n))),
        st.sampled_from([1, 1000, 2**31 - 1]))
    def check(columns: tuple[list[int], list[int]], scale: int) -> None:
        total = np.array(columns[0], np.int64) * scale
        stash = np.array(columns[1], np.int64) * scale
        front = worst_tiles(total, stash)
        assert 1 <= len(front) <= total.size
        assert front == _undominated(total, stash)
        for extra in range(0, 131):
            assert max(t + extra * s for t, s in front) == int((total + extra * stash).max())

    check()


def _undominated(total: np.ndarray, stash: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The oracle: every distinct (total, stash) pair no other tile's pair is at least as large in both (and larger
    in one) of, by stash entry, largest first; pair against pair, no sort trick."""
    pairs = set(zip(total.tolist(), stash.tolist(), strict=True))
    kept = [(t, s) for t, s in pairs if not any(t2 >= t and s2 >= s and (t2, s2) != (t, s) for t2, s2 in pairs)]
    return tuple(sorted(kept, key=lambda pair: -pair[1]))


def test_a_dominated_tile_is_dropped() -> None:
    # Tile 1 has less of both than tile 0; tiles 0 and 2 each win at some depth.
    front = worst_tiles(np.array([10, 5, 12], np.int64), np.array([3, 2, 1], np.int64))
    assert front == ((10, 3), (12, 1))
