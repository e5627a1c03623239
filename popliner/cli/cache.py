"""``popliner cache info|clear``: see where the derived-data cache is, how big it is, and empty it."""

from __future__ import annotations

import time

import click

from popliner.cli.options import cache_dir_option
from popliner.profile.cache import cache_info, clear_cache

__all__ = ["command"]

def _size(nbytes: int) -> str:
    """Bytes for people: 457.2 MB, 6.1 MB, 812 bytes."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


@click.group(name="cache", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """The derived-data cache: one file per profile content and option set.

    \b
    popliner cache info       where it is, its entries, total size, largest entry
    popliner cache clear      remove every entry (other files in the folder are left alone)
    """


@command.command(name="info")
@cache_dir_option
def info(cache_dir: str | None) -> None:
    """Location, entries (largest first), total size and the largest entry, on stdout."""
    found = cache_info(cache_dir)
    out = [f"location: {found.directory}" + ("" if found.exists else " (does not exist yet)"),
           f"entries: {len(found.entries)}",
           f"total: {_size(found.total_bytes)} ({found.total_bytes:,} bytes)"]
    if found.largest is not None:
        out.append(f"largest: {found.largest.path.name} ({_size(found.largest.bytes)})")
    for entry in found.entries:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.modified))
        out.append(f"  {entry.bytes:>14,}  {when}  {entry.path.name}")
    click.echo("\n".join(out))


@command.command(name="clear")
@cache_dir_option
def clear(cache_dir: str | None) -> None:
    """Remove every cache entry; the next run on a profile rebuilds its entry."""
    removed, freed = clear_cache(cache_dir)
    found = cache_info(cache_dir)
    click.echo(f"popliner: removed {removed} cache entr{'y' if removed == 1 else 'ies'} ({_size(freed)}) "
               f"from {found.directory}", err=True)
