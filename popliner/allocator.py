"""Allocator settings for the command-line process: freed memory stays with the process for reuse.

A solve or a load allocates and frees many numpy arrays of a few to a
few hundred megabytes. By default glibc gives each such block its own
``mmap`` and returns it to the kernel when it is freed, and trims the top
of its heap as soon as 128 kB are free there, so the next array of that
size faults in every page again: on the 1x BERT-Large profile a solve took
about 145,000 page faults and 0.5-1 s of system time. Raising both
thresholds keeps freed blocks in the heap, where the next array reuses
pages that are already mapped (docs/benchmarks.md has the figures).

numpy also advises the kernel to back every array of 4 MB or more with
2 MB pages (``madvise(MADV_HUGEPAGE)``). Where transparent huge pages are
given only on such advice and the kernel then compacts memory to find them
(``/sys/kernel/mm/transparent_hugepage/defrag`` at ``madvise``, a common
default), a page fault on a busy machine's fragmented memory stalls in that
compaction: the 10x profile's cached load spent 3.3 s of system time there
(0.6 s with plain pages), the 1x solves about 0.5 s of CPU.
:func:`no_huge_page_advice` turns the advice off.

Only the ``popliner`` command calls these, at start; the library never
changes a process-wide setting on import. Other C libraries than glibc are
left alone.

The one call the library makes is :func:`give_back_freed_memory`, once a
profile's text is read into arrays (:mod:`popliner.profile.loader`): under the raised thresholds the text (360 MB at
1x) stays with the process after it is freed, and the arrays made later do
not all reuse its pages, so the cold command's peak would count the text
and everything after it (the 1x peak was 2.3 times the JSON instead of 2).
It changes no setting.
"""

from __future__ import annotations

import ctypes

from popliner.arrays import huge_page_setter

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "give_back_freed_memory", "keep_freed_memory", "no_huge_page_advice"]

#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap: the largest arrays of a 4x profile (15 M int64) are 120 MB.
MMAP_THRESHOLD = 1 << 30
#: Free memory at the top of the heap kept before glibc gives it back: the most ``mallopt`` takes (an int).
#: At 1 GB the 10x solves gave back, and faulted in again, about 0.5 M pages (2 GB) between their phases:
#: 1.5 M page faults and 5.7 s of system time in the greedy's process, against 1.0 M and 1.4-1.7 s at 2 GB.
TRIM_THRESHOLD = (1 << 31) - 1


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: musl and others have a different mallopt
    except (OSError, AttributeError):
        return None
    return libc


def give_back_freed_memory() -> bool:
    """Return the heap's free pages to the kernel now (glibc's ``malloc_trim``); False where not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.malloc_trim(0)
    return True


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; False (and no change) where the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; once the mmap threshold is set, glibc stops adjusting it itself.
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def no_huge_page_advice() -> bool:
    """Stop numpy advising huge pages for its arrays (see above); False (no change) where it cannot be set."""
    setter = huge_page_setter()
    if setter is None:
        return False
    setter(False)
    return True
