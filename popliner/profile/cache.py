"""The derived-data cache: one ``.npz`` per (profile content, popliner version, options).

Stored with numpy's own format and loaded with ``allow_pickle=False``: the
arrays of the frozen dataclasses go in as arrays, everything else (strings,
small scalars) as one deflated JSON document held in a ``uint8`` array. The file is a
plain ``np.savez`` archive (stored members); it is read here member by
member, each array in one ``readinto`` with its CRC-32 checked, which is
several times faster than ``np.load`` on a large profile (``np.load`` copies
each member through small buffers).

Columns are stored compressed so that the cache stays smaller than the
profile: each large integer array is kept as the narrowest integer type that
holds it, or its differences when those are narrower (sorted ids, offsets),
then deflated (level 1); the JSON document says how to undo it. The
variable names stay compressed in memory too (:class:`NameTable` inflates a
chunk when a name in it is read). A file that is unreadable, truncated,
damaged, from another version or for another profile is ignored and
rebuilt; nothing here ever raises to the user.

Beside the profile, a file holds what the caller derived from it (the
operation table, the layer assignment): frozen dataclasses of arrays,
tuples and scalars, stored the same way. The caller names their types when
it loads, so this module, like all of ``profile/``, imports nothing from the
layers above it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

import numpy as np
from numpy.lib import format as npy_format

from popliner import __version__
from popliner.profile import zcodec
from popliner.profile.cachecheck import Bad, check_profile
from popliner.profile.cachefs import open_entry, usable_dir, write_entry
from popliner.profile.model import Contexts, NameTable, Profile, Programs, Target, Variables, VertexTypes
from popliner.profile.tilevector import RunTable

__all__ = [
    "CACHE_FORMAT",
    "CacheEntry",
    "CacheHit",
    "CacheInfo",
    "PendingStore",
    "cache_dir",
    "cache_info",
    "cache_path",
    "clear_cache",
    "load_cached",
    "store_cached",
]

log = logging.getLogger(__name__)

#: 4: the derived data under "derived" (its type named by the caller), names tuples as lists, layers stored.
#: 5: "digest" binds the stored arrays to the profile.
CACHE_FORMAT = 5
_CLASSES: dict[str, type] = {
    c.__name__: c for c in (Profile, Target, Programs, Variables, NameTable, Contexts, VertexTypes, RunTable)
}
D = TypeVar("D")
L = TypeVar("L")
#: What a bad cache file can raise while it is read (it is then rebuilt).
_READ_ERRORS: tuple[type[Exception], ...] = (
    OSError, ValueError, KeyError, TypeError, IndexError, EOFError, zipfile.BadZipFile, json.JSONDecodeError,
    UnicodeDecodeError, RecursionError,
) + zcodec.ERRORS
#: Integer arrays at least this long are narrowed and deflated.
_PACK_MIN = 4096
_INT_TYPES: tuple[np.dtype[np.signedinteger[Any] | np.unsignedinteger[Any]], ...] = tuple(
    np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64))


def cache_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """``directory`` (``--cache-dir``), else ``$POPLINER_CACHE_DIR``, else ``$XDG_CACHE_HOME/popliner``,
    else ``~/.cache/popliner``."""
    if directory:
        return Path(directory)
    explicit = os.environ.get("POPLINER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "popliner"


def cache_path(sha256: str, options_key: str, directory: str | os.PathLike[str] | None = None) -> Path:
    digest = hashlib.sha256(f"{__version__}|{CACHE_FORMAT}|{options_key}".encode()).hexdigest()[:16]
    return cache_dir(directory) / f"{sha256[:40]}-{digest}.npz"


def store_cached(path: Path, sha256: str, options_key: str, profile: Profile, derived: object,
                 layers: tuple[str, object] | None = None) -> None:
    """Write the cache file; a failure (read-only disk, full disk) is only logged.

    ``derived`` is what the caller built from the profile (the operation
    table), a frozen dataclass of arrays, tuples and scalars; ``layers``: the
    layer assignment of the operations (another such dataclass) and the key
    of the options that chose it (it is only used again under the same key).
    """
    with PendingStore(profile) as pending:
        pending.finish(path, sha256, options_key, derived, layers)


class PendingStore:
    """A cache file under way: the profile's columns are packed on two threads from the start.

    The caller derives its data meanwhile, then calls :meth:`finish`
    (:func:`store_cached` in two steps). Used as a context manager, so that
    the threads stop when the caller fails in between; nothing is written
    unless :meth:`finish` runs. The file is the same as :func:`store_cached`'s.
    """

    def __init__(self, profile: Profile) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._profile = _flatten(profile, "p.", self._arrays)
        self._pool = ThreadPoolExecutor(2)  # zlib lets go of the GIL while it works
        self._packing: dict[str, Future[tuple[np.ndarray, dict[str, Any]]]] = {}
        self._submit()

    def __enter__(self) -> PendingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self) -> None:
        for k, a in self._arrays.items():
            if k not in self._packing and _packable(k, a):
                self._packing[k] = self._pool.submit(_pack, a)

    def finish(self, path: Path, sha256: str, options_key: str, derived: object,
               layers: tuple[str, object] | None = None) -> None:
        """Add the caller's data, wait for the packing and write the file (see :func:`store_cached`)."""
        arrays = self._arrays
        meta = {
            "version": __version__,
            "format": CACHE_FORMAT,
            "sha256": sha256,
            "options": options_key,
            "profile": self._profile,
            "derived": _flatten(derived, "d.", arrays),
            "layers": None if layers is None else [layers[0], _flatten(layers[1], "l.", arrays)],
        }
        self._submit()
        codecs = {}
        for k, future in self._packing.items():  # in the order of the arrays: the same file every time
            arrays[k], codecs[k] = future.result()
        meta["codecs"] = codecs
        meta["digest"] = _digest(sha256, arrays)
        try:
            # The document (names of programs and contexts, their data) is deflated too.
            document = json.dumps(meta).encode("utf-8")
        except (ValueError, RecursionError) as exc:  # free-form data nested too deep for the encoder
            log.warning("not caching %s: its free-form data cannot be stored (%s)", path,
                        type(exc).__name__)
            return
        arrays["__meta__"] = np.frombuffer(zcodec.compress(document), dtype=np.uint8)
        if not usable_dir(path.parent):
            return

        def write(fh: BinaryIO) -> None:
            np.savez(fh, **arrays)  # type: ignore[arg-type]

        try:
            write_entry(path, write)
        except OSError as exc:
            log.info("could not write cache %s: %s", path, exc)


