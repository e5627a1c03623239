"""Layer parts made from the layers' variables split at once, against the union of each layer's operations' variables.

Each layer's private and shared variables come from the layer spans of all
variables at once (:mod:`popliner.memory.layer_vars`), not from the union of
its operations' variables. Here every field of every layer's parts, for
every option set (in turn on one base, and each on a base of its own) and
grids of two block sizes, is held against the parts made from the union:
the same arrays, dtypes and keys. (The parts' sums per liveness class, made
once for the grid's rows and the stash columns, were a second path until
issue 35: they saved no whole command 20 %, so the parts are made variable
by variable only.)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np
import pytest

from popliner.memory.layer_vars import LayerVariables
from popliner.memory.running import PIECES, LayerParts, Pieces
from tests.test_shared_parts import SOURCES, _option_engines


def _parts(source: str, pieces: Pieces) -> list[tuple[str, LayerParts]]:
    """Every layer's parts of every option set's two engines (on the shared base, alone), in a fixed order."""
    out = []
    for changes, shared, alone in _option_engines(source):
        for name, made in (("shared", shared), ("alone", alone)):
            state = made.range_memo.state(made.facts, pieces)
            out += [(f"{source} {changes} {name} layer {j}", state.layer_parts(j))
                    for j in range(made.facts.num_layers)]
    return out


def _same(a: Any, b: Any, where: str) -> None:
    """Equal to the byte: arrays of the same dtype and shape, dicts with the same keys in the same order."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (where, a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (where, list(a), b)
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), (where, len(a), b)
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
    else:
        assert a == b, (where, a, b)


def _spied(monkeypatch: pytest.MonkeyPatch, found: Counter[str]) -> None:
    """Count the splits that were used (not None)."""
    made = LayerVariables.split

    def counted(*args: Any, **kw: Any) -> Any:
        got = made(*args, **kw)
        found["split"] += got is not None
        return got

    monkeypatch.setattr(LayerVariables, "split", counted)


@pytest.mark.parametrize("pieces", [PIECES, Pieces(grid_block=3)], ids=["default", "tiny"])
@pytest.mark.parametrize("source", SOURCES)
def test_parts_from_split_variables_are_the_parts_from_the_union(source: str, pieces: Pieces,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    used: Counter[str] = Counter()
    with monkeypatch.context() as m:
        _spied(m, used)
        fast = _parts(source, pieces)
    with monkeypatch.context() as m:
        m.setattr(LayerVariables, "split", lambda self, j, ops: None)  # the union of the operations' variables
        slow = _parts(source, pieces)
    assert [w for w, _ in fast] == [w for w, _ in slow]
    for (where, a), (_, b) in zip(fast, slow):
        for field in dataclasses.fields(LayerParts):
            _same(getattr(a, field.name), getattr(b, field.name), f"{where} {field.name}")
    assert used["split"] > 0  # the split was used, so the comparison can fail


def test_positions_of_multi_layer_variables_are_their_ranks() -> None:
    """The popcount ranks (and the binary search numpy < 2 takes) are the positions in ``multi_layer_index``."""
    for _, made, _alone in _option_engines("bert-tiny-training.json"):
        engine = made.facts
        split = LayerVariables.of(engine)
        index = engine.boundaries.multi_layer_index
        assert index.size > 64  # several words
        expected = np.arange(index.size)
        np.testing.assert_array_equal(split.positions(index), expected)
        split._ranks = None
        np.testing.assert_array_equal(split.positions(index), expected)
        break
