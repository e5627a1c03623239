"""The cache trusts nothing in its folder (issue 22, point 1).

Planted links, FIFOs and devices under an entry's name are never opened or
followed, a folder others can write is not used, and an entry whose arrays
were changed is rebuilt with one warning line instead of giving other
figures or crashing.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from popliner.analysis import load_analysis
from popliner.profile.cache import trust as cachefs
from tests.helpers import FIXTURES, rewrite_cache_entry

TINY = FIXTURES / "tiny.json"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    """(profile path, cache folder, the entry's path) with a fresh 0700 cache folder."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(cache))
    cachefs._REFUSED.clear()
    target = tmp_path / "model.json"
    shutil.copy(TINY, target)
    load_analysis(str(target))
    (entry,) = cache.glob("*.npz")
    return target, cache, entry


def figures(a):
    return a.model.stage(np.arange(a.ops.count)).per_tile.tolist(), a.ops.names, a.layer_names


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_folder_is_created_private(setup):
    _, cache, entry = setup
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600
    assert [p.name for p in cache.iterdir()] == [entry.name]  # no temporary file left


def test_planted_symlink_is_replaced_and_its_target_untouched(setup, tmp_path, caplog):
    profile, cache, entry = setup
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    entry.unlink()
    entry.symlink_to(victim)
    a = load_analysis(str(profile))
    assert not a.from_cache
    assert victim.read_text() == "precious\n"
    assert not entry.is_symlink() and entry.is_file()  # the link itself was replaced by a new entry
    (line,) = [w for w in warnings(caplog) if "symbolic link" in w]
    assert str(entry) in line and "\n" not in line
    assert load_analysis(str(profile)).from_cache


def test_symlink_to_dev_null_is_ignored(setup):
    profile, _, entry = setup
    entry.unlink()
    entry.symlink_to("/dev/null")
    cold = load_analysis(str(profile))
    assert not cold.from_cache and entry.is_file() and not entry.is_symlink()
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_fifo_does_not_hang(setup, tmp_path):
    profile, cache, entry = setup
    entry.unlink()
    os.mkfifo(entry)
    env = {**os.environ, "POPLINER_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "popliner", "-q", str(profile), "-o", str(tmp_path / "t.csv")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert entry.is_file() and not stat.S_ISFIFO(os.lstat(entry).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
def test_device_entry_is_ignored(setup, caplog):
    profile, _, entry = setup
    entry.unlink()
    os.mknod(entry, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # a second /dev/null
    a = load_analysis(str(profile))
    assert not a.from_cache and entry.is_file()
    assert any("a device" in w for w in warnings(caplog))


def test_tampered_bytes_are_caught_by_the_digest(setup, caplog):
    profile, _, entry = setup
    cold = figures(load_analysis(str(profile), use_cache=False))

    def change(arrays, meta):
        arrays["p.variables.bytes."] = arrays["p.variables.bytes."] // 10  # same metadata, other sizes

    rewrite_cache_entry(entry, change)
    a = load_analysis(str(profile))
    assert not a.from_cache and figures(a) == cold
    (line,) = [w for w in warnings(caplog) if "cannot be used" in w]
    assert "digest" in line and str(entry) in line
    assert load_analysis(str(profile)).from_cache  # rebuilt


@pytest.mark.parametrize("column, value", [("p.variables.tile.", 4), ("p.variables.tile.", -1),
                                           ("p.variables.klass.", 99), ("p.steps.", 14),
                                           ("d.ops.op_of_step.", 8), ("p.contexts.parent.", 10)])
def test_tampered_indices_are_caught_even_with_a_new_digest(setup, caplog, column, value):
    profile, _, entry = setup
    cold = figures(load_analysis(str(profile), use_cache=False))

    def change(arrays, meta):
        a = arrays[column].copy()
        a[0] = value
        arrays[column] = a

    rewrite_cache_entry(entry, change, resign=True)
    a = load_analysis(str(profile))
    assert not a.from_cache and figures(a) == cold
    assert any("cannot be used" in w for w in warnings(caplog))


def test_parent_cycle_is_caught(setup, caplog):
    profile, _, entry = setup

    def change(arrays, meta):
        parent = arrays["p.contexts.parent."].copy()
        parent[0], parent[1] = 1, 0  # contexts 0 and 1 each other's parent: a walk up would never end
        arrays["p.contexts.parent."] = parent

    rewrite_cache_entry(entry, change, resign=True)
    assert not load_analysis(str(profile)).from_cache
    assert any("cycle" in w for w in warnings(caplog))


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_folder_others_can_write_is_not_used(setup, caplog, mode):
    profile, cache, entry = setup
    os.chmod(cache, mode)
    before = entry.stat().st_mtime_ns
    a = load_analysis(str(profile))
    assert not a.from_cache
    assert entry.stat().st_mtime_ns == before  # neither read nor written
    (line,) = [w for w in warnings(caplog) if "cache folder" in w]
    assert f"{mode:04o}" in line and "running without the cache" in line
    load_analysis(str(profile))
    assert len([w for w in warnings(caplog) if "cache folder" in w]) == 1  # once per run


def test_folder_inside_a_folder_others_can_write(tmp_path, monkeypatch, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # no sticky bit: anyone may rename our folder away and put theirs instead
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(shared / "cache"))
    cachefs._REFUSED.clear()
    assert not load_analysis(str(TINY)).from_cache
    assert not load_analysis(str(TINY)).from_cache
    assert any(f"inside {shared}" in w for w in warnings(caplog))
    os.chmod(shared, 0o1777)  # sticky, as /tmp: fine
    load_analysis(str(TINY))
    assert load_analysis(str(TINY)).from_cache


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_folder_of_another_user_is_not_used(setup, caplog):
    profile, cache, _ = setup
    os.chown(cache, 12345, -1)
    assert not load_analysis(str(profile)).from_cache
    (line,) = [w for w in warnings(caplog) if "cache folder" in w]
    assert "owned by user 12345" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_entry_of_another_user_is_not_read(setup, caplog):
    profile, _, entry = setup
    os.chown(entry, 12345, -1)
    assert not load_analysis(str(profile)).from_cache
    assert any("owned by user 12345" in w for w in warnings(caplog))


def test_compressed_members_are_not_read(setup):
    profile, _, entry = setup
    with np.load(entry, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    np.savez_compressed(entry, **arrays)
    with zipfile.ZipFile(entry) as zf:
        assert zf.infolist()[0].compress_type == zipfile.ZIP_DEFLATED
    assert not load_analysis(str(profile)).from_cache


def test_free_form_data_nested_too_deep_is_not_cached(tmp_path, caplog):
    from tests.hostile import deep_source, write_json

    path = write_json(deep_source(990), tmp_path / "deep.json")
    a = load_analysis(str(path))
    assert a.ops.count == 2 and not a.from_cache
    assert any("not caching" in w for w in warnings(caplog))


# Issue 39, point 4: the digest covers the metadata too, and nothing is built from an entry before it matches.

BERT_TINY = FIXTURES / "bert-tiny-training.json"


def _target(meta):
    return meta["profile"]["fields"]["target"]["fields"]


def test_a_doubled_budget_in_the_metadata_is_caught(setup, caplog):
    # The repro: doubling the stored bytes_per_tile turned an INFEASIBLE solve into OPTIMAL.
    profile, _, entry = setup
    cold = load_analysis(str(profile), use_cache=False)
    rewrite_cache_entry(entry, lambda arrays, meta: _target(meta).update(bytes_per_tile=2 * 638976))
    a = load_analysis(str(profile))
    assert not a.from_cache and a.profile.target == cold.profile.target and figures(a) == figures(cold)
    assert [w for w in warnings(caplog) if "cannot be used" in w and "digest" in w]


def test_renamed_contexts_in_the_metadata_are_caught(setup, caplog):
    profile, _, entry = setup
    cold = load_analysis(str(profile), use_cache=False)

    def rename(arrays, meta):
        names = meta["profile"]["fields"]["contexts"]["fields"]["layer"]
        names["__strs__"] = ["poptorch" if n else n for n in names["__strs__"]]

    rewrite_cache_entry(entry, rename)
    a = load_analysis(str(profile))
    assert not a.from_cache and figures(a) == figures(cold) and a.framework == cold.framework
    assert [w for w in warnings(caplog) if "cannot be used" in w]


@pytest.mark.parametrize("resign", [False, True])
def test_a_huge_codec_shape_allocates_nothing(tmp_path, monkeypatch, caplog, resign):
    # The repro: a codec shape of 2^40 items made every later run of the profile end in "out of memory",
    # as the column was allocated before the digest was compared. Unsigned, the digest catches it; signed
    # again (a forger), the shape is more than its deflated bytes can give, and the entry is rebuilt.
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    cachefs._REFUSED.clear()
    profile = tmp_path / "bert.json"
    shutil.copy(BERT_TINY, profile)
    cold = figures(load_analysis(str(profile)))
    (entry,) = (tmp_path / "cache").glob("*.npz")

    def grow(arrays, meta):
        assert meta["codecs"]  # the profile has packed columns
        for codec in meta["codecs"].values():
            codec["shape"] = [2**40]

    rewrite_cache_entry(entry, grow, resign=resign)
    for _ in range(2):  # and the run after it reads the rebuilt entry
        assert figures(load_analysis(str(profile))) == cold
    assert load_analysis(str(profile)).from_cache
    assert bool(warnings(caplog)) != resign  # the digest's warning; a shape past its bytes is a quiet miss


# 1e-300 (too slow a clock, as 5e-324 is, but a normal float) in the slow step (suite time: three processes each).
@pytest.mark.parametrize("clock", [*(pytest.param(c, marks=pytest.mark.slow) for c in (1e-300, 5e-324)), 1e13])
def test_an_entry_written_before_clocks_were_checked_is_not_trusted(tmp_path, clock):
    """A cache entry of a profile whose clock the loader now refuses (an older popliner wrote it, with a
    digest that covers it): the entry is not used, and the run ends as a cold one does, in one line and exit 2
    (before: the entry's clock was believed, and its times were infinite)."""
    import hashlib
    import json

    from popliner.analysis import AnalysisOptions
    from popliner.profile.cache import cache_path

    cache = tmp_path / "cache"
    env = {**os.environ, "POPLINER_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    good = tmp_path / "good.json"
    shutil.copy(TINY, good)
    doc = json.loads(TINY.read_text())
    doc["target"]["clockFrequency"] = clock
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    sha = hashlib.sha256(bad.read_bytes()).hexdigest()
    cold = subprocess.run([sys.executable, "-m", "popliner", str(bad), "--solve", "--num-ipus", "2"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert cold.returncode == 2 and "Hz is no IPU clock" in cold.stderr
    # The entry an older popliner wrote for bad.json: the good profile's, under bad.json's digest and clock.
    subprocess.run([sys.executable, "-m", "popliner", str(good), "-q"], env=env, check=True, capture_output=True,
                   timeout=120)
    (entry,) = cache.glob("*.npz")

    def older(arrays, meta):
        meta["sha256"] = sha
        _target(meta)["clock_hz"] = clock

    rewrite_cache_entry(entry, older, resign=True)
    entry.rename(cache_path(sha, AnalysisOptions().cache_key(), cache))
    r = subprocess.run([sys.executable, "-m", "popliner", str(bad), "--solve", "--num-ipus", "2"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if line.startswith("popliner: error:")]
    assert errors == [line for line in cold.stderr.splitlines() if line.startswith("popliner: error:")]
    assert "outside the 1000 to 1e+12 Hz the loader accepts" in r.stderr  # the entry's warning
