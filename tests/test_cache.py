"""The derived-data cache: hit, stale, corrupt, bypassed."""

from __future__ import annotations

import dataclasses
import logging
import shutil

import numpy as np
import pytest

from popliner.analysis import load_analysis
from popliner.ops.layers import LayerAssignment
from popliner.ops.operations import OperationTable
from popliner.profile import cache as cache_mod
from popliner.profile import load_profile
from popliner.profile.cache import archive as cachepack
from tests.helpers import FIXTURES, rewrite_cache_entry

TINY = FIXTURES / "tiny.json"


@pytest.fixture()
def profile(tmp_path, monkeypatch):
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "model.json"
    shutil.copy(TINY, target)
    return target


def cache_files(tmp_path):
    return sorted((tmp_path / "cache").glob("*.npz"))


def figures(a):
    return a.model.stage(np.arange(a.ops.count)).per_tile.tolist(), a.ops.names, a.layer_names


def test_second_run_hits_the_cache(profile, tmp_path):
    cold = load_analysis(str(profile))
    assert not cold.from_cache
    assert len(cache_files(tmp_path)) == 1
    warm = load_analysis(str(profile))
    assert warm.from_cache
    assert figures(warm) == figures(cold)
    assert warm.profile.sha256 == cold.profile.sha256


def test_same_content_under_another_name_reuses_cache_and_reports_new_name(profile, tmp_path):
    load_analysis(str(profile))
    other = tmp_path / "renamed.json"
    shutil.copy(profile, other)
    warm = load_analysis(str(other))
    assert warm.from_cache and warm.profile.path == str(other)


def test_changed_content_is_a_new_key(profile, tmp_path):
    load_analysis(str(profile))
    profile.write_text(profile.read_text().replace('"bytesPerTile": 1000', '"bytesPerTile": 2000'))
    again = load_analysis(str(profile))
    assert not again.from_cache
    assert again.profile.target.bytes_per_tile == 2000
    assert len(cache_files(tmp_path)) == 2


def test_corrupt_cache_is_rebuilt_silently(profile, tmp_path):
    cold = load_analysis(str(profile))
    (path,) = cache_files(tmp_path)
    path.write_bytes(b"PK\x03\x04 not really a zip")
    rebuilt = load_analysis(str(profile))
    assert not rebuilt.from_cache
    assert figures(rebuilt) == figures(cold)
    assert load_analysis(str(profile)).from_cache  # and written back


