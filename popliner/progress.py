"""Progress on stderr for the steps that can take a while, and how long each took.

Library code marks its long steps with :func:`phase`::

    with phase("parsing"):
        ...

Nothing is shown unless a caller (the CLI) turned a display on with
:func:`tracking`; the display is a tqdm line on stderr, so stdout keeps
carrying data only. The CLI turns it on only when stderr is a terminal, so
pipes and CI logs stay free of carriage returns. Every phase is timed either
way: ``-v`` prints the breakdown.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["Tracker", "phase", "progress_wanted", "tracking"]

#: How often a running phase's line is redrawn (elapsed time keeps moving).
_REFRESH_SECONDS = 0.25


@dataclass
class Tracker:
    """Collects phase timings and, when ``stream`` is given, draws a progress line there."""

    stream: IO[str] | None = None
    timings: list[tuple[str, float]] = field(default_factory=list)
    _depth: int = 0

    @contextlib.contextmanager
    def phase(self, label: str) -> Iterator[None]:
        """Time the block (and show it, when this is the outermost phase and there is a stream)."""
        start = time.perf_counter()
        outermost = self._depth == 0
        self._depth += 1
        bar = _Bar(self.stream, label) if self.stream is not None and outermost else None
        try:
            yield
        finally:
            self._depth -= 1
            if bar is not None:
                bar.close()
            self.timings.append((label, time.perf_counter() - start))

    def breakdown(self) -> str:
        """One line per phase label with its seconds summed over its runs, in order of first appearance."""
        totals: dict[str, float] = {}
        for label, seconds in self.timings:
            totals[label] = totals.get(label, 0.0) + seconds
        width = max((len(label) for label in totals), default=5)
        return "\n".join(f"  {label:<{width}}  {seconds:8.2f} s" for label, seconds in totals.items())


class _Bar:
    """A tqdm line with a label and the elapsed time, redrawn by a small thread."""

    def __init__(self, stream: IO[str], label: str) -> None:
        from tqdm import tqdm

        sized = _columns(stream) > 0
        # A terminal that reports no size (a bare pty) would make tqdm hide the line: assume 80x24.
        self._bar: Any = tqdm(desc=label, file=stream, leave=False, bar_format="popliner: {desc}... {elapsed}",
                              ncols=None if sized else 80, nrows=None if sized else 24, dynamic_ncols=sized,
                              mininterval=_REFRESH_SECONDS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._redraw, name="popliner-progress", daemon=True)
        self._thread.start()

    def _redraw(self) -> None:
        while not self._stop.wait(_REFRESH_SECONDS):
            self._bar.refresh()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._bar.close()


def _columns(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, AttributeError, ValueError):
        return 0


_current: ContextVar[Tracker | None] = ContextVar("popliner_progress", default=None)


@contextlib.contextmanager
def phase(label: str) -> Iterator[None]:
    """Mark a possibly long step of the library; a no-op unless :func:`tracking` is active."""
    tracker = _current.get()
    if tracker is None:
        yield
        return
    with tracker.phase(label):
        yield


@contextlib.contextmanager
def tracking(stream: IO[str] | None) -> Iterator[Tracker]:
    """Time every :func:`phase` inside the block; draw progress on ``stream`` unless it is None."""
    tracker = Tracker(stream)
    token = _current.set(tracker)
    try:
        yield tracker
    finally:
        _current.reset(token)


def progress_wanted(stream: IO[str], quiet: bool) -> bool:
    """Progress lines only on an interactive terminal: never in pipes, files or CI logs."""
    if quiet or os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
