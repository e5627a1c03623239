"""What a cached load does not redo: the whole program's figures come from the entry; it and the program variables
(which only deriving operations reads) are checked all the same."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from popliner.analysis import load_analysis
from popliner.memory import model as memory_model
from popliner.memory.model import whole_program_memory
from popliner.ops.operations import derive_operations
from popliner.profile import load_profile
from popliner.profile.cache import trust as cachefs
from popliner.profile.cache.archive import pack, unpack
from tests.helpers import FIXTURES, rewrite_cache_entry

BASE = FIXTURES / "bert-base-training.json.gz"
KEY = "p.programs.var_idx."


@pytest.fixture()
def entry(tmp_path, monkeypatch):
    """The cache entry of BERT-Base training (its program variables are long enough to be packed)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(cache))
    cachefs._REFUSED.clear()
    load_analysis(str(BASE))
    (found,) = cache.glob("*.npz")
    return found


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


def test_ids_of_another_length_are_caught(entry, caplog):
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
])
def test_program_variables_with_a_new_digest_are_still_checked(entry, caplog, edit, words):
    cold = load_analysis(str(BASE), use_cache=False)
    _tamper(entry, edit)
    a, line = _rebuilt(caplog)
    assert "cannot be used" in line and words in line
    assert np.array_equal(a.profile.programs.var_idx, cold.profile.programs.var_idx)
    assert load_analysis(str(BASE)).from_cache  # rebuilt


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
