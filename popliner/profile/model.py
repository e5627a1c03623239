"""The loaded profile: plain frozen dataclasses over numpy arrays.

Ids from the document (program ids, variable ids, debug-context ids) are
replaced by positions at load time; every cross-reference below is an index.
There is no Python object per variable: variables, liveness intervals,
program variable lists and all TileVectors are columnar arrays.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from isal import isal_zlib

from popliner.profile.lazycol import make_lazy
from popliner.profile.tilevector import RunTable

__all__ = ["PROGRAM_TYPES", "Contexts", "NameTable", "Profile", "Programs", "Target", "Variables", "VertexTypes",
           "recompute_tensors"]

PROGRAM_TYPES: tuple[str, ...] = (
    "Sequence",
    "Repeat",
    "Call",
    "If",
    "Switch",
    "OnTileExecute",
    "DoExchange",
    "GlobalExchange",
    "StreamCopyBegin",
    "StreamCopyMid",
    "StreamCopyEnd",
    "Copy",
    "Sync",
    "Other",
)
TYPE_CODE = {name: i for i, name in enumerate(PROGRAM_TYPES)}
DO_EXCHANGE = TYPE_CODE["DoExchange"]


@dataclass(frozen=True)
class Target:
    tiles_per_ipu: int
    num_tiles: int
    num_ipus: int
    bytes_per_tile: int
    clock_hz: float
    arch: str | None = None


@dataclass(frozen=True, eq=False)
class VertexTypes:
    names: tuple[str, ...]
    size: np.ndarray  # int64 [types], state bytes per instance
    code: RunTable  # one row per type: code bytes per tile


@dataclass(frozen=True, eq=False)
class Programs:
    ids: np.ndarray  # int64 [programs], the document's ids
    type: np.ndarray  # int8 codes into PROGRAM_TYPES
    names: tuple[str, ...]
    child_ptr: np.ndarray  # CSR over child indices
    child_idx: np.ndarray
    context: np.ndarray  # int64 context index, -1 when absent
    control: RunTable
    exchange: RunTable
    cycles: RunTable
    vertices: RunTable  # key = vertex type index, value = instance count
    var_ptr: np.ndarray  # CSR over variable indices
    var_idx: np.ndarray
    repeat_count: np.ndarray  # int64, 1 when absent
    has_cycles: bool

    @property
    def count(self) -> int:
        return len(self.ids)

    def children(self, p: int) -> np.ndarray:
        return self.child_idx[self.child_ptr[p] : self.child_ptr[p + 1]]

    def is_leaf(self) -> np.ndarray:
        leaf: np.ndarray = np.diff(self.child_ptr) == 0
        return leaf


#: Raw bytes of names per compressed chunk in a packed NameTable.
NAME_CHUNK_BYTES = 1 << 22


@dataclass(frozen=True, eq=False)
class NameTable:
    """Variable names, UTF-8, read one at a time (only reports need them).

    The bytes of name i are ``blob[ptr[i] + i*pad + lead : ptr[i+1] + i*pad + lead]``:
    ``pad`` and ``lead`` let the blob be a list of strings cut straight out of
    the document (quotes and commas left in). A packed table (the cache's
    form) holds the blob as zlib chunks of ``chunk_bytes`` raw bytes each,
    starting at ``chunk_ptr`` offsets; a chunk is inflated the first time a
    name in it is read.
    """

    blob: np.ndarray  # uint8
    ptr: np.ndarray  # int64 [names + 1]; all zero when the profile has no names
    lead: int = 0
    pad: int = 0
    chunk_ptr: np.ndarray | None = None  # int64 [chunks + 1] into blob, when packed
    chunk_bytes: int = 0
    _inflated: dict[int, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def get(self, i: int) -> bytes:
        """The UTF-8 bytes of name ``i`` (empty when it has none)."""
        a, b = int(self.ptr[i]), int(self.ptr[i + 1])
        if a == b:
            return b""
        off = self.lead + i * self.pad
        lo, hi = a + off, b + off
        if self.chunk_ptr is None:
            return bytes(self.blob[lo:hi])
        first, last = lo // self.chunk_bytes, (hi - 1) // self.chunk_bytes
        raw = b"".join(self._chunk(c) for c in range(first, last + 1))
        base = first * self.chunk_bytes
        return raw[lo - base : hi - base]

    def find(self, needle: bytes) -> list[tuple[int, int]]:
        """Every occurrence of ``needle`` inside a name: (name index, offset in that name), in order.

        Scans the blob once (a packed one chunk by chunk, without keeping the
        chunks); occurrences that straddle two names are not counted.
        """
        n = len(self.ptr) - 1
        if n <= 0 or int(self.ptr[-1]) == 0 or not needle:
            return []
        hits: list[int] = []
        pattern = re.compile(re.escape(needle))  # the regex engine scans faster than bytes.find here
        for base, raw in self._pieces(len(needle) - 1):
            hits += [base + m.start() for m in pattern.finditer(raw)]
        if not hits:
            return []
        index = np.arange(n, dtype=np.int64)
        starts = self.ptr[:-1] + index * self.pad + self.lead
        stops = self.ptr[1:] + index * self.pad + self.lead
        at = np.asarray(hits, np.int64)
        owner = np.searchsorted(starts, at, side="right") - 1
        ok = (owner >= 0) & (at + len(needle) <= stops[np.maximum(owner, 0)])
        return [(int(i), int(h - starts[i])) for i, h in zip(owner[ok], at[ok])]

    def _pieces(self, overlap: int) -> list[tuple[int, bytes | memoryview]]:
        """The raw blob as (offset, bytes) pieces, each with ``overlap`` bytes of the next one."""
        if self.chunk_ptr is None:
            return [(0, self.blob.data)]  # searched in place: no copy
        out: list[tuple[int, bytes | memoryview]] = []
        count = len(self.chunk_ptr) - 1
        nxt = self._chunk(0, keep=False) if count else b""
        for c in range(count):
            raw, nxt = nxt, (self._chunk(c + 1, keep=False) if c + 1 < count else b"")
            out.append((c * self.chunk_bytes, raw + nxt[:overlap]))
        return out

    def _chunk(self, c: int, keep: bool = True) -> bytes:
        """Chunk ``c`` inflated; ``keep``: kept for the next read (a scan of every chunk keeps none)."""
        raw = self._inflated.get(c)
        if raw is None:
            assert self.chunk_ptr is not None
            raw = isal_zlib.decompress(self.blob[int(self.chunk_ptr[c]) : int(self.chunk_ptr[c + 1])])
            if keep:
                self._inflated[c] = raw
        return raw

    def packed(self, chunk_bytes: int = NAME_CHUNK_BYTES) -> NameTable:
        """The same names with the blob as zlib chunks (compressed on two threads)."""
        if self.chunk_ptr is not None:
            return self
        raw = self.blob
        parts = [raw[k : k + chunk_bytes] for k in range(0, len(raw), chunk_bytes)]
        with ThreadPoolExecutor(2) as pool:  # zlib lets go of the GIL while it compresses
            chunks = list(pool.map(lambda part: isal_zlib.compress(part, 1), parts))
        ptr = np.zeros(len(chunks) + 1, np.int64)
        np.cumsum([len(c) for c in chunks], out=ptr[1:])
        blob = np.frombuffer(b"".join(chunks), np.uint8)
        return NameTable(blob, self.ptr, self.lead, self.pad, ptr, chunk_bytes)


#: Bytes that continue a word after ``__re`` (``str.isalnum`` of the byte as a Latin-1 character, or ``_``).
_WORD_BYTES = bytes(b for b in range(256) if chr(b).isalnum() or b == 0x5F)


def recompute_tensors(names: NameTable) -> np.ndarray:
    """Bool per variable: its name holds ``__re`` followed by the end of the name or a non-word byte.

    PopART names the tensors of a recompute clone ``<id>__re``; the training
    view needs to know them. Computed once at load (and cached) because it
    reads every name.
    """
    out = np.zeros(len(names.ptr) - 1, bool)
    for var, at in names.find(b"__re"):
        name = names.get(var)
        after = at + 4
        if after == len(name) or name[after] not in _WORD_BYTES:
            out[var] = True
    return out


@dataclass(frozen=True, eq=False)
class Variables:
    ids: np.ndarray  # int64
    bytes: np.ndarray  # int64
    tile: np.ndarray  # int32
    klass: np.ndarray  # int32, index into liveness classes
    names: NameTable
    recompute_tensor: np.ndarray  # bool, see recompute_tensors()

    @property
    def count(self) -> int:
        return len(self.bytes)  # not ids: a cached load leaves them packed (every column has this length)

    def replace(self, **columns: np.ndarray) -> Variables:
        """The same variables with some columns replaced; a column still packed stays packed (as ``vars`` holds it)."""
        return Variables(**{**vars(self), **columns})

    def name(self, i: int) -> str:
        raw = self.names.get(i)
        if not raw:
            return f"var#{int(self.ids[i])}"
        return raw.decode("utf-8")


@dataclass(frozen=True, eq=False)
class Contexts:
    ids: np.ndarray  # int64
    parent: np.ndarray  # int64 index, -1 for a root
    layer: tuple[str, ...]
    name: tuple[str, ...]
    data: tuple[dict[str, Any] | None, ...]

    @property
    def count(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, eq=False)
class Profile:
    """One compilation of a model for one IPU, as popliner needs it."""

    path: str
    sha256: str
    target: Target
    vertex_types: VertexTypes
    programs: Programs
    control_programs: np.ndarray  # int64 program indices, roots in order
    steps: np.ndarray  # int64 program index per liveness step
    variables: Variables
    class_ptr: np.ndarray  # CSR over liveness intervals per class
    iv_start: np.ndarray  # int64
    iv_end: np.ndarray  # int64, exclusive
    contexts: Contexts
    tile_memory: dict[str, np.ndarray] | None = None  # dense per-tile ground truth
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def tiles(self) -> int:
        return self.target.tiles_per_ipu

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def num_classes(self) -> int:
        return len(self.class_ptr) - 1

    def always_live_classes(self) -> np.ndarray:
        """Bool per class: its intervals cover every step."""
        n = self.num_steps
        lens = (self.iv_end - self.iv_start).astype(np.int64)
        covered = np.bincount(np.repeat(np.arange(self.num_classes), np.diff(self.class_ptr)),
                              weights=lens, minlength=self.num_classes)
        return (covered >= n) & (n > 0)


# Read only to derive the operations (which a cached run has already) or to name a variable in a report:
# a cached load leaves them packed (popliner.profile.lazycol).
make_lazy(Programs, "var_idx")
make_lazy(Variables, "ids")
make_lazy(NameTable, "ptr")
