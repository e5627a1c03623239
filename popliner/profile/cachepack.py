"""How the cache stores a large integer column: narrowed, maybe as differences, then deflated.

Each large integer array is kept as the narrowest integer type that holds
it, or its differences when those are narrower (sorted ids, offsets), then
deflated (level 1), so that the cache stays smaller than the profile. The
codec (a small JSON-able dict) says how to undo it. Packing and unpacking
go piece by piece: whole-column temporaries cost as much in page faults as
the deflating.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from popliner.profile import zcodec

__all__ = ["column_range", "pack", "packable", "unpack", "unpack_all"]

#: Integer arrays at least this long are narrowed and deflated.
_PACK_MIN = 4096
_INT_TYPES: tuple[np.dtype[np.signedinteger[Any] | np.unsignedinteger[Any]], ...] = tuple(
    np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64))


def packable(key: str, a: np.ndarray) -> bool:
    """Is the array stored packed? Large integer and flag columns are; a packed name table's blob is deflated
    already."""
    return a.size >= _PACK_MIN and (a.dtype in _INT_TYPES or a.dtype == np.bool_) and not key.endswith(
        ".names.blob.")


def pack(a: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """The array as deflated bytes, and the codec that :func:`unpack` reads to give it back."""
    if a.dtype == np.bool_:  # flags: one byte each, deflated (mostly one value)
        data = zcodec.compress(np.ascontiguousarray(a).data)
        return np.frombuffer(data, np.uint8), {"dtype": a.dtype.str, "shape": list(a.shape), "fortran": False,
                                               "as": "|u1", "delta": False}
    flat = a.reshape(-1, order="A")
    plain = _narrowest(flat)
    delta = False
    if a.ndim == 1 and flat.size:
        lo, hi = _diff_range(flat)
        narrow = _narrowest_for(lo, hi)
        first = next(_pieces(flat, True)).copy()
        if narrow.itemsize < plain.itemsize or (narrow.itemsize == plain.itemsize and _smaller(first, flat, narrow)):
            delta, plain = True, narrow
    # Piece by piece into one zlib stream: the temporaries stay small and are reused,
    # where whole-column copies cost as much in page faults as the deflating.
    stream = zcodec.compressobj()
    parts = [stream.compress(np.ascontiguousarray(piece).data) for piece in _pieces(flat, delta, plain)]
    parts.append(stream.flush())
    codec = {"dtype": a.dtype.str, "shape": list(a.shape), "fortran": bool(a.flags.f_contiguous and a.ndim > 1),
             "as": plain.str, "delta": delta}
    return np.frombuffer(b"".join(parts), np.uint8), codec


#: Elements per piece when a column is packed.
_PIECE = 1 << 20


def _pieces(flat: np.ndarray, delta: bool, as_type: np.dtype[Any] | None = None) -> Iterator[np.ndarray]:
    """``flat`` in pieces; with ``delta``, its differences (int64, the first from 0) instead; cast to ``as_type``.

    Each piece is only valid until the next one is asked for: the same
    scratch buffers are reused (fresh temporaries this size cost page faults).
    """
    prev = 0
    size = min(_PIECE, len(flat))
    wide = np.empty(size, np.int64) if delta else None
    diff = np.empty(size, np.int64) if delta else None
    narrow = np.empty(size, as_type) if as_type is not None and (delta or flat.dtype != as_type) else None
    for lo in range(0, len(flat), _PIECE):
        part = flat[lo : lo + _PIECE]
        k = len(part)
        if wide is not None and diff is not None:
            w, d = wide[:k], diff[:k]
            w[...] = part
            np.subtract(w[:1], prev, out=d[:1])
            np.subtract(w[1:], w[:-1], out=d[1:])
            prev = int(w[-1])
            part = d
        if narrow is not None:
            n = narrow[:k]
            n[...] = part  # wraps like astype: the range was checked first
            part = n
        yield part


def _diff_range(flat: np.ndarray) -> tuple[int, int]:
    """Smallest and largest difference of consecutive items (the first item's from 0)."""
    lo = hi = None
    for piece in _pieces(flat, True):
        a, b = int(piece.min()), int(piece.max())
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
    assert lo is not None and hi is not None
    return lo, hi


def _smaller(a: np.ndarray, b: np.ndarray, dtype: np.dtype[Any]) -> bool:
    """Whether ``a`` deflates smaller than ``b`` (judged on a sample), both stored as ``dtype``."""
    k = _PACK_MIN * 16
    return len(zlib.compress(a[:k].astype(dtype).data, 1)) < len(zlib.compress(b[:k].astype(dtype).data, 1))


def _narrowest(a: np.ndarray) -> np.dtype[Any]:
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    return _narrowest_for(lo, hi)


def _narrowest_for(lo: int, hi: int) -> np.dtype[Any]:
    for t in _INT_TYPES:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return t
    return np.dtype(np.int64)


def unpack_all(arrays: dict[str, Any], codecs: dict[str, Any], keep_packed: frozenset[str] = frozenset()) -> None:
    """Unpack, in place, every array ``codecs`` names, two at a time.

    Those in ``keep_packed`` become a :class:`popliner.profile.lazycol.Deferred`
    instead: one streaming pass takes their length and range for the checks,
    without the whole column in memory.
    """
    from popliner.profile.lazycol import Deferred

    def one(k: str) -> Any:
        data, codec = arrays[k], codecs[k]
        if k not in keep_packed:
            return unpack(data, codec)
        length, lo, hi = column_range(data, codec)
        return Deferred(lambda: unpack(data, codec), length, lo, hi, np.dtype(codec["dtype"]))

    names = list(codecs)
    with ThreadPoolExecutor(2) as pool:
        out = list(pool.map(one, names))
    arrays.update(zip(names, out))


def unpack(data: np.ndarray, codec: dict[str, Any]) -> np.ndarray:
    """The array :func:`pack` packed; ValueError when the bytes do not give the codec's array."""
    shape = tuple(codec["shape"])
    out = np.empty(math.prod(shape), _unpacked_type(codec))
    for _ in _decoded(data, codec, out):
        pass
    return out.reshape(shape, order="F" if codec["fortran"] else "C")


def column_range(data: np.ndarray, codec: dict[str, Any]) -> tuple[int, int, int]:
    """(items, smallest, largest) of the array :func:`pack` packed, read piece by piece into one small buffer.

    ValueError as :func:`unpack`; smallest and largest are 0 for an empty array.
    """
    lo = hi = None
    count = 0
    for piece in _decoded(data, codec, None):
        a, b = int(piece.min()), int(piece.max())
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
        count += len(piece)
    return count, lo or 0, hi or 0


def _unpacked_type(codec: dict[str, Any]) -> np.dtype[Any]:
    dtype: np.dtype[Any] = np.dtype(codec["dtype"])
    if dtype not in _INT_TYPES and dtype != np.bool_:
        raise ValueError(f"unexpected packed type {dtype}")
    return dtype


def _decoded(data: np.ndarray, codec: dict[str, Any], out: np.ndarray | None) -> Iterator[np.ndarray]:
    """The packed array's values piece by piece: into ``out`` (the whole array) when given, else into one
    reused scratch buffer (each piece valid until the next is asked for); ValueError on a wrong size."""
    dtype = _unpacked_type(codec)
    narrow = np.dtype(codec["as"])
    count = math.prod(tuple(codec["shape"]))
    # Inflated piece by piece straight into the result (a numpy array, which the
    # kernel backs with huge pages): one whole inflated copy would cost a page fault
    # every 4 KiB. The running total carries over between pieces for differences.
    # Differences are summed straight in the stored type: their running sums are the values, which fit it.
    scratch = np.empty(min(count, _PIECE), dtype) if out is None else None
    stream = zcodec.decompressobj(15)
    pending: Any = data
    at = 0
    carry = 0
    while at < count:
        raw = stream.decompress(pending, _PIECE * narrow.itemsize)
        pending = stream.unconsumed_tail
        if not raw or len(raw) % narrow.itemsize or at + len(raw) // narrow.itemsize > count:
            raise ValueError("packed array has the wrong size")
        piece = np.frombuffer(raw, narrow)
        part = out[at : at + len(piece)] if out is not None else scratch[: len(piece)]  # type: ignore[index]
        if codec["delta"]:
            np.cumsum(piece, dtype=dtype, out=part)
            part += carry
            carry = int(part[-1])
        else:
            part[...] = piece if dtype != np.bool_ else piece != 0
        at += len(piece)
        yield part
    if stream.decompress(pending) or not stream.eof or stream.unused_data:
        raise ValueError("packed array has the wrong size")
