"""Text tables: any table of columns padded to width (``simulate``'s, ``synth --list-presets``), and the per-IPU
table of a split as ``--solve`` and ``popliner check`` print it: each IPU's layers and its worst tile with what is on
it (model, stash, copy buffers), then each command's own last columns (cycles and headroom in percent after a solve;
budget and headroom in bytes after a check).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["IpuLine", "ipu_table", "text_table"]


@dataclass(frozen=True)
class IpuLine:
    """One IPU's row: the worst tile's bytes, and the command's own last cells, already formatted."""

    ipu: int
    span: str  # its layers, "first..last"
    tile: int
    total: int
    model: int
    stash: int
    copy_buffer: int
    tail: tuple[str, ...]
    fits: bool


def ipu_table(tail_heads: Sequence[str], lines: Sequence[IpuLine]) -> list[str]:
    """The head (two lines) and a line per IPU; ``tail_heads`` are the last columns' titles, padded."""
    out = [
        f"{'':<24}{'on the worst tile (bytes)':-^47}",
        f"{'IPU':>3}  {'layers':<18} {'tile':>5} {'total':>10} {'model':>10} {'stash':>10} {'copy buf':>9} "
        f"{' '.join(tail_heads)}  fits",
    ]
    out.extend(f"{r.ipu:>3}  {r.span:<18} {r.tile:>5} {r.total:>10,} {r.model:>10,} {r.stash:>10,} "
               f"{r.copy_buffer:>9,} {' '.join(r.tail)}  {'yes' if r.fits else 'NO'}" for r in lines)
    return out


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = ()) -> str:
    """Columns padded to width; numbers right-aligned, columns in ``left`` left-aligned."""
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    out = []
    for r in [head, *rows]:
        cells = [v.ljust(w) if k in left else v.rjust(w) for k, (v, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)
