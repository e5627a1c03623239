"""Writing and reading a cache entry: one ``.npz`` per (profile content, popliner version, options)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar, cast

import numpy as np
from isal import isal_zlib

from popliner import __version__
from popliner.profile.cache.archive import flatten, pack, packable, read_npz, unflatten, unpack_all
from popliner.profile.cache.info import cache_dir
from popliner.profile.cache.trust import Bad, check_profile, digest, open_entry, usable_dir, write_entry
from popliner.profile.model import Contexts, NameTable, Profile, Programs, Target, Variables, VertexTypes
from popliner.profile.tilevector import RunTable

__all__ = ["CACHE_FORMAT", "CacheHit", "PendingStore", "cache_path", "load_cached", "seal"]

log = logging.getLogger(__name__)

#: 4: the derived data under "derived" (its type named by the caller), names tuples as lists, layers stored.
#: 5: "digest" binds the stored arrays to the profile.
#: 6: the caller's derived part holds the operations and the whole program's figures (popliner.analysis).
#: 7: the digest is a member of its own and covers the metadata document too.
#: 8: the operations' variable indices in int32 while they fit (popliner.ops.operations).
CACHE_FORMAT = 8
_CLASSES: dict[str, type] = {
    c.__name__: c for c in (Profile, Target, Programs, Variables, NameTable, Contexts, VertexTypes, RunTable)
}
D = TypeVar("D")
L = TypeVar("L")
#: What a bad cache file can raise while it is read (it is then rebuilt); isal's stub types its error as an instance.
_READ_ERRORS: tuple[type[Exception], ...] = (
    OSError, ValueError, KeyError, TypeError, IndexError, EOFError, zipfile.BadZipFile, json.JSONDecodeError,
    UnicodeDecodeError, RecursionError, cast("type[Exception]", isal_zlib.error),
)


def cache_path(sha256: str, options_key: str, directory: str | os.PathLike[str] | None = None) -> Path:
    key = hashlib.sha256(f"{__version__}|{CACHE_FORMAT}|{options_key}".encode()).hexdigest()[:16]
    return cache_dir(directory) / f"{sha256[:40]}-{key}.npz"


class PendingStore:
    """A cache file under way: the profile's columns are packed on two threads from the start.

    The caller derives its data meanwhile, then calls :meth:`finish`. Used as
    a context manager, so that the threads stop when the caller fails in
    between; nothing is written unless :meth:`finish` runs.
    """

    def __init__(self, profile: Profile) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._profile = flatten(profile, "p.", self._arrays)
        self._pool = ThreadPoolExecutor(2)  # zlib lets go of the GIL while it works
        self._packing: dict[str, Future[tuple[np.ndarray, dict[str, Any]]]] = {}
        self._submit()

    def __enter__(self) -> PendingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self) -> None:
        for k, a in self._arrays.items():
            if k not in self._packing and packable(k, a):
                self._packing[k] = self._pool.submit(pack, a)

    def finish(self, path: Path, sha256: str, options_key: str, derived: object,
               layers: tuple[str, object] | None = None) -> None:
        """Add the caller's data, wait for the packing and write the file (a failure, a full disk say, is logged).

        ``derived`` is what the caller built from the profile (the operation
        table), a frozen dataclass of arrays, tuples and scalars; ``layers``: the
        layer assignment of the operations (another such dataclass) and the key
        of the options that chose it (it is only used again under the same key).
        """
        arrays = self._arrays
        meta = {
            "version": __version__,
            "format": CACHE_FORMAT,
            "sha256": sha256,
            "options": options_key,
            "profile": self._profile,
            "derived": flatten(derived, "d.", arrays),
            "layers": None if layers is None else [layers[0], flatten(layers[1], "l.", arrays)],
        }
        self._submit()
        codecs = {}
        for k, future in self._packing.items():  # in the order of the arrays: the same file every time
            arrays[k], codecs[k] = future.result()
        meta["codecs"] = codecs
        try:
            # The document (names of programs and contexts, their data) is deflated too.
            document = json.dumps(meta).encode("utf-8")
        except (ValueError, RecursionError) as exc:  # free-form data nested too deep for the encoder
            log.warning("not caching %s: its free-form data cannot be stored (%s)", path,
                        type(exc).__name__)
            return
        arrays["__meta__"] = np.frombuffer(isal_zlib.compress(document, 1), dtype=np.uint8)
        seal(arrays, sha256)
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
                parts: tuple[type, ...] = ()) -> CacheHit[D, L] | None:
    """The cached profile, derived data and layers (of the types named), or None when absent, stale or corrupt.

    ``parts``: the dataclasses ``derived`` holds (the only other types built).

    An entry whose members (its metadata document included) do not match the
    digest it was written with, or that breaks the profile's invariants
    (:func:`check_profile`, then ``check`` on the derived data), was tampered
    with: one warning line, and the caller rebuilds it. Nothing is decoded
    from an entry before its digest matches. An entry that is no regular
    file of ours, or a cache folder others can write, is never read (see
    :mod:`popliner.profile.cache.trust`).
    """
    if not usable_dir(path.parent):
        return None
    fh = open_entry(path)
    if fh is None:
        return None
    try:
        with fh:
            arrays = read_npz(fh)  # each member's size checked against the file's before it is allocated
        _verify(arrays, sha256)
        meta = json.loads(isal_zlib.decompress(arrays.pop("__meta__")).decode("utf-8"))
        if (meta.get("version"), meta.get("format"), meta.get("sha256"), meta.get("options")) != (
            __version__, CACHE_FORMAT, sha256, options_key,
        ):
            log.debug("cache %s is stale; rebuilding", path)
            return None
        unpack_all(arrays, meta["codecs"], _KEEP_PACKED)
        profile, extra, layers = _objects(meta, arrays, derived, layers_type, parts)
        check_profile(profile)
        if check is not None:
            check(profile, extra, None if layers is None else layers[1])
    except _OtherTypes as exc:
        log.debug("cache %s: %s; rebuilding", path, exc)
        return None
    except Bad as exc:
        log.warning("cache entry %s cannot be used (%s); rebuilding it", path, exc)
        return None
    except _READ_ERRORS as exc:
        log.debug("cache %s is unreadable (%s); rebuilding", path, exc)
        return None
    # The same content may sit under another name; report the name used now.
    return CacheHit(dataclasses.replace(profile, path=profile_path), extra, layers)


#: The member holding the digest (hex, ASCII) of all the others.
_DIGEST = "__digest__"
#: Columns a cached run does not read (the operations are cached; names only in reports): left packed until
#: read (lazycol).
_KEEP_PACKED = frozenset({"p.programs.var_idx.", "p.variables.ids.", "p.variables.names.ptr."})


def seal(arrays: dict[str, np.ndarray], sha256: str) -> None:
    """Add the digest member over every other member (the metadata document included) and the profile's digest."""
    arrays.pop(_DIGEST, None)
    arrays[_DIGEST] = np.frombuffer(digest(sha256, arrays).encode("ascii"), dtype=np.uint8)


