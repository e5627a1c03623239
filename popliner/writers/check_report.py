"""The CI check's text: the per-IPU table, and what is on the worst tile of an IPU over budget."""

from __future__ import annotations

from typing import IO

from popliner.check import CheckResult
from popliner.checkreport import CheckReport
from popliner.solvers.result import StageResult
from popliner.textsafe import shown
from popliner.writers.ipu_table import IpuLine, ipu_table

__all__ = ["check_table", "overflow_text", "write_check_report_text"]


def check_table(result: CheckResult) -> str:
    """Per IPU: the worst tile and what is on it (model, stash, copy buffers), against the per-tile budget."""
    lines = ipu_table((f"{'budget':>10}", f"{'headroom':>10}"), [
        IpuLine(ipu.ipu, shown(ipu.layers[0] if len(ipu.layers) == 1 else f"{ipu.layers[0]}..{ipu.layers[-1]}"),
                ipu.worst_tile, ipu.worst_tile_bytes, ipu.worst_tile_memory.total, ipu.worst_tile_stash,
                ipu.copy_buffer, (f"{ipu.budget:>10,}", f"{ipu.headroom:>10,}"), ipu.fits)
        for ipu in result.ipus])
    for ipu in result.ipus:
        if not ipu.fits:
            lines.append(overflow_text(ipu))
    return "\n".join(lines)


def overflow_text(ipu: StageResult) -> str:
    m = ipu.worst_tile_memory
    parts = [
        f"IPU {ipu.ipu} is over budget by {-ipu.headroom:,} bytes on tile {ipu.worst_tile}: "
        f"variables {m.variables:,}, vertex code {m.vertex_code:,}, vertex state {m.vertex_state:,}, "
        f"exchange code {m.exchange_code:,}, control code {m.control_code:,}, "
        + (f"other categories {m.other:,}, " if m.other else "")
        + f"stash {ipu.worst_tile_stash:,}, copy buffers {ipu.copy_buffer:,}",
    ]
    if ipu.peak_step >= 0:
        parts.append(f"  variables peak at step {ipu.peak_step}; largest live there:")
        parts.extend(f"    {v.bytes:>10,}  {shown(v.name)}" for v in ipu.largest_live)
    return "\n".join(parts)


def write_check_report_text(report: CheckReport, stream: IO[str]) -> None:
    """The table, then the comparison with the baseline when there is one."""
    from popliner.writers.check_delta import comparison_lines

    text = check_table(report.result)
    if report.comparison is not None:
        text += "\n" + "\n".join(comparison_lines(report.comparison))
    stream.write(text + "\n")
