"""What a cached load does not redo: ``programs.var_idx`` stays packed until read (popliner.profile.lazycol), the
whole program's figures come from the entry; both checked all the same."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from popliner.analysis import load_analysis
from popliner.memory import model as memory_model
from popliner.memory.model import whole_program_memory
from popliner.ops.operations import derive_operations
from popliner.plan import SplitRequest, plan_split
from popliner.profile import load_profile
from popliner.profile.cache import trust as cachefs
from popliner.profile.cache.archive import column_range, pack, unpack
from popliner.profile.lazycol import Deferred
from tests.helpers import FIXTURES, rewrite_cache_entry

BASE = FIXTURES / "bert-base-training.json.gz"
KEY = "p.programs.var_idx."


def deferred(obj: object, name: str) -> Deferred | None:
    """The field's value as stored while it is still packed, else None (reading the field would unpack it)."""
    value = vars(obj)[name]
    return value if isinstance(value, Deferred) else None


@pytest.fixture()
def entry(tmp_path, monkeypatch):
    """The cache entry of BERT-Base training (its program variables are long enough to be packed)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(cache))
    cachefs._REFUSED.clear()
    load_analysis(str(BASE))
    (found,) = cache.glob("*.npz")
    return found


def test_a_cached_load_leaves_ids_and_name_offsets_packed_through_a_training_solve(entry):
    # The engine's training view replaces the variables' bytes (off-chip state): the copy keeps them packed.
    cold = load_analysis(str(BASE), use_cache=False).profile.variables
    a = load_analysis(str(BASE))
    assert a.from_cache
    plan = plan_split(a, SplitRequest(num_ipus=4, solver="greedy", optimizer_state="off-chip"))
    assert plan.split.stages
    for v in (a.profile.variables, plan.analysis.facts.profile.variables):
        ids, ptr = deferred(v, "ids"), deferred(v.names, "ptr")
        assert ids is not None and ptr is not None and ids.size == v.count == cold.count
        assert ptr.size == cold.count + 1
    v = plan.analysis.facts.profile.variables
    assert [v.name(i) for i in (0, 7, cold.count - 1)] == [cold.name(i) for i in (0, 7, cold.count - 1)]
    assert np.array_equal(v.ids, cold.ids) and v.ids.dtype == cold.ids.dtype
    assert np.array_equal(v.names.ptr, cold.names.ptr) and deferred(v, "ids") is None


def test_a_cached_load_leaves_program_variables_packed_until_read(entry):
    cold = load_analysis(str(BASE), use_cache=False).profile.programs
    a = load_analysis(str(BASE))
    assert a.from_cache
    a.layer_names, a.whole_memory  # noqa: B018 - what a cached run reads does not unpack it
    packed = deferred(a.profile.programs, "var_idx")
    assert packed is not None and packed.size == len(cold.var_idx) > 4096
    assert (packed.lo, packed.hi) == (int(cold.var_idx.min()), int(cold.var_idx.max()))
    got = a.profile.programs.var_idx  # read: unpacked, the same array, then kept
    assert got.dtype == cold.var_idx.dtype and np.array_equal(got, cold.var_idx)
    assert deferred(a.profile.programs, "var_idx") is None and a.profile.programs.var_idx is got


def _tamper(entry: Path, edit) -> None:
    """Unpack the column, let ``edit`` change it, pack it back with a new digest (as a forger would)."""

    def change(arrays, meta):
        arrays[KEY], meta["codecs"][KEY] = pack(edit(unpack(arrays[KEY], meta["codecs"][KEY])))

    rewrite_cache_entry(entry, change, resign=True)


def _rebuilt(caplog):
    """Load again: the entry is refused (rebuilt from the profile); the analysis and the one warning line."""
    with caplog.at_level(logging.WARNING):
        a = load_analysis(str(BASE))
    assert not a.from_cache
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return a, line


def test_packed_ids_of_another_length_are_caught(entry, caplog):
    key = "p.variables.ids."

    def change(arrays, meta):
        arrays[key], meta["codecs"][key] = pack(unpack(arrays[key], meta["codecs"][key])[:-1])

    rewrite_cache_entry(entry, change, resign=True)
    _, line = _rebuilt(caplog)
    assert "cannot be used" in line and "variables.ids has" in line


def _past_the_end(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b[len(b) // 2] = b.max() + 10**6  # no such variable
    return b


@pytest.mark.parametrize(("edit", "words"), [
    (_past_the_end, "program variables holds values outside"),
    (lambda a: a[:-1], "program variables pointers"),  # one entry short of its pointers
    (lambda a: a - (a.max() + 1), "program variables holds values outside"),  # negative
    (lambda a: a > 0, "program variables is not an integer array"),  # flags, packed as such
])
def test_a_packed_column_with_a_new_digest_is_still_checked(entry, caplog, edit, words):
    cold = load_analysis(str(BASE), use_cache=False)
    _tamper(entry, edit)
    a, line = _rebuilt(caplog)
    assert "cannot be used" in line and words in line
    assert np.array_equal(a.profile.programs.var_idx, cold.profile.programs.var_idx)
    assert load_analysis(str(BASE)).from_cache  # rebuilt


@pytest.mark.parametrize("values", [
    np.arange(5000, dtype=np.int64) * 3 - 7,  # sorted: packed as differences
    np.random.default_rng(0).integers(-(2**40), 2**40, 70_000),  # wide, unsorted
    np.random.default_rng(1).integers(0, 200, 3 * (1 << 20) + 5).astype(np.int32),  # several pieces
    np.zeros(0, np.int64),
])
def test_column_range_is_the_unpacked_arrays(values):
    data, codec = pack(values)
    lo, hi = (int(values.min()), int(values.max())) if values.size else (0, 0)
    assert column_range(data, codec) == (len(values), lo, hi)
    assert np.array_equal(unpack(data, codec), values)


@pytest.mark.parametrize("name", ["bert-base-training.json.gz", "efficientnet-small-inference.json.gz", "tiny.json"])
def test_the_whole_programs_figures_come_from_the_cache(tmp_path, monkeypatch, name):
    # Five rows, and six with the compiler's other categories (EfficientNet): the direct computation's.
    path = str(BASE.parent / name)
    expected = whole_program_memory(load_profile(path), derive_operations(load_profile(path))).per_tile
    cold = load_analysis(path, cache_dir=str(tmp_path))
    assert np.array_equal(cold.whole_memory.per_tile, expected)

    def not_again(*args):
        raise AssertionError("computed again on a cached load")

    monkeypatch.setattr(memory_model, "whole_program_memory", not_again)
    hot = load_analysis(path, cache_dir=str(tmp_path))
    assert hot.from_cache
    got = hot.whole_memory.per_tile
    assert got.dtype == expected.dtype and got.shape == expected.shape and np.array_equal(got, expected)


@pytest.mark.parametrize(("edit", "words"), [
    (lambda w: w[:, :-1], "5 rows of int64 per tile"),  # a tile short
    (lambda w: w[:4], "5 rows of int64 per tile"),  # a component short
    (lambda w: w.astype(np.int32), "5 rows of int64 per tile"),
])
def test_tampered_whole_figures_are_caught_even_with_a_new_digest(entry, caplog, edit, words):
    key = "d.whole_per_tile."

    def change(arrays, meta):
        arrays[key] = np.ascontiguousarray(edit(arrays[key]))

    rewrite_cache_entry(entry, change, resign=True)
    _, line = _rebuilt(caplog)
    assert "cannot be used" in line and words in line


def test_debug_context_parents_in_a_loop_are_caught_even_with_a_new_digest(entry, caplog):
    key = "p.contexts.parent."

    def change(arrays, meta):
        packed = key in meta["codecs"]
        parent = (unpack(arrays[key], meta["codecs"][key]) if packed else arrays[key]).copy()
        parent[0], parent[1] = 1, 0  # two contexts, each the other's parent
        if packed:
            arrays[key], meta["codecs"][key] = pack(parent)
        else:
            arrays[key] = parent

    rewrite_cache_entry(entry, change, resign=True)
    _, line = _rebuilt(caplog)
    assert "cannot be used" in line and "debug-context parent links form a cycle" in line
