"""The command's allocator settings: applied by the entry point in its own process, never on import."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from popliner import allocator

GLIBC = hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_thresholds_are_taken_in_a_fresh_process() -> None:
    # malloc_info reports the settings only indirectly, so ask glibc itself: mallopt returns 0 for a
    # parameter it refuses, and keep_freed_memory says whether both were taken.
    code = "from popliner.allocator import keep_freed_memory as k; print(k())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_importing_the_cli_changes_nothing() -> None:
    # No work at import: the entry point applies it, a library user's process keeps its own settings.
    # A stand-in module counts the calls; the CLI is imported after it is in place.
    code = ("import sys, types, popliner\n"
            "calls = []\n"
            "stub = types.ModuleType('popliner.allocator')\n"
            "stub.keep_freed_memory = lambda: calls.append(1) or True\n"
            "stub.no_huge_page_advice = lambda: calls.append(2) or True\n"
            "sys.modules['popliner.allocator'] = stub\n"
            "import popliner.cli, popliner.cli.analyse\n"
            "print(len(calls))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"


def test_the_entry_point_applies_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import popliner.cli as cli

    calls: list[int] = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(cli, "no_huge_page_advice", lambda: calls.append(2) or True)
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and calls == [1, 2]


def test_huge_page_advice_is_off_after_the_call_and_untouched_by_imports() -> None:
    # numpy's setter returns the setting it replaces: read it after importing the CLI (numpy's own
    # default, which the environment may set), then after the call (off).
    code = ("from numpy._core import multiarray as m\n"
            "import popliner.cli, popliner.cli.analyse\n"
            "from popliner.allocator import no_huge_page_advice\n"
            "before = m._set_madvise_hugepage(True)\n"
            "print(before, no_huge_page_advice(), m._set_madvise_hugepage(False))")
    default = subprocess.run([sys.executable, "-c", "from numpy._core import multiarray as m; "
                              "print(m._set_madvise_hugepage(True))"], capture_output=True, text=True,
                             check=True).stdout.strip()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [default, "True", "False"]


def test_thresholds_cover_a_4x_array() -> None:
    # The largest per-variable column of a 4x profile (14.7 M int64) must come from the heap.
    assert allocator.MMAP_THRESHOLD > 14_700_000 * 8
    assert allocator.MMAP_THRESHOLD < 2**31 and allocator.TRIM_THRESHOLD < 2**31  # mallopt takes an int


def test_trim_threshold_is_the_largest_mallopt_takes() -> None:
    # The 10x solves free and allocate again more than 1 GB between their phases: kept, not given back.
    # mallopt takes a C int: a larger value would wrap (1 << 40 becomes 0: trim at once).
    import ctypes

    assert allocator.TRIM_THRESHOLD == 2**31 - 1 == ctypes.c_int(allocator.TRIM_THRESHOLD).value
