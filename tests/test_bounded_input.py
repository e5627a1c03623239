"""Issue 22 points 3 and 6: a gzip bomb is refused while it inflates, and sums that cannot fit in int64 are refused.

The bomb is real: one gzip member of 64 MiB of zeros (about 64 KB), repeated,
is a valid multi-member gzip file that inflates to gigabytes.
"""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.errors import ProfileFormatError
from popliner.profile import gunzip
from popliner.profile.loader import load_profile
from tests.helpers import FIXTURES

REPO = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
MIB = 1 << 20


def _bomb(path: Path, members: int) -> int:
    """A gzip file of ``members`` members of 64 MiB of zeros each; returns the inflated size."""
    member = gzip.compress(bytes(64 * MIB), compresslevel=9, mtime=0)
    path.write_bytes(member * members)
    return 64 * MIB * members


def test_bomb_refused_within_bounded_memory_and_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = tmp_path / "bomb.json.gz"
    inflated = _bomb(bomb, 64)  # 4 GiB inflated
    assert bomb.stat().st_size < inflated // 500
    monkeypatch.setenv("POPLINER_MAX_PROFILE_BYTES", str(32 * MIB))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ProfileFormatError) as got:
            load_profile(bomb)
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(got.value)
    assert message.startswith(f"{bomb}: decompressed profile reached ")
    reached = int(message.split("reached ")[1].split(" bytes")[0].replace(",", ""))
    assert 32 * MIB < reached <= 32 * MIB + gunzip.CHUNK  # stopped at the first piece past the limit
    assert f"over the limit of {32 * MIB:,} bytes; if it is genuine, raise POPLINER_MAX_PROFILE_BYTES" in message
    # What was held: the limit's worth of text and a piece or two, not the 4 GiB.
    assert peak < 32 * MIB + 3 * gunzip.CHUNK + bomb.stat().st_size
    assert seconds < 10  # a second or less on a quiet machine; generous for a loaded one


def test_ratio_limit_refuses_a_bomb_under_the_absolute_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, 4)
    size = bomb.stat().st_size
    monkeypatch.setenv("POPLINER_MAX_GZIP_RATIO", "50")
    with pytest.raises(ProfileFormatError) as got:  # the default floor (512 MiB) would take a while here
        gunzip.decompress(bomb.read_bytes(), str(bomb), ratio_floor=8 * MIB)
    cap = max(8 * MIB, 50 * size)
    assert f"over the limit of {cap:,} bytes; if it is genuine, raise POPLINER_MAX_GZIP_RATIO (now 50 times the " \
           f"{size:,} compressed bytes)" in str(got.value)


def test_real_profiles_are_far_below_the_ratio() -> None:
    for path in sorted(FIXTURES.glob("*.gz")):
        raw = path.read_bytes()
        assert len(gzip.decompress(raw)) < gunzip.max_gzip_ratio() * len(raw) / 5, path.name


def test_bomb_through_the_cli_is_one_line_exit_2(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, 8)
    result = CliRunner().invoke(cli, [str(bomb), "--no-cache"], env={"POPLINER_MAX_PROFILE_BYTES": str(16 * MIB)})
    assert result.exit_code == 2
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("popliner: error:")]
    assert len(errors) == 1 and "POPLINER_MAX_PROFILE_BYTES" in errors[0] and str(bomb) in errors[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_multi_member_gzip_and_zero_padding_load(tmp_path: Path) -> None:
    raw = TINY.read_bytes()
    half = len(raw) // 2
    path = tmp_path / "two.json.gz"
    path.write_bytes(gzip.compress(raw[:half], mtime=0) + gzip.compress(raw[half:], mtime=0) + bytes(8))
    assert load_profile(path).programs.count == load_profile(TINY).programs.count


def _overflowing(tmp_path: Path) -> Path:
    """tiny.json with one vertex type of 2**40 bytes run 2**40 times on every tile: 2**82 bytes per program."""
    doc = json.loads(TINY.read_text(encoding="utf-8"))
    vt = doc["programs"][2]["vertices"][0][0]
    doc["vertexTypes"][vt]["size"] = 2**40
    doc["programs"][2]["vertices"][0][1] = [2**40] * doc["target"]["tilesPerIpu"]
    path = tmp_path / "overflow.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_products_beyond_int64_are_refused(tmp_path: Path) -> None:
    # Before: exit 0, and the vertex state of layer 0 came out as 8,796,093,022,328 (2**82 wrapped round).
    path = _overflowing(tmp_path)
    with pytest.raises(ProfileFormatError) as got:
        load_profile(path)
    assert got.value.where == "programs[2].vertices"
    # 2**40 instances x 2**40 bytes x 4 tiles = 2**82 bytes
    assert got.value.problem.startswith(f"vertex state (instances per tile x vertexTypes size) sums to {2.0**82:.3g} "
                                        "over the model")
    result = CliRunner().invoke(cli, ["-q", str(path), "--no-cache"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "re-export the profile" in result.stderr


def test_large_but_summable_figures_still_load(tmp_path: Path) -> None:
    doc = json.loads(TINY.read_text(encoding="utf-8"))
    vt = doc["programs"][2]["vertices"][0][0]
    doc["vertexTypes"][vt]["size"] = 2**40
    doc["programs"][2]["vertices"][0][1] = [2**10] * doc["target"]["tilesPerIpu"]  # 2**52 in all: fits
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert int(load_profile(path).vertex_types.size[vt]) == 2**40
