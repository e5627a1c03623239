"""A solve's deadline, shared by the range tables (memory/) and the solvers that read them.

It lives below both layers so that a range table can stop its own work when
``--time-limit`` runs out, and the solvers catch the same exception.
"""

from __future__ import annotations

import time

#: Stages as (first, last) layer pairs (the solvers' ``Bounds``, spelled out to keep this module dependency-free).
_Bounds = tuple[tuple[int, int], ...]

__all__ = ["OutOfTime", "check_deadline"]


class OutOfTime(Exception):
    """The solve's deadline passed; ``best`` is the best (stages, value) found before it, if any."""

    def __init__(self, best: tuple[_Bounds, float] | None = None) -> None:
        super().__init__("the time limit ran out")
        self.best = best


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`OutOfTime` once ``deadline`` (a ``time.monotonic()`` value) has passed."""
    if deadline is not None and time.monotonic() >= deadline:
        raise OutOfTime()