@dataclass(frozen=True, eq=False)
class CacheHit(Generic[D, L]):
    """What a cache file holds."""

    profile: Profile
    derived: D
    #: The layer assignment stored with them and the key of the options that chose it.
    layers: tuple[str, L] | None


def load_cached(path: Path, sha256: str, options_key: str, profile_path: str, derived: type[D],
                layers_type: type[L], check: Callable[[Profile, D, L | None], None] | None = None,
                ) -> CacheHit[D, L] | None:
    """The cached profile, derived data and layers (of the types named), or None when absent, stale or corrupt.

    An entry whose arrays do not match the digest it was written with, or
    that breaks the profile's invariants (:func:`check_profile`, then
    ``check`` on the derived data), was tampered with: one warning line, and
    the caller rebuilds it. An entry that is no regular file of ours, or a
    cache folder others can write, is never read (see :mod:`cachefs`).
    """
    classes = {**_CLASSES, derived.__name__: derived, layers_type.__name__: layers_type}
    if not usable_dir(path.parent):
        return None
    fh = open_entry(path)
    if fh is None:
        return None
    try:
        with fh:
            arrays = _read_npz(fh)
        meta = json.loads(zcodec.decompress(arrays.pop("__meta__")).decode("utf-8"))
        if (meta.get("version"), meta.get("format"), meta.get("sha256"), meta.get("options")) != (
            __version__, CACHE_FORMAT, sha256, options_key,
        ):
            log.debug("cache %s is stale; rebuilding", path)
            return None
        # The digest is taken on its own thread (hashlib lets go of the GIL) while the columns are unpacked.
        with ThreadPoolExecutor(1) as pool:
            digest = pool.submit(_digest, sha256, dict(arrays))
            _unpack_all(arrays, meta["codecs"])
            if meta.get("digest") != digest.result():
                raise Bad("its arrays do not match their digest")
        profile = _unflatten(meta["profile"], arrays, _CLASSES)
        extra = _unflatten(meta["derived"], arrays, classes)
        stored = meta.get("layers")
        layers = None if stored is None else (stored[0], _unflatten(stored[1], arrays, classes))
        if not isinstance(profile, Profile) or not isinstance(extra, derived):
            raise _OtherTypes("it holds other types than the caller asked for")
        if layers is not None and not (isinstance(layers[0], str) and isinstance(layers[1], layers_type)):
            raise _OtherTypes("its layers hold other types than the caller asked for")
        check_profile(profile)
        if check is not None:
            check(profile, extra, None if layers is None else layers[1])
    except _OtherTypes as exc:
        log.debug("cache %s: %s; rebuilding", path, exc)
        return None
    except Bad as exc:
        log.warning("cache entry %s was changed since it was written (%s); rebuilding it", path, exc)
        return None
    except _READ_ERRORS as exc:
        log.debug("cache %s is unreadable (%s); rebuilding", path, exc)
        return None
    # The same content may sit under another name; report the name used now.
    return CacheHit(dataclasses.replace(profile, path=profile_path), extra, layers)


