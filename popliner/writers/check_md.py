"""A check as a Markdown summary (``-o summary.md``, and GitHub's job summary): the verdict first, then a table.

The Markdown is GitHub's (GFM): names go in code spans fenced by more backticks
than they hold, and a ``|`` in a table cell is escaped; why, and the test that
renders it: docs/ci.md ('What CI reads').
"""

from __future__ import annotations

import re
from typing import IO

from popliner.baseline import Comparison, IpuDelta, NameDelta
from popliner.checkreport import CheckReport
from popliner.solvers.result import StageResult
from popliner.textsafe import shown
from popliner.writers.check_delta import failure_line, growth_words, verdict_line
from popliner.writers.shares import percent, signed_bytes
from popliner.writers.writer import Functions

__all__ = ["MARKDOWN", "code", "markdown_summary"]


def code(text: str, *, cell: bool = False) -> str:
    """``text`` as a Markdown code span that shows it verbatim (in a table ``cell``, with ``|`` escaped)."""
    text = shown(text)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) or not text else ""
    span = f"{fence}{pad}{text}{pad}{fence}"
    return span.replace("|", "\\|") if cell else span


def markdown_summary(report: CheckReport) -> str:
    result, c = report.result, report.comparison
    lines = [f"## {'FAIL' if report.failed else 'PASS'}: popliner check of {code(result.config_path)}", ""]
    lines += [f"- **{reason}**" for reason in _reasons(report)]
    record = report.record
    lines += ["", f"{code(result.config_path)} checked against {code(result.profile_path)} "
                  f"(sha256 {code(record.profile_sha256[:12])}): {record.mode}, budget {result.budget:,} bytes "
                  "per tile.", ""]
    if c is not None:
        lines += [f"Baseline {code(c.baseline_path)}: profile {code(c.baseline_profile_path)} "
                  f"(sha256 {code(c.baseline_profile_sha256[:12])})"
                  + (f", budget {c.baseline_budget:,} bytes per tile" if c.baseline_budget != c.budget else "")
                  + (f"; limit {c.limits.describe()}" if c.limits.describe() else "; no growth limit given")
                  + ".", ""]
        lines += _delta_table(c, result.ipus)
        for d in c.ipus:
            lines += _ipu_section(d)
    else:
        lines += _plain_table(result.ipus)
    return "\n".join(lines).rstrip("\n") + "\n"


def _reasons(report: CheckReport) -> list[str]:
    result, c = report.result, report.comparison
    over = [i for i in result.ipus if not i.fits]
    out = [f"IPU {i.ipu} does not fit: {-i.headroom:,} bytes over budget on tile {i.worst_tile} "
           f"({percent(i.worst_tile_bytes / i.budget if i.budget else 0.0)} of the budget)" for i in over]
    if c is not None and c.grown_beyond:
        out.append(failure_line(c))
    elif c is not None:
        out.append(verdict_line(c)[:1].upper() + verdict_line(c)[1:])
    if not out:
        out.append(f"All {len(result.ipus)} IPUs fit.")
    return out


def _span(layers: tuple[str, ...]) -> str:
    return code(layers[0], cell=True) if len(layers) == 1 else \
        f"{code(layers[0], cell=True)} .. {code(layers[-1], cell=True)}"


def _plain_table(ipus: tuple[StageResult, ...]) -> list[str]:
    out = ["| IPU | layers | worst tile | bytes | budget | headroom | fits |",
           "|--:|---|--:|--:|--:|--:|:-:|"]
    out += [f"| {i.ipu} | {_span(i.layers)} | {i.worst_tile} | {i.worst_tile_bytes:,} | {i.budget:,} | "
            f"{i.headroom:,} | {'yes' if i.fits else '**no**'} |" for i in ipus]
    return out


def _delta_table(c: Comparison, ipus: tuple[StageResult, ...]) -> list[str]:
    out = ["| IPU | layers | worst tile (bytes) | baseline | change | change % | headroom | headroom change "
           "| fits | verdict |",
           "|--:|---|--:|--:|--:|--:|--:|--:|:-:|---|"]
    for d, i in zip(c.ipus, ipus):
        verdict = f"**{d.verdict}**" if d.failed else d.verdict
        out.append(f"| {d.ipu} | {_span(d.layers)} | {d.worst_tile_bytes:,} | {d.baseline_worst_tile_bytes:,} | "
                   f"{signed_bytes(d.change)} | {percent(d.change_share, 2, signed=True)} | {d.headroom:,} | "
                   f"{signed_bytes(d.headroom_change)} | {'yes' if i.fits else '**no**'} | {verdict} |")
    return out


def _ipu_section(d: IpuDelta) -> list[str]:
    if not (d.layers_added or d.layers_removed or d.layer_changes or d.variable_changes):
        return []
    out = ["", f"### IPU {d.ipu}: {growth_words(d)}", ""]
    if d.layers_added:
        out.append(f"- now also on this IPU: {', '.join(code(x) for x in d.layers_added)}")
    if d.layers_removed:
        out.append(f"- no longer on this IPU: {', '.join(code(x) for x in d.layers_removed)}")
    if d.layers_added or d.layers_removed:
        out.append("")
    rows = [("layer", n, "total bytes, summed over tiles") for n in d.layer_changes]
    rows += [("variable", n, "on the worst tile") for n in d.variable_changes]
    if rows:
        out += ["| changed most | name | baseline (bytes) | now (bytes) | change |", "|---|---|--:|--:|--:|"]
        out += [f"| {kind} ({what}) | {code(n.name, cell=True)} | {_bytes(n.baseline_bytes, kind)} | "
                f"{_bytes(n.bytes, kind)} | {_change(n)} |" for kind, n, what in rows]
    return out


def _bytes(value: int | None, kind: str) -> str:
    if value is None:
        return "not a layer here" if kind == "layer" else "not among the largest"
    return f"{value:,}"


def _change(n: NameDelta) -> str:
    return signed_bytes(n.change) if n.baseline_bytes is not None and n.bytes is not None else "n/a"


def _write(report: CheckReport, stream: IO[str]) -> None:
    stream.write(markdown_summary(report))


MARKDOWN: Functions = {"CheckReport": _write}
