"""A cache file's layout: an ``np.savez`` archive of arrays, and how its large columns are stored.

:func:`flatten` describes a frozen dataclass of arrays, tuples and scalars
as a JSON-able document whose arrays go into the archive by name;
:func:`unflatten` builds it again from the classes the caller names.
:func:`read_npz` reads the archive member by member, each array in one
``readinto`` with its CRC-32 checked, which is several times faster than
``np.load`` on a large profile (``np.load`` copies each member through
small buffers).

Large integer columns: Each large integer array is kept as the narrowest integer type that holds
it, or its differences when those are narrower (sorted ids, offsets), then
deflated (level 1), so that the cache stays smaller than the profile. The
codec (a small JSON-able dict) says how to undo it. Packing and unpacking
go piece by piece: whole-column temporaries cost as much in page faults as
the deflating.
"""

from __future__ import annotations

import dataclasses
import io
import math
import struct
import zipfile
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from isal import igzip_lib, isal_zlib
from numpy.lib import format as npy_format

from popliner.profile.lazycol import Deferred
from popliner.profile.model import NameTable

__all__ = ["PIECE", "column_range", "flatten", "pack", "packable", "read_npz", "unflatten", "unpack", "unpack_all"]


def read_npz(f: io.BufferedReader) -> dict[str, np.ndarray]:
    """``np.load(path, allow_pickle=False)`` of every member, each read straight into its array.

    The CRC-32 of every member is checked, as zipfile does, so a damaged file
    is an error (and the cache is rebuilt), and so is a file with compressed
    members (popliner never writes one).
    """
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(f) as zf:
        infos = zf.infolist()
        if any(i.compress_type != zipfile.ZIP_STORED or i.flag_bits & 0x1 for i in infos):
            raise ValueError("compressed members: not written by popliner")
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            arrays[name] = _read_member(f, info)
    return arrays


def _read_member(f: io.BufferedReader, info: zipfile.ZipInfo) -> np.ndarray:
    """One stored ``.npy`` member, read straight into its array; its size and CRC-32 checked."""
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"{info.filename}: bad local header")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    f.seek(start)
    version = npy_format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = npy_format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = npy_format.read_array_header_2_0(f)
    else:
        raise ValueError(f"{info.filename}: .npy version {version} is not read here")
    if dtype.hasobject:
        raise ValueError(f"{info.filename}: object arrays cannot be loaded without pickles")
    head_len = f.tell() - start
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if head_len + nbytes != info.file_size:
        raise ValueError(f"{info.filename}: member size does not match its array")
    f.seek(start)
    crc = zlib.crc32(f.read(head_len))
    arr = np.empty(count, dtype)
    if nbytes:
        buf = arr.data.cast("B")
        if f.readinto(buf) != nbytes:
            raise EOFError(f"{info.filename}: truncated")
        crc = zlib.crc32(buf, crc)
    if crc != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    return arr.reshape(shape, order="F" if fortran else "C")


