"""zlib streams through ISA-L when it is installed (the ``isal`` package), else the standard library.

ISA-L reads and writes the same formats about twice as fast (its level 1
compresses several times faster); the output is standard zlib/gzip either way,
so a file written with one is read by the other.
"""

from __future__ import annotations

import zlib
from typing import Any

_fast: Any
try:  # pragma: no cover - depends on what is installed
    from isal import isal_zlib as _fast
except ImportError:  # pragma: no cover
    _fast = None

__all__ = ["ERRORS", "compress", "compressobj", "decompress", "decompressobj"]

#: What a damaged stream raises, with either library.
ERRORS: tuple[type[Exception], ...] = (zlib.error,) if _fast is None else (zlib.error, _fast.error)  # noqa: E501


def compress(data: Any) -> bytes:
    """A zlib stream of ``data`` at the fastest level."""
    if _fast is not None:
        return bytes(_fast.compress(data, 1))
    return zlib.compress(data, 1)


def compressobj() -> Any:
    """A streaming compressor at the fastest level (zlib format): ``compress(piece)`` then ``flush()``."""
    if _fast is not None:
        return _fast.compressobj(1)
    return zlib.compressobj(1)


def decompress(data: Any) -> bytes:
    if _fast is not None:
        return bytes(_fast.decompress(data))
    return zlib.decompress(data)


def decompressobj(wbits: int) -> Any:
    """A streaming decompressor (``wbits=31``: gzip, header and trailer checked)."""
    if _fast is not None:
        return _fast.decompressobj(wbits=wbits)
    return zlib.decompressobj(wbits=wbits)
