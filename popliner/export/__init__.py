"""``popliner export``: turn Poplar's profile.pop + debug.cbor into a format-v1 profile.

The conversion needs libpva (the Poplar SDK's ``pva`` module), which is
imported only when an export runs, so this package imports anywhere.
See docs/libpva-mapping.md for the field-by-field mapping.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from popliner.export.exporter import ExportSummary, export_report

__all__ = ["ExportSummary", "export_hint", "export_report", "is_poplar_report"]


def is_poplar_report(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` names a Poplar report (``.pop``), which needs exporting first."""
    return Path(path).suffix.lower() == ".pop"


def export_hint(path: str | os.PathLike[str]) -> str:
    """A one-line instruction to export a ``.pop`` report (for error messages)."""
    pop = Path(path)
    debug = pop.with_name("debug.cbor")
    out = pop.with_name(pop.stem + ".json.gz")
    return (
        f"{pop} is a Poplar report; popliner reads format-v1 JSON. Convert it first, in a Poplar SDK "
        f"environment: popliner export {pop} {debug} -o {out}"
    )


def __getattr__(name: str) -> Any:
    # The exporter is imported on first use: every analyse run asks is_poplar_report first.
    if name in ("ExportSummary", "export_report"):
        from popliner.export import exporter

        return getattr(exporter, name)
    raise AttributeError(f"module 'popliner.export' has no attribute {name!r}")