def flatten(obj: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able description of ``obj``; its arrays go into ``arrays``."""
    if isinstance(obj, np.ndarray):
        arrays[prefix] = obj
        return {"__array__": prefix}
    if isinstance(obj, NameTable):
        obj = obj.packed()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: flatten(getattr(obj, f.name), f"{prefix}{f.name}.", arrays)
                  for f in dataclasses.fields(obj) if f.init}
        return {"__class__": type(obj).__name__, "fields": fields}
    if isinstance(obj, tuple):
        if all(type(v) is str for v in obj):  # names: one list, not a description per string
            return {"__strs__": list(obj)}
        return {"__tuple__": [flatten(v, f"{prefix}{i}.", arrays) for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        if all(isinstance(v, np.ndarray) for v in obj.values()) and obj:
            return {"__arraydict__": {k: flatten(v, f"{prefix}{k}.", arrays) for k, v in obj.items()}}
        return obj
    if isinstance(obj, (np.bool_, np.integer, np.floating)):
        return obj.item()
    return obj


def unflatten(desc: Any, arrays: dict[str, np.ndarray], classes: dict[str, type]) -> Any:
    """The object :func:`flatten` described; ``classes`` are the only types it may build (by name)."""
    if isinstance(desc, dict):
        if "__array__" in desc:
            return arrays[desc["__array__"]]
        if "__class__" in desc:
            cls = classes[desc["__class__"]]
            return cls(**{k: unflatten(v, arrays, classes) for k, v in desc["fields"].items()})
        if "__strs__" in desc:
            strs = desc["__strs__"]
            if not all(type(v) is str for v in strs):
                raise ValueError("a list of names holds something else")
            return tuple(strs)
        if "__tuple__" in desc:
            return tuple(unflatten(v, arrays, classes) for v in desc["__tuple__"])
        if "__arraydict__" in desc:
            return {k: unflatten(v, arrays, classes) for k, v in desc["__arraydict__"].items()}
    return desc


#: Elements per piece when a column is packed or unpacked.
PIECE = 1 << 20
#: Integer arrays at least this long are narrowed and deflated.
_PACK_MIN = 4096
_INT_TYPES: tuple[np.dtype[np.signedinteger[Any] | np.unsignedinteger[Any]], ...] = tuple(
    np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64))


def packable(key: str, a: np.ndarray) -> bool:
    """Is the array stored packed? Large integer and flag columns are; a packed name table's blob is deflated
    already."""
    return a.size >= _PACK_MIN and (a.dtype in _INT_TYPES or a.dtype == np.bool_) and not key.endswith(
        ".names.blob.")


def pack(a: np.ndarray, *, piece: int = PIECE) -> tuple[np.ndarray, dict[str, Any]]:
    """The array as deflated bytes, and the codec that :func:`unpack` reads to give it back."""
    if a.dtype == np.bool_:  # flags: one byte each, deflated (mostly one value)
        data = isal_zlib.compress(np.ascontiguousarray(a).data, 1)
        return np.frombuffer(data, np.uint8), {"dtype": a.dtype.str, "shape": list(a.shape), "fortran": False,
                                               "as": "|u1", "delta": False}
    flat = a.reshape(-1, order="A")
    plain = _narrowest(flat)
    delta = False
    if a.ndim == 1 and flat.size:
        _, lo, hi = _span(_pieces(flat, True, piece))  # of the differences (the first item's from 0)
        narrow = _narrowest_for(lo, hi)
        first = next(_pieces(flat, True, piece)).copy()
        if narrow.itemsize < plain.itemsize or (narrow.itemsize == plain.itemsize and _smaller(first, flat, narrow)):
            delta, plain = True, narrow
    # Piece by piece into one zlib stream: the temporaries stay small and are reused,
    # where whole-column copies cost as much in page faults as the deflating.
    stream = isal_zlib.compressobj(1)
    parts = [stream.compress(np.ascontiguousarray(part).data) for part in _pieces(flat, delta, piece, plain)]
    parts.append(stream.flush())
    codec = {"dtype": a.dtype.str, "shape": list(a.shape), "fortran": bool(a.flags.f_contiguous and a.ndim > 1),
             "as": plain.str, "delta": delta}
    return np.frombuffer(b"".join(parts), np.uint8), codec


def _pieces(flat: np.ndarray, delta: bool, piece: int, as_type: np.dtype[Any] | None = None) -> Iterator[np.ndarray]:
    """``flat`` in pieces; with ``delta``, its differences (int64, the first from 0) instead; cast to ``as_type``.

    Each piece is only valid until the next one is asked for: the same
    scratch buffers are reused (fresh temporaries this size cost page faults).
    """
    prev = 0
    size = min(piece, len(flat))
    wide = np.empty(size, np.int64) if delta else None
    diff = np.empty(size, np.int64) if delta else None
    narrow = np.empty(size, as_type) if as_type is not None and (delta or flat.dtype != as_type) else None
    for lo in range(0, len(flat), piece):
        part = flat[lo : lo + piece]
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


def _span(pieces: Iterator[np.ndarray]) -> tuple[int, int, int]:
    """(items, smallest, largest) over non-empty ``pieces``; smallest and largest are 0 when there are none."""
    spans = [(len(part), int(part.min()), int(part.max())) for part in pieces]
    return sum(s[0] for s in spans), min((s[1] for s in spans), default=0), max((s[2] for s in spans), default=0)


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


def unpack_all(arrays: dict[str, Any], codecs: dict[str, Any], keep_packed: frozenset[str]) -> None:
    """Unpack, in place, every array ``codecs`` names, two at a time.

    Those in ``keep_packed`` become a :class:`popliner.profile.lazycol.Deferred`
    instead: one streaming pass takes their length and range for the checks,
    without the whole column in memory.
    """

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


def unpack(data: np.ndarray, codec: dict[str, Any], *, piece: int = PIECE) -> np.ndarray:
    """The array :func:`pack` packed; ValueError when the bytes do not give the codec's array."""
    shape = tuple(codec["shape"])
    out = np.empty(_count(data, codec), _unpacked_type(codec))
    for _ in _decoded(data, codec, out, piece):
        pass
    return out.reshape(shape, order="F" if codec["fortran"] else "C")


def column_range(data: np.ndarray, codec: dict[str, Any]) -> tuple[int, int, int]:
    """(items, smallest, largest) of the array :func:`pack` packed, read piece by piece into one small buffer.

    ValueError as :func:`unpack`; smallest and largest are 0 for an empty array.
    """
    return _span(_decoded(data, codec, None, PIECE))


#: Deflate gives back at most 1032 bytes per byte it reads (RFC 1951's longest match per shortest code).
_MOST_INFLATED = 1032


def _count(data: np.ndarray, codec: dict[str, Any]) -> int:
    """Items of the packed array; ValueError when more than its bytes can inflate to (nothing is allocated)."""
    dims = [int(d) for d in codec["shape"]]
    count = math.prod(dims)
    if min(dims, default=0) < 0 or count * np.dtype(codec["as"]).itemsize > _MOST_INFLATED * data.size + 64:
        raise ValueError("packed array's shape is larger than its bytes can hold")
    return count


def _unpacked_type(codec: dict[str, Any]) -> np.dtype[Any]:
    dtype: np.dtype[Any] = np.dtype(codec["dtype"])
    if dtype not in _INT_TYPES and dtype != np.bool_:
        raise ValueError(f"unexpected packed type {dtype}")
    return dtype


def _decoded(data: np.ndarray, codec: dict[str, Any], out: np.ndarray | None, piece: int) -> Iterator[np.ndarray]:
    """The packed array's values piece by piece: into ``out`` (the whole array) when given, else into one
    reused scratch buffer (each piece valid until the next is asked for); ValueError on a wrong size."""
    dtype = _unpacked_type(codec)
    narrow = np.dtype(codec["as"])
    count = _count(data, codec)
    # Inflated piece by piece straight into the result (a numpy array, which the
    # kernel backs with huge pages): one whole inflated copy would cost a page fault
    # every 4 KiB. The running total carries over between pieces for differences.
    # Differences are summed straight in the stored type: their running sums are the values, which fit it.
    scratch = np.empty(min(count, piece), dtype) if out is None else None
    # The packed bytes are fed once: the decompressor keeps what it has not read yet. (A zlib decompressobj hands
    # that back as a new ``unconsumed_tail`` at every piece, a copy of the rest of the column each time: 0.15 s of
    # copies over a cached load at 120 BERT-Large layers.) It checks the stream's checksum, as zlib does.
    stream = igzip_lib.IgzipDecompressor(igzip_lib.DECOMP_ZLIB)
    pending: Any = data
    at = 0
    carry = 0
    while at < count:
        raw = stream.decompress(pending, piece * narrow.itemsize)
        pending = b""
        if not raw or len(raw) % narrow.itemsize or at + len(raw) // narrow.itemsize > count:
            raise ValueError("packed array has the wrong size")
        got = np.frombuffer(raw, narrow)
        part = out[at : at + len(got)] if out is not None else scratch[: len(got)]  # type: ignore[index]
        if codec["delta"]:
            np.cumsum(got, dtype=dtype, out=part)
            part += carry
            carry = int(part[-1])
        else:
            part[...] = got if dtype != np.bool_ else got != 0
        at += len(got)
        yield part
    if (not stream.eof and stream.decompress(pending)) or not stream.eof or stream.unused_data:
        raise ValueError("packed array has the wrong size")
