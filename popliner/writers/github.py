"""A check in GitHub Actions' own language: workflow-command annotations, and the job summary.

What each annotation marks, and the Markdown summary appended to
``$GITHUB_STEP_SUMMARY``: docs/ci.md ('What CI reads').
"""

from __future__ import annotations

from popliner.checkreport import CheckReport
from popliner.textsafe import shown
from popliner.writers.check_delta import growth_words, limit_words
from popliner.writers.shares import percent

__all__ = ["workflow_commands"]


def _data(text: str) -> str:
    """A command's message, escaped as the runner unescapes it (``%``, CR and LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A command's property value: also ``:`` and ``,``, which end it."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, file: str, title: str, message: str) -> str:
    return f"::{level} file={_property(file)},title={_property(title)}::{_data(message)}"


def workflow_commands(report: CheckReport) -> list[str]:
    """One workflow command per IPU that fails (``error``) or grew near the limit (``warning``)."""
    result, c, file = report.result, report.comparison, shown(report.result.config_path)
    out = []
    for i in result.ipus:
        if not i.fits:
            out.append(_command("error", file, f"popliner check: IPU {i.ipu} over budget",
                                f"IPU {i.ipu} needs {i.worst_tile_bytes:,} bytes on tile {i.worst_tile}, "
                                f"{-i.headroom:,} over its budget of {i.budget:,} "
                                f"({percent(i.worst_tile_bytes / i.budget if i.budget else 0.0)} of the budget)"))
    if c is None:
        return out
    for d in c.ipus:
        if d.beyond_limit:
            out.append(_command("error", file, f"popliner check: IPU {d.ipu} grew beyond the limit",
                                f"IPU {d.ipu} {growth_words(d)} since {shown(c.baseline_path)}, more than "
                                f"{limit_words(d, c)}"))
        elif d.near_limit:
            out.append(_command("warning", file, f"popliner check: IPU {d.ipu} grew near the limit",
                                f"IPU {d.ipu} {growth_words(d)} since {shown(c.baseline_path)}; {limit_words(d, c)}"))
    return out
