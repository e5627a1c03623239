"""Checks that a cached profile's arrays still mean what the loader made them mean.

A cache entry passes its digest check unless someone changed it and wrote
the digest again; these checks make sure that even then every index the
code later follows stays in range (a tile id past the last tile, a pointer
past the end of its column, a parent chain that loops) and so never crashes
or hangs a run: the entry is rebuilt instead. Each check is a few vectorised
passes over a column, cheap beside reading it.
"""

from __future__ import annotations

import numpy as np

from popliner.profile.lazycol import Deferred, deferred
from popliner.profile.model import PROGRAM_TYPES, Profile
from popliner.profile.tilevector import RunTable

__all__ = ["Bad", "check_csr", "check_len", "check_packed_csr", "check_profile", "check_range"]


class Bad(ValueError):
    """A cached array that breaks the profile's invariants (the entry is rebuilt)."""


def check_len(name: str, a: object, n: int) -> None:
    if len(a) != n:  # type: ignore[arg-type]
        raise Bad(f"{name} has {len(a)} entries, expected {n}")  # type: ignore[arg-type]


def check_range(name: str, a: np.ndarray, lo: int, hi: int) -> None:
    """Every item in [lo, hi); integers only."""
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "iu":
        raise Bad(f"{name} is not an integer array")
    if a.size and (int(a.min()) < lo or int(a.max()) >= hi):
        raise Bad(f"{name} holds values outside [{lo}, {hi})")


def check_csr(name: str, ptr: np.ndarray, idx: np.ndarray, rows: int, hi: int) -> None:
    """``ptr`` (rows + 1, non-decreasing, 0 to len(idx)) over ``idx`` (values in [0, hi))."""
    check_len(f"{name} pointers", ptr, rows + 1)
    check_range(f"{name} pointers", ptr, 0, len(idx) + 1)
    if int(ptr[0]) != 0 or int(ptr[-1]) != len(idx) or bool((np.diff(ptr) < 0).any()):
        raise Bad(f"{name} pointers are not a CSR index")
    check_range(name, idx, 0, hi)


def _check_len_packed(name: str, obj: object, field: str, n: int) -> None:
    """:func:`check_len` of a field, from its recorded length while it is still packed."""
    packed = deferred(obj, field)
    if packed is None:
        check_len(name, getattr(obj, field), n)
    elif packed.length != n:
        raise Bad(f"{name} has {packed.length} entries, expected {n}")


def check_packed_csr(name: str, ptr: np.ndarray, idx: Deferred, rows: int, hi: int) -> None:
    """:func:`check_csr` of a column left packed, from its length and range."""
    check_len(f"{name} pointers", ptr, rows + 1)
    check_range(f"{name} pointers", ptr, 0, idx.length + 1)
    if int(ptr[0]) != 0 or int(ptr[-1]) != idx.length or bool((np.diff(ptr) < 0).any()):
        raise Bad(f"{name} pointers are not a CSR index")
    if idx.dtype.kind not in "iu":
        raise Bad(f"{name} is not an integer array")
    if idx.length and (idx.lo < 0 or idx.hi >= hi):
        raise Bad(f"{name} holds values outside [0, {hi})")


def _check_runs(name: str, table: RunTable, rows: int, tiles: int, keys: int | None = None) -> None:
    n = len(table.first)
    check_len(f"{name} pointers", table.ptr, rows + 1)
    if table.ptr.size and (int(table.ptr[0]) != 0 or int(table.ptr[-1]) != n or bool((np.diff(table.ptr) < 0).any())):
        raise Bad(f"{name} pointers are not a CSR index")
    check_len(f"{name} stops", table.stop, n)
    check_len(f"{name} values", table.value, n)
    check_range(f"{name} first tiles", table.first, 0, tiles)
    check_range(f"{name} stop tiles", table.stop, 1, tiles + 1)
    if bool((table.stop <= table.first).any()):
        raise Bad(f"{name} has empty runs")
    if keys is not None:
        if table.key is None:
            raise Bad(f"{name} has no keys")
        check_len(f"{name} keys", table.key, n)
        check_range(f"{name} keys", table.key, 0, keys)


