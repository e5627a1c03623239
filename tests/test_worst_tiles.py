"""The worst tiles a range table keeps per range (:func:`popliner.memory.ranges.worst_tiles`) against the plain
largest over every tile, at every stash depth; values with many ties, as tiles of one layout have."""

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
        for extra in range(0, 131):
            assert max(t + extra * s for t, s in front) == int((total + extra * stash).max())

    check()


def test_a_dominated_tile_is_dropped() -> None:
    # Tile 1 has less of both than tile 0; tiles 0 and 2 each win at some depth.
    front = worst_tiles(np.array([10, 5, 12], np.int64), np.array([3, 2, 1], np.int64))
    assert sorted(front) == [(10, 3), (12, 1)]
