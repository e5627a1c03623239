"""The cache file's layout: an ``np.savez`` archive of arrays, and dataclasses turned into arrays plus JSON.

:func:`flatten` describes a frozen dataclass of arrays, tuples and scalars
as a JSON-able document whose arrays go into the archive by name;
:func:`unflatten` builds it again from the classes the caller names.
:func:`read_npz` reads the archive member by member, each array in one
``readinto`` with its CRC-32 checked, which is several times faster than
``np.load`` on a large profile (``np.load`` copies each member through
small buffers).
"""

from __future__ import annotations

import dataclasses
import io
import math
import struct
import zipfile
import zlib
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from popliner.profile.model import NameTable

__all__ = ["flatten", "read_npz", "unflatten"]


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
