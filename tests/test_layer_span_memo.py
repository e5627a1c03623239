"""boundaries.counted_layer_span of a second layering from the memo of a first: each the span made directly.

A head placed last or wrapped numbers the named layers one later and groups
the loose operations, with a few of the first and last layers' ones, into
two more layers; the second layering's span is the first one's renumbered.
Random tables and layerings, related that way or not (a layer's rows split,
a row moved back or left out), against the direct span (no memo), and real
and generated profiles' three head placements.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

import popliner.memory.boundaries as boundaries
from popliner.analysis import AnalysisOptions, load_analysis, scenario
from popliner.memory.boundaries import counted_layer_span
from popliner.memory.training import TrainingOptions
from popliner.ops.operations import OperationTable
from popliner.synth import generate_document, preset_spec
from tests.helpers import FIXTURES, analyse_document


def _table(rng: np.random.Generator, rows: int, size: int) -> OperationTable:
    counts = rng.integers(0, 9, rows)
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    idx = rng.integers(0, size, int(ptr[-1])).astype(np.int32)  # repeats within a row too
    return cast(OperationTable, SimpleNamespace(var_ptr=ptr, var_idx=idx, num_variables=size))


def _same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(a, b))


@pytest.mark.parametrize("seed", range(60))
def test_a_second_layering_from_the_memo_is_its_direct_span(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    rows, size, layers = int(rng.integers(1, 60)), int(rng.integers(1, 80)), int(rng.integers(1, 9))
    ops = _table(rng, rows, size)
    first = np.where(rng.random(rows) < 0.8, rng.integers(0, layers, rows), -1)
    counted = rng.random(rows) < 0.9
    # Each named layer later by a non-decreasing renumbering (one later, as regroup_layers does, or any).
    shift = np.cumsum(rng.integers(0, 3, layers)) + int(rng.integers(0, 2))
    second = np.where(first >= 0, shift[np.maximum(first, 0)], -1)
    loose = np.flatnonzero(first < 0)
    second[loose] = rng.choice([-1, 0, int(shift[-1]) + 1], loose.size)
    kind = seed % 4
    named = np.flatnonzero(first >= 0)
    if kind == 1 and named.size:  # one row moved back: the order may not be kept
        row = int(rng.choice(named))
        second[row] = max(int(second[row]) - int(rng.integers(1, 4)), 0)
    elif kind == 2 and named.size:  # one row left out
        second[int(rng.choice(named))] = -1
    elif kind == 3 and named.size:  # the first and last layers split: some of their rows one earlier or later
        for edge, step in ((0, -1), (layers - 1, 1)):
            at = named[(first[named] == edge) & (rng.random(named.size) < 0.5)]
            second[at] = np.maximum(second[at] + step, 0)
    n_second = int(second.max(initial=0)) + 2
    memo: dict[bytes, Any] = {}
    expect_first = counted_layer_span(ops, first, counted, layers, None)
    assert _same(counted_layer_span(ops, first, counted, layers, memo), expect_first)
    expect = counted_layer_span(ops, second, counted, n_second, None)
    every = np.flatnonzero(counted & (second >= 0))
    full: list[bool] = []
    real = boundaries.csr_span

    def watched(*args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        full.append(np.array_equal(args[2], every))
        return real(*args, **kwargs)

    monkeypatch.setattr(boundaries, "csr_span", watched)
    assert _same(counted_layer_span(ops, second, counted, n_second, memo), expect)
    if kind in (0, 3) and (counted & (first >= 0)).any():  # the first layering's rows all kept, in order
        assert not any(full)  # renumbered, not made again
    assert _same(counted_layer_span(ops, first, counted, layers, memo), expect_first)  # the memo's entry untouched


@pytest.mark.parametrize("source", ["bert-tiny-training.json", "gpt2-tiny", "bert-tiny-mlm"])
def test_the_head_placements_of_a_profile_give_the_direct_spans(source: str) -> None:
    if source.endswith(".json"):
        base = load_analysis(str(FIXTURES / source), AnalysisOptions(), use_cache=False).base
    else:
        spec = (preset_spec("gpt2-tiny", "training", layers=3) if source == "gpt2-tiny"
                else preset_spec("bert-tiny", "training", layers=3, head="mlm"))
        base = analyse_document(generate_document(spec), AnalysisOptions()).base
    spans = []
    for placement in ("first", "last", "wrap"):
        facts = scenario(base, TrainingOptions(head_placement=placement)).facts
        counted = facts.model.counted_vars
        direct = counted_layer_span(facts.ops, facts.layer_of_op, counted, facts.num_layers, None)
        assert _same(counted_layer_span(facts.ops, facts.layer_of_op, counted, facts.num_layers, facts.memo), direct)
        spans.append(direct)
    assert not np.array_equal(spans[0][1], spans[1][1])  # the layerings differ: the head's layer is another
