"""The HTML review report of a split: what it shows, gathered from the library.

``build_report`` gathers the figures; the page itself (plotly.js inlined) is
written by :mod:`popliner.writers.html`.
"""

from __future__ import annotations

from popliner.report.build import Report, build_report

__all__ = ["Report", "build_report"]
