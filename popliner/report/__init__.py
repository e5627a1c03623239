"""The HTML review report of a split: one self-contained page (see :mod:`popliner.report.page`).

``build_report`` gathers the figures from the library, ``render_html`` turns
them into a page with plotly.js inlined, ``write_report`` writes it
atomically. plotly is imported only here, when a report is written.
"""

from __future__ import annotations

import os

from popliner.fileio import atomic_write, check_writable
from popliner.report.build import Report, build_report

__all__ = ["Report", "build_report", "plotly_js", "render_report", "write_report"]


def plotly_js() -> str:
    """The plotly.js bundle shipped with the plotly package (no network)."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def render_report(report: Report) -> str:
    from popliner.report.page import render_html

    return render_html(report, plotly_js())


def write_report(report: Report, path: str | os.PathLike[str], *, force: bool) -> None:
    """Write the page to ``path`` (UTF-8), replacing a file only with ``force``."""
    check_writable(path, force)
    page = render_report(report)
    with atomic_write(path, force=force, newline="") as stream:
        stream.write(page)
