"""A solved split as JSON (stdout) and as a one-line picture plus a per-IPU table (stderr)."""

from __future__ import annotations

import json
from typing import IO, Any

from popliner.solvers.result import SplitResult

__all__ = ["split_document", "split_picture", "split_table", "write_split_json"]


def split_document(split: SplitResult, *, profile_path: str, profile_sha256: str) -> dict[str, Any]:
    """Plain JSON-able description; no wall-clock figures, so it is reproducible."""
    return {
        "profile": profile_path,
        "profile_sha256": profile_sha256,
        "solver": split.solver,
        "status": split.status,
        "mode": split.mode,
        "num_ipus_requested": split.num_ipus_requested,
        "num_ipus_used": split.num_ipus_used,
        "budget_bytes_per_tile": split.budget_bytes,
        "objective": split.objective,
        "bound": split.bound,
        "gap": split.gap,
        "note": split.note,
        "unlayered_operations": "placed with the first stage",
        "stages": [
            {
                "index": s.index,
                "ipu": s.ipu,
                "first_layer": s.first_layer,
                "last_layer": s.last_layer,
                "layers": list(s.layers),
                "memory_bytes_summed_over_tiles": s.memory.as_dict() | {"total": s.memory.total},
                "worst_tile": s.worst_tile,
                "worst_tile_bytes": s.worst_tile_bytes,
                "stash_entries": s.stash_entries,
                "stash_bytes": s.stash_bytes,
                "cycles": s.cycles,
                "bytes_in": s.bytes_in,
                "fits": s.fits,
                **({"overflow": {
                    "tile": s.overflow.tile,
                    "step": s.overflow.step,
                    "largest_live_variables": [{"name": v.name, "bytes": v.bytes} for v in s.overflow.largest_live],
                }} if s.overflow is not None else {}),
            }
            for s in split.stages
        ],
    }


def write_split_json(document: dict[str, Any], stream: IO[str]) -> None:
    json.dump(document, stream, indent=2, sort_keys=False)
    stream.write("\n")


def split_picture(split: SplitResult, has_unlayered: bool) -> str:
    """``[ None 0 1 2 | 3 4 5 6 ]``: layers per IPU, ``None`` for operations without a layer."""
    if not split.stages:
        return "[ no split ]"
    parts = []
    for s in split.stages:
        names = list(s.layers)
        if s.index == 0 and has_unlayered:
            names.insert(0, "None")
        parts.append(" ".join(names))
    return "[ " + " | ".join(parts) + " ]"


def split_table(split: SplitResult) -> str:
    """Per-IPU lines: layers, worst tile, stash, cycles and headroom against the budget."""
    header = (
        f"{'IPU':>3}  {'layers':<18} {'worst tile':>10} {'bytes':>10} {'stash':>10} {'cycles':>12} "
        f"{'headroom':>9}  fits"
    )
    lines = [header]
    for s in split.stages:
        span = s.first_layer if s.first_layer == s.last_layer else f"{s.first_layer}..{s.last_layer}"
        headroom = (split.budget_bytes - s.worst_tile_bytes) / split.budget_bytes if split.budget_bytes else 0.0
        lines.append(
            f"{s.ipu:>3}  {span or '-':<18} {s.worst_tile:>10} {s.worst_tile_bytes:>10,} {s.stash_bytes:>10,} "
            f"{s.cycles:>12,} {headroom:>8.1%}  {'yes' if s.fits else 'NO'}"
        )
    for s in split.stages:
        if s.overflow is not None:
            lines.append(f"IPU {s.ipu} is over budget by {s.worst_tile_bytes - split.budget_bytes:,} bytes on tile "
                         f"{s.overflow.tile}" + (f"; variables peak at step {s.overflow.step}:" if s.overflow.step >= 0
                                                 else ""))
            lines.extend(f"    {v.bytes:>10,}  {v.name}" for v in s.overflow.largest_live)
    return "\n".join(lines)
