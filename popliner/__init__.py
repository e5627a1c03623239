"""popliner: split a model too large for one IPU into a pipeline over several IPUs.

``popliner.load(path, **options)`` returns an analysed profile with pandas
DataFrame views (see :mod:`popliner.frames`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "load"]

if TYPE_CHECKING:
    from popliner.frames import load


def __getattr__(name: str) -> Any:
    # Imported on first use so that `popliner --help` does not load pandas.
    if name == "load":
        from popliner.frames import load

        return load
    raise AttributeError(f"module 'popliner' has no attribute {name!r}")
