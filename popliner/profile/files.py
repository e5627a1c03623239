"""Reading a profile file's raw bytes: all a cached load needs of the file (the cache key is their hash).

Kept apart from :mod:`popliner.profile.loader`, the document reader, so that
a cached load does not import (and, without byte-code files, compile) it.
"""

from __future__ import annotations

import os
from pathlib import Path

from popliner.errors import ProfileFormatError

__all__ = ["read_profile_bytes"]


def read_profile_bytes(path: str | os.PathLike[str]) -> bytes:
    """The raw bytes of the file (still compressed when it is gzip)."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise ProfileFormatError(str(p), "", "no such file") from None
    except IsADirectoryError:
        raise ProfileFormatError(str(p), "", "is a directory, not a profile file") from None
    except OSError as exc:
        raise ProfileFormatError(str(p), "", f"cannot read: {exc.strerror}") from None