def test_truncated_cache_is_rebuilt(profile, tmp_path):
    load_analysis(str(profile))
    (path,) = cache_files(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert not load_analysis(str(profile)).from_cache


def test_stale_version_is_rebuilt(profile, tmp_path, caplog):
    load_analysis(str(profile))
    (path,) = cache_files(tmp_path)
    # A file at the same name written by another version (its digest whole): its metadata disagrees.
    rewrite_cache_entry(path, lambda arrays, meta: meta.update(version="0.0.0-other"), resign=True)
    with caplog.at_level(logging.DEBUG, logger="popliner.profile.cache.store"):
        load_analysis(str(profile))
    assert any("is stale; rebuilding" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_no_cache_neither_reads_nor_writes(profile, tmp_path):
    a = load_analysis(str(profile), use_cache=False)
    assert not a.from_cache
    assert cache_files(tmp_path) == []


def test_cache_holds_no_pickles(profile, tmp_path):
    load_analysis(str(profile))
    (path,) = cache_files(tmp_path)
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            assert data[key].dtype != object


def test_unwritable_cache_dir_is_not_an_error(profile, tmp_path, monkeypatch):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(blocker / "cache"))
    assert not load_analysis(str(profile)).from_cache


@dataclasses.dataclass(frozen=True)
class Derived:
    """Some caller's data built from a profile: the cache stores it without knowing its type."""

    names: tuple[str, ...]
    counts: np.ndarray
    total: int


def test_cache_stores_any_derived_dataclass(tmp_path):
    path = tmp_path / "entry.npz"
    counts = np.arange(10_000, dtype=np.int64) * 3  # long enough to be narrowed and deflated
    with cache_mod.PendingStore(load_profile(TINY)) as pending:
        pending.finish(path, "s" * 64, "key", Derived(("a", "b"), counts, 7))
    hit = cache_mod.load_cached(path, "s" * 64, "key", "shown.json", Derived, Derived)
    assert hit is not None and hit.layers is None
    profile, derived = hit.profile, hit.derived
    assert profile.path == "shown.json"
    assert derived.names == ("a", "b") and derived.total == 7
    assert derived.counts.tolist() == counts.tolist()
    # Asked for another type than the one stored: a miss, rebuilt by the caller.
    assert cache_mod.load_cached(path, "s" * 64, "key", "shown.json", OperationTable, LayerAssignment) is None


def test_cache_format_names_the_derived_part(profile, tmp_path):
    import json

    from isal import isal_zlib

    load_analysis(str(profile))
    (path,) = cache_files(tmp_path)
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(isal_zlib.decompress(data["__meta__"]).decode("utf-8"))
    assert meta["format"] == cache_mod.CACHE_FORMAT == 8
    assert meta["derived"]["__class__"] == "CachedDerived"
    assert meta["derived"]["fields"]["ops"]["__class__"] == "OperationTable"
    assert meta["layers"][1]["__class__"] == "LayerAssignment"
    assert "ops" not in meta

def _layer_logs(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "popliner.ops.layers"]


def test_layers_come_from_the_cache_only_under_the_same_layer_options(profile, tmp_path, caplog, monkeypatch):
    import logging

    from popliner.analysis import AnalysisOptions
    from popliner.ops import layers as layers_mod

    caplog.set_level(logging.INFO)
    cold = load_analysis(str(profile))
    cold_logs = _layer_logs(caplog)
    assert cold_logs  # how the layers were chosen is said
    caplog.clear()
    chosen = []
    monkeypatch.setattr(layers_mod, "assign_layers", lambda *a, **k: chosen.append(1) or pytest.fail("chose again"))
    warm = load_analysis(str(profile))
    assert warm.from_cache and not chosen
    assert _layer_logs(caplog) == cold_logs  # said the same way
    assert warm.layers.layer_of_op.tolist() == cold.layers.layer_of_op.tolist()
    assert (warm.layers.names, warm.layers.note, warm.layers.rule) == (
        cold.layers.names, cold.layers.note, cold.layers.rule)
    monkeypatch.undo()
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    # Other layer options: the same cache file, the layers chosen again for them.
    natural = AnalysisOptions(layer_order="natural", layer_name_regex=r"layer(\d)")
    again = load_analysis(str(profile), natural)
    fresh = load_analysis(str(profile), natural, use_cache=False)
    assert again.from_cache and len(cache_files(tmp_path)) == 1
    assert again.layers.names == fresh.layers.names and again.layers.rule == "regex"
    assert again.layers.layer_of_op.tolist() == fresh.layers.layer_of_op.tolist()


def test_recompute_flags_survive_the_cache(profile, tmp_path):
    import json

    doc = json.loads(profile.read_text())
    names = doc["variables"]["name"]
    names[0], names[1] = "act__re", "act__re_not"
    profile.write_text(json.dumps(doc))
    want = [i == 0 for i in range(len(names))]  # by hand: only "__re" at the end counts here
    cold = load_analysis(str(profile))
    warm = load_analysis(str(profile))
    assert warm.from_cache and not cold.from_cache
    for got in (cold.profile.variables.recompute_tensor, warm.profile.variables.recompute_tensor):
        assert got.dtype == np.bool_ and got.tolist() == want


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.bool_])
def test_packed_columns_come_back_exactly(dtype):
    # Small pieces, so that every column spans several (the running total carries across them).
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype) if dtype != np.bool_ else None
    cases = []
    if info is None:
        cases.append(rng.random(5000) < 0.01)
    else:
        cases.append(rng.integers(info.min, info.max, 5000, dtype=dtype, endpoint=True))  # plain: differences wider
        cases.append(np.sort(rng.integers(info.min, info.max, 5000, dtype=dtype, endpoint=True)))  # sorted: deltas
        cases.append(np.asfortranarray(rng.integers(0, 100, (1000, 5), dtype=dtype)))
    seen = set()
    for a in cases:
        data, codec = cachepack.pack(a, piece=1000)
        seen.add(codec["delta"])
        back = cachepack.unpack(data, codec, piece=1000)
        assert back.dtype == a.dtype and back.shape == a.shape and np.array_equal(back, a)
    assert seen == ({False} if info is None else {False, True})  # both ways of storing were tried
    extremes = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max] * 3000, np.int64)  # differences wrap
    data, codec = cachepack.pack(extremes)
    assert np.array_equal(cachepack.unpack(data, codec), extremes)
