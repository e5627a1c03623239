"""Layer parts made from the layers' variables split at once, against the union of each layer's operations' variables.

Each layer's private and shared variables come from the layer spans of all
variables at once (:mod:`popliner.memory.layer_vars`), not from the union of
its operations' variables. Here every field of every layer's parts, for
every option set (in turn on one base, and each on a base of its own) and
grids of two block sizes, is held against the parts made from the union:
the same arrays, dtypes and keys. The union is this test's oracle
(`_union_split`); popliner makes parts from the split only. (The parts' sums per liveness class, made
once for the grid's rows and the stash columns, were a second path until
issue 35: they saved no whole command 20 %, so the parts are made variable
by variable only.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from popliner.memory.layer_vars import LayerVariables
from popliner.memory.running import PIECES, LayerParts, Pieces
from tests.test_shared_parts import _option_engines, source_grids


def _parts(source: str, pieces: Pieces, union: bool = False) -> list[tuple[str, LayerParts]]:
    """Every layer's parts of every option set's two engines (on the shared base, alone), in a fixed order;
    with ``union``, each layer's variables taken from the union of its operations' variables (the oracle)."""
    out = []
    for changes, shared, alone in _option_engines(source):
        for name, made in (("shared", shared), ("alone", alone)):
            state = made.range_memo.state(made.facts, pieces)
            for j in range(made.facts.num_layers):
                where = f"{source} {changes} {name} layer {j}"
                if union:
                    ops = state.layer_ops[j]
                    out.append((where, LayerParts.of(made.facts, ops, state.share, _union_split(made.facts, ops))))
                else:
                    out.append((where, state.layer_parts(j)))
    return out


def _union_split(facts: Any, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A layer's (private, shared) counted variables and the shared ones' positions, from the union of its
    operations' counted variables: the plain statement of what :meth:`LayerVariables.split` finds at once.
    The private ones in int64, the index type (the split gives them so)."""
    var = facts.model.counted_variables(ops)
    multi = facts.boundaries.multi_layer_var[var]
    shared = var[multi]
    return var[~multi].astype(np.int64), shared, np.searchsorted(facts.boundaries.multi_layer_index, shared)


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


# Each source is long on the tiny grid (many blocks, about 5-7 s); two run in the main suite.
@pytest.mark.parametrize(("source", "pieces"), source_grids(
    PIECES, Pieces(grid_block=3), ("resnet-small-training.json.gz", "gpt2-tiny", "bert-tiny-mlm")))
def test_parts_from_split_variables_are_the_parts_from_the_union(source: str, pieces: Pieces) -> None:
    fast = _parts(source, pieces)
    slow = _parts(source, pieces, union=True)
    assert [w for w, _ in fast] == [w for w, _ in slow] and fast
    for (where, a), (_, b) in zip(fast, slow):
        for field in dataclasses.fields(LayerParts):
            _same(getattr(a, field.name), getattr(b, field.name), f"{where} {field.name}")


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