class _OtherTypes(Exception):
    """The entry holds other types than the caller asked for (written by another caller): a miss."""


def _digest(sha256: str, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the profile's digest and every stored array (name, type, shape, bytes) but the metadata.

    Taken over the arrays as stored (packed), so it costs a few milliseconds
    per ten megabytes of cache file.
    """
    h = hashlib.sha256(sha256.encode())
    for k in sorted(arrays):
        if k == "__meta__":
            continue
        a = arrays[k]
        h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
        flat = a.reshape(-1, order="A")  # a view of a C- or Fortran-ordered array: its bytes as stored
        if a.size:
            h.update(np.ascontiguousarray(flat).view(np.uint8).data)
    return h.hexdigest()


def _read_npz(f: io.BufferedReader) -> dict[str, np.ndarray]:
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
            arrays[name] = arr.reshape(shape, order="F" if fortran else "C")
    return arrays


def _packable(key: str, a: np.ndarray) -> bool:
    # A packed name table's blob is deflated already.
    return a.size >= _PACK_MIN and (a.dtype in _INT_TYPES or a.dtype == np.bool_) and not key.endswith(
        ".names.blob.")


def _pack(a: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
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


def _unpack_all(arrays: dict[str, np.ndarray], codecs: dict[str, Any]) -> None:
    names = list(codecs)
    with ThreadPoolExecutor(2) as pool:
        out = list(pool.map(lambda k: _unpack(arrays[k], codecs[k]), names))
    arrays.update(zip(names, out))


def _unpack(data: np.ndarray, codec: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(codec["dtype"])
    if dtype not in _INT_TYPES and dtype != np.bool_:
        raise ValueError(f"unexpected packed type {dtype}")
    narrow = np.dtype(codec["as"])
    shape = tuple(codec["shape"])
    count = math.prod(shape)
    # Inflated piece by piece straight into the result (a numpy array, which the
    # kernel backs with huge pages): one whole inflated copy would cost a page fault
    # every 4 KiB. The running total carries over between pieces for differences.
    # Differences are summed straight in the stored type: their running sums are the values, which fit it.
    out = np.empty(count, dtype)
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
        part = out[at : at + len(piece)]
        if codec["delta"]:
            np.cumsum(piece, dtype=dtype, out=part)
            part += carry
            carry = int(part[-1])
        else:
            part[...] = piece if dtype != np.bool_ else piece != 0
        at += len(piece)
    if stream.decompress(pending) or not stream.eof or stream.unused_data:
        raise ValueError("packed array has the wrong size")
    return out.reshape(shape, order="F" if codec["fortran"] else "C")


def _flatten(obj: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able description of ``obj``; its arrays go into ``arrays``."""
    if isinstance(obj, np.ndarray):
        arrays[prefix] = obj
        return {"__array__": prefix}
    if isinstance(obj, NameTable):
        obj = obj.packed()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: _flatten(getattr(obj, f.name), f"{prefix}{f.name}.", arrays)
                  for f in dataclasses.fields(obj) if f.init}
        return {"__class__": type(obj).__name__, "fields": fields}
    if isinstance(obj, tuple):
        if all(type(v) is str for v in obj):  # names: one list, not a description per string
            return {"__strs__": list(obj)}
        return {"__tuple__": [_flatten(v, f"{prefix}{i}.", arrays) for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        if all(isinstance(v, np.ndarray) for v in obj.values()) and obj:
            return {"__arraydict__": {k: _flatten(v, f"{prefix}{k}.", arrays) for k, v in obj.items()}}
        return obj
    if isinstance(obj, (np.bool_, np.integer, np.floating)):
        return obj.item()
    return obj


def _unflatten(desc: Any, arrays: dict[str, np.ndarray], classes: dict[str, type]) -> Any:
    if isinstance(desc, dict):
        if "__array__" in desc:
            return arrays[desc["__array__"]]
        if "__class__" in desc:
            cls = classes[desc["__class__"]]
            return cls(**{k: _unflatten(v, arrays, classes) for k, v in desc["fields"].items()})
        if "__strs__" in desc:
            strs = desc["__strs__"]
            if not all(type(v) is str for v in strs):
                raise ValueError("a list of names holds something else")
            return tuple(strs)
        if "__tuple__" in desc:
            return tuple(_unflatten(v, arrays, classes) for v in desc["__tuple__"])
        if "__arraydict__" in desc:
            return {k: _unflatten(v, arrays, classes) for k, v in desc["__arraydict__"].items()}
    return desc


# -- seeing and clearing the cache (``popliner cache info|clear``) -------------

#: Names of cache entries (``<profile sha256[:40]>-<options digest>.<ext>``) and
#: of the temporary files an interrupted write may leave. Only these are ever
#: listed or removed, so a --cache-dir pointed at a busy folder is safe.
_ENTRY_NAME = re.compile(r"^\.?[0-9a-f]{40}-[0-9a-f]{16}\.[A-Za-z0-9.]+$")


@dataclass(frozen=True)
class CacheEntry:
    """One cache file."""

    path: Path
    bytes: int
    modified: float  # seconds since the epoch


@dataclass(frozen=True)
class CacheInfo:
    """What the cache folder holds, largest entry first."""

    directory: Path
    exists: bool
    entries: tuple[CacheEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    @property
    def largest(self) -> CacheEntry | None:
        return self.entries[0] if self.entries else None


def cache_info(directory: str | os.PathLike[str] | None = None) -> CacheInfo:
    """The cache entries under ``directory`` (default: :func:`cache_dir`)."""
    where = cache_dir(directory)
    if not where.is_dir():
        return CacheInfo(where, False, ())
    entries = []
    for child in where.iterdir():
        if not _ENTRY_NAME.match(child.name):
            continue
        try:
            st = child.lstat()
        except OSError:
            continue
        if child.is_file() and not child.is_symlink():
            entries.append(CacheEntry(child, st.st_size, st.st_mtime))
    entries.sort(key=lambda e: (-e.bytes, e.path.name))
    return CacheInfo(where, True, tuple(entries))


def clear_cache(directory: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Remove every cache entry; returns (files removed, bytes freed). Other files are left alone."""
    removed = freed = 0
    for entry in cache_info(directory).entries:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
        freed += entry.bytes
    return removed, freed
