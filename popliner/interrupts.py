"""Short steps that an interrupt (Ctrl-C, SIGTERM, SIGHUP) must not cut in two.

The CLI turns those signals into an exception raised wherever the program is.
A few steps must run whole or not at all, or a file is left behind: creating a
temporary file and remembering its name, renaming the finished file into
place. They run inside :func:`uninterrupted`; the CLI's handler keeps a signal
that arrives meanwhile and raises it just after (see
:func:`popliner.cli.signals_interrupt`). Outside the CLI nothing changes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["in_uninterrupted", "uninterrupted"]

_state = threading.local()


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Mark a short step of the current thread that a signal's exception must wait for."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def in_uninterrupted() -> bool:
    """Whether the current thread (a signal handler runs in the main one) is inside :func:`uninterrupted`."""
    return getattr(_state, "depth", 0) > 0
