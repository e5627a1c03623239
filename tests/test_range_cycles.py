"""A range's cycles from the running sums of :class:`popliner.memory.cycles.CycleFacts` against the plain sums over
its layers (the figure before the running sums), for every range, with and without a wrapped head and pipeline
recomputation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popliner.memory.cycles import CycleFacts, cycle_facts, range_cycles
from tests.sizes import examples, sized


def _plain(facts: CycleFacts, i: int, j: int, with_head: bool = False) -> int:
    """range_cycles as it was: numpy sums over the layers' slices."""
    last = facts.num_layers - 1
    if with_head:
        if facts.pipeline and i == 0 and j == last - 1:
            return int(facts.layer_cycles.sum())
        return _plain(facts, i, j) + _plain(facts, last, last)
    base = int(facts.layer_cycles[i : j + 1].sum())
    if facts.pipeline and j == last:
        return base
    return base + int(facts.rerun_layer_cycles[i : j + 1].sum())


class _Programs:
    has_cycles = True


class _Profile:
    programs = _Programs()


@pytest.mark.parametrize("count", examples(60, 400))
def test_running_sums_give_the_plain_sums(count: int) -> None:
    @sized(count)
    @given(st.lists(st.tuples(st.integers(0, 2**40), st.booleans(), st.integers(-1, 5)), min_size=1, max_size=40),
           st.booleans())
    def check(ops: list[tuple[int, bool, int]], pipeline: bool) -> None:
        per_op = np.array([o[0] for o in ops], np.int64)
        rerun = np.array([o[1] for o in ops], bool)
        layer_of_op = np.array([o[2] for o in ops], np.int64)
        layers = int(layer_of_op.max()) + 1 if (layer_of_op >= 0).any() else 1
        facts = cycle_facts(_Profile(), per_op, layer_of_op, layers, rerun, pipeline)  # type: ignore[arg-type]
        n = facts.num_layers
        for i in range(n):
            for j in range(i, n):
                assert range_cycles(facts, i, j) == _plain(facts, i, j)
                if j < n - 1:  # a wrapped head is the last layer, after the range
                    assert range_cycles(facts, i, j, with_head=True) == _plain(facts, i, j, with_head=True)

    check()
