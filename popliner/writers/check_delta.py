"""The comparison of a check with its baseline, in words and as a text table (after the check's own table)."""

from __future__ import annotations

from popliner.baseline import Comparison, IpuDelta, NameDelta
from popliner.textsafe import shown
from popliner.writers.shares import percent, signed_bytes

__all__ = ["comparison_lines", "failure_line", "growth_words", "limit_words", "name_delta_words", "verdict_line"]


def growth_words(d: IpuDelta) -> str:
    """``grew by 9,458 bytes (+1.39%)`` / ``shrank by ...`` / ``is unchanged``."""
    if d.change == 0:
        return "is unchanged"
    verb = "grew" if d.change > 0 else "shrank"
    return f"{verb} by {abs(d.change):,} bytes ({percent(d.change_share, 2, signed=True)})"


def limit_words(d: IpuDelta, c: Comparison) -> str:
    """What the limits allow this IPU: ``--max-growth 0.01 allows 6,817 bytes``; empty without limits."""
    if d.allowed_growth is None:
        return ""
    return f"{c.limits.describe()} allows {d.allowed_growth:,} bytes"


def failure_line(c: Comparison) -> str:
    """The IPUs grown beyond the limits, each with its growth, in one line (for the error and the verdict)."""
    return "; ".join(f"IPU {d.ipu} {growth_words(d)}, more than {limit_words(d, c)}" for d in c.grown_beyond)


def verdict_line(c: Comparison) -> str:
    """One sentence: did the growth pass, and why."""
    beyond = c.grown_beyond
    if beyond:
        return f"growth beyond the limit: {failure_line(c)}"
    grew = [d for d in c.ipus if d.change > 0]
    if not grew:
        return "no IPU grew" + (" (" + ", ".join(f"IPU {d.ipu} {growth_words(d)}" for d in c.ipus if d.change)
                               + ")" if any(d.change for d in c.ipus) else "")
    within = f", within {c.limits.describe()}" if c.limits.describe() else " (no --max-growth given)"
    return "growth" + within + ": " + ", ".join(f"IPU {d.ipu} {growth_words(d)}" for d in grew)


def name_delta_words(n: NameDelta, unit_missing: str) -> str:
    """``12,000 -> 14,000 (+2,000)``; a name on one side only says so."""
    if n.baseline_bytes is None:
        return f"{n.bytes or 0:,} ({unit_missing} in the baseline)"
    if n.bytes is None:
        return f"{n.baseline_bytes:,} -> ({unit_missing} now)"
    return f"{n.baseline_bytes:,} -> {n.bytes:,} ({signed_bytes(n.change)})"


def comparison_lines(c: Comparison) -> list[str]:
    """The per-IPU deltas as a table, the split's moves, and per IPU the layers and variables that changed most."""
    lines = [f"against the baseline {shown(c.baseline_path)} (profile {shown(c.baseline_profile_path)}, "
             f"sha256 {c.baseline_profile_sha256[:12]}..):"]
    if c.budget != c.baseline_budget:
        lines.append(f"  the budget changed: {c.baseline_budget:,} -> {c.budget:,} bytes per tile")
    lines.append(f"{'IPU':>3}  {'worst tile then':>15} {'now':>10} {'change':>10} {'change %':>9} "
                 f"{'headroom':>10} {'change':>10}  verdict")
    for d in c.ipus:
        lines.append(f"{d.ipu:>3}  {d.baseline_worst_tile_bytes:>15,} {d.worst_tile_bytes:>10,} "
                     f"{signed_bytes(d.change):>10} {percent(d.change_share, 2, signed=True):>9} "
                     f"{d.headroom:>10,} {signed_bytes(d.headroom_change):>10}  {d.verdict}")
    for d in c.ipus:
        lines += _ipu_lines(d)
    lines.append(verdict_line(c))
    return lines


def _ipu_lines(d: IpuDelta) -> list[str]:
    out = []
    if d.layers_added or d.layers_removed:
        moved = ([f"now also {', '.join(map(shown, d.layers_added))}"] if d.layers_added else []) + (
            [f"no longer {', '.join(map(shown, d.layers_removed))}"] if d.layers_removed else [])
        out.append(f"IPU {d.ipu}: the split differs from the baseline's: {'; '.join(moved)}")
    if d.layer_changes:
        out.append(f"IPU {d.ipu}: layers changed most (total bytes, summed over tiles):")
        out += [f"    {shown(n.name)}: {name_delta_words(n, 'not')}" for n in d.layer_changes]
    if d.variable_changes:
        out.append(f"IPU {d.ipu}: largest variables on the worst tile changed most (bytes):")
        out += [f"    {shown(n.name)}: {name_delta_words(n, 'not among the largest')}" for n in d.variable_changes]
    return out
