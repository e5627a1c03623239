"""Where the cache lives, and seeing and clearing it (``popliner cache info|clear``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheEntry", "CacheInfo", "cache_dir", "cache_info", "clear_cache"]


def cache_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """``directory`` (``--cache-dir``), else ``$POPLINER_CACHE_DIR``, else ``$XDG_CACHE_HOME/popliner``,
    else ``~/.cache/popliner``."""
    if directory:
        return Path(directory)
    explicit = os.environ.get("POPLINER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "popliner"


#: Names of cache entries (``<profile sha256[:40]>-<options digest>.<ext>``) and
#: of the temporary files an interrupted write may leave. Only these are ever
#: listed or removed, so a --cache-dir pointed at a busy folder is safe.
_ENTRY_NAME = re.compile(r"^\.?[0-9a-f]{40}-[0-9a-f]{16}\.[A-Za-z0-9.]+$")


@dataclass(frozen=True)
class CacheEntry:
    """One cache file."""

    path: Path
    bytes: int
    modified: float  # seconds since the epoch


@dataclass(frozen=True)
class CacheInfo:
    """What the cache folder holds, largest entry first."""

    directory: Path
    exists: bool
    entries: tuple[CacheEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    @property
    def largest(self) -> CacheEntry | None:
        return self.entries[0] if self.entries else None


def cache_info(directory: str | os.PathLike[str] | None = None) -> CacheInfo:
    """The cache entries under ``directory`` (default: :func:`cache_dir`)."""
    where = cache_dir(directory)
    if not where.is_dir():
        return CacheInfo(where, False, ())
    entries = []
    for child in where.iterdir():
        if not _ENTRY_NAME.match(child.name):
            continue
        try:
            st = child.lstat()
        except OSError:
            continue
        if child.is_file() and not child.is_symlink():
            entries.append(CacheEntry(child, st.st_size, st.st_mtime))
    entries.sort(key=lambda e: (-e.bytes, e.path.name))
    return CacheInfo(where, True, tuple(entries))


def clear_cache(directory: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Remove every cache entry; returns (files removed, bytes freed). Other files are left alone."""
    removed = freed = 0
    for entry in cache_info(directory).entries:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
        freed += entry.bytes
    return removed, freed
