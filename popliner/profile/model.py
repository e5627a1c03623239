"""The loaded profile: plain frozen dataclasses over numpy arrays.

Ids from the document (program ids, variable ids, debug-context ids) are
replaced by positions at load time; every cross-reference below is an index.
There is no Python object per variable: variables, liveness intervals,
program variable lists and all TileVectors are columnar arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popliner.profile.tilevector import RunTable

__all__ = ["PROGRAM_TYPES", "Contexts", "Profile", "Programs", "Target", "Variables", "VertexTypes"]

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
ON_TILE_EXECUTE = TYPE_CODE["OnTileExecute"]


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
        return np.diff(self.child_ptr) == 0


@dataclass(frozen=True, eq=False)
class Variables:
    ids: np.ndarray  # int64
    bytes: np.ndarray  # int64
    tile: np.ndarray  # int32
    klass: np.ndarray  # int32, index into liveness classes
    name_blob: np.ndarray  # uint8, UTF-8 names back to back (empty when absent)
    name_ptr: np.ndarray  # int64 [vars+1] offsets into name_blob (all zero when absent)

    @property
    def count(self) -> int:
        return len(self.ids)

    def name(self, i: int) -> str:
        a, b = int(self.name_ptr[i]), int(self.name_ptr[i + 1])
        if a == b:
            return f"var#{int(self.ids[i])}"
        return bytes(self.name_blob[a:b]).decode("utf-8")


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