def _check_acyclic(parent: np.ndarray) -> None:
    """The parent links end at a root (-1) from every node: pointer doubling, log2(n) passes."""
    anc = parent.astype(np.int64)
    for _ in range(max(len(anc), 1).bit_length() + 1):
        if not bool((anc >= 0).any()):
            return
        anc = np.where(anc >= 0, anc[np.maximum(anc, 0)], -1)
    if bool((anc >= 0).any()):
        raise Bad("the debug-context parent links form a cycle")


def check_profile(p: Profile) -> None:
    """Raise :class:`Bad` when an index in ``p`` points outside what it indexes."""
    tiles = p.target.tiles_per_ipu
    if not isinstance(tiles, int) or not 1 <= tiles <= 1 << 16:
        raise Bad("tiles per IPU out of range")
    v, progs, ctx, vt = p.variables, p.programs, p.contexts, p.vertex_types
    steps, classes, n_prog = p.num_steps, p.num_classes, progs.count
    for col in ("bytes", "tile", "klass", "recompute_tensor"):
        check_len(f"variables.{col}", getattr(v, col), v.count)
    _check_len_packed("variables.ids", v, "ids", v.count)
    _check_len_packed("variable name pointers", v.names, "ptr", v.count + 1)
    check_range("variable tiles", v.tile, 0, tiles)
    check_range("variable classes", v.klass, 0, max(classes, 0))
    check_range("variable bytes", v.bytes, 0, 1 << 62)
    check_len("interval ends", p.iv_end, len(p.iv_start))
    check_range("liveness class pointers", p.class_ptr, 0, len(p.iv_start) + 1)
    if classes < 0 or (p.class_ptr.size and (int(p.class_ptr[0]) != 0 or int(p.class_ptr[-1]) != len(p.iv_start)
                                             or bool((np.diff(p.class_ptr) < 0).any()))):
        raise Bad("liveness class pointers are not a CSR index")
    check_range("interval starts", p.iv_start, 0, steps + 1)
    check_range("interval ends", p.iv_end, 0, steps + 1)
    if bool((p.iv_end < p.iv_start).any()):
        raise Bad("an interval ends before it starts")
    for col in ("type", "context", "repeat_count"):
        check_len(f"programs.{col}", getattr(progs, col), n_prog)
    check_len("program names", progs.names, n_prog)
    check_range("program types", progs.type, 0, len(PROGRAM_TYPES))
    check_range("program contexts", progs.context, -1, ctx.count)
    check_range("repeat counts", progs.repeat_count, 0, 1 << 62)
    check_csr("program children", progs.child_ptr, progs.child_idx, n_prog, n_prog)
    packed = deferred(progs, "var_idx")
    if packed is None:
        check_csr("program variables", progs.var_ptr, progs.var_idx, n_prog, v.count)
    else:  # checked on what a streaming pass found, so that it stays packed
        check_packed_csr("program variables", progs.var_ptr, packed, n_prog, v.count)
    for name in ("control", "exchange", "cycles"):
        _check_runs(f"program {name}", getattr(progs, name), n_prog, tiles)
    _check_runs("program vertices", progs.vertices, n_prog, tiles, keys=len(vt.names))
    check_len("vertex sizes", vt.size, len(vt.names))
    _check_runs("vertex code", vt.code, len(vt.names), tiles)
    check_range("control programs", p.control_programs, 0, n_prog)
    check_range("steps", p.steps, 0, n_prog)
    for col in ("layer", "name", "data"):
        check_len(f"debug context {col}s", getattr(ctx, col), ctx.count)
    check_range("debug context parents", ctx.parent, -1, ctx.count)
    _check_acyclic(ctx.parent)
    for key, column in (p.tile_memory or {}).items():
        check_len(f"tile memory {key}", column, tiles)