def _verify(arrays: dict[str, np.ndarray], sha256: str) -> None:
    """Take the digest member out; :class:`Bad` when the other members are not the ones it was taken of."""
    stored = arrays.pop(_DIGEST, None)
    if stored is None or stored.dtype != np.uint8 or stored.ndim != 1:
        raise KeyError("no digest")  # not an entry of this format: unreadable, rebuilt
    if stored.tobytes() != digest(sha256, arrays).encode("ascii"):
        raise Bad("its contents do not match their digest")


def _objects(meta: dict[str, Any], arrays: dict[str, np.ndarray], derived: type[D], layers_type: type[L],
             parts: tuple[type, ...] = ()) -> tuple[Profile, D, tuple[str, L] | None]:
    """The profile, derived data and layers the entry describes; :class:`_OtherTypes` when not of those types."""
    classes = {**_CLASSES, **{c.__name__: c for c in parts}, derived.__name__: derived,
               layers_type.__name__: layers_type}
    profile = unflatten(meta["profile"], arrays, _CLASSES)
    extra = unflatten(meta["derived"], arrays, classes)
    stored = meta.get("layers")
    layers = None if stored is None else (stored[0], unflatten(stored[1], arrays, classes))
    if not isinstance(profile, Profile) or not isinstance(extra, derived):
        raise _OtherTypes("it holds other types than the caller asked for")
    if layers is not None and not (isinstance(layers[0], str) and isinstance(layers[1], layers_type)):
        raise _OtherTypes("its layers hold other types than the caller asked for")
    return profile, extra, layers


class _OtherTypes(Exception):
    """The entry holds other types than the caller asked for (written by another caller): a miss."""
