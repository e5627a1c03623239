"""The ``livenessClasses`` and ``variables`` sections: integer columns checked and turned into arrays.

The ``variables`` columns come either from the parsed document (lists) or
from the column reader (arrays read straight from the text); from there on
both go through the same checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from popliner.profile.build_state import VarIndex
from popliner.profile.model import NameTable, Variables, recompute_tensors
from popliner.profile.rules import NotFast, is_int64, kind, only_ints
from popliner.profile.tilevector import MAX_VALUE

if TYPE_CHECKING:
    from popliner.profile.build_state import BuildState as Builder

__all__ = ["build_classes", "build_variables"]

_INT_COLUMNS = ("id", "bytes", "tile", "class")
#: Variables scattered at once when the ids are a permutation.
_BLOCK = 1 << 20


def build_classes(b: Builder, raw: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lens = np.zeros(len(raw), np.int64)
    flat: list[Any] = []
    for i, intervals in enumerate(raw):
        if not isinstance(intervals, list):
            b.fail(f"livenessClasses[{i}]", f"expected a list of [start, end] intervals, got {kind(intervals)}")
        lens[i] = len(intervals)
        flat.extend(intervals)
    ptr = np.zeros(len(raw) + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    if not flat:
        return ptr, np.zeros(0, np.int64), np.zeros(0, np.int64)
    try:
        arr = np.asarray(flat, dtype=np.int64)
        ok = arr.ndim == 2 and arr.shape[1] == 2 and all(type(v) is int for pair in flat for v in pair)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        k = next((j for j, p in enumerate(flat) if not _is_int_pair(p)), -1)
        if k < 0:
            # Integer pairs that failed to convert: a bound beyond int64, far outside any step.
            k = next(j for j, p in enumerate(flat) if not all(map(is_int64, p)))
            b.fail(_class_place(ptr, k),
                   f"interval [{flat[k][0]}, {flat[k][1]}) is outside the steps [0, {b.num_steps})")
        b.fail(_class_place(ptr, k), "expected an interval [start, end] of two integers")
    start, end = arr[:, 0], arr[:, 1]
    reversed_ = np.flatnonzero(end < start)
    if reversed_.size:
        k = int(reversed_[0])
        b.fail(_class_place(ptr, k), f"interval [{start[k]}, {end[k]}) ends before it starts")
    bad = np.flatnonzero((start < 0) | (end > b.num_steps))
    if bad.size:
        k = int(bad[0])
        b.fail(_class_place(ptr, k), f"interval [{start[k]}, {end[k]}) is outside the steps [0, {b.num_steps})")
    return _merge_intervals(ptr, start, end)


def _class_place(ptr: np.ndarray, k: int) -> str:
    c = int(np.searchsorted(ptr, k, side="right") - 1)
    return f"livenessClasses[{c}][{k - int(ptr[c])}]"


def _is_int_pair(p: Any) -> bool:
    return isinstance(p, list) and len(p) == 2 and all(type(v) is int for v in p)


def _merge_intervals(ptr: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort each class's intervals and merge overlaps, dropping empty ones.

    Liveness is the union of a class's intervals; merged, a sweep can add a
    class's bytes once per interval without double counting.
    """
    cls = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    keep = end > start
    cls, start, end = cls[keep], start[keep], end[keep]
    order = np.lexsort((start, cls))
    cls, start, end = cls[order], start[order], end[order]
    if len(cls) > 1:
        same = cls[1:] == cls[:-1]
        # Running max of ends within a class: offset each class so one global
        # maximum.accumulate cannot leak across class boundaries.
        offset = cls.astype(np.int64) * (int(end.max()) + 1)
        run_end = np.maximum.accumulate(end + offset) - offset
        new = np.ones(len(cls), bool)
        new[1:] = ~(same & (start[1:] <= run_end[:-1]))
        group = np.cumsum(new) - 1
        starts = start[new]
        ends = np.zeros(int(group[-1]) + 1, np.int64)
        np.maximum.at(ends, group, end)
        cls = cls[new]
        start, end = starts, ends
    new_ptr = np.zeros(len(ptr), np.int64)
    np.cumsum(np.bincount(cls, minlength=len(ptr) - 1), out=new_ptr[1:])
    return new_ptr, start.astype(np.int64), end.astype(np.int64)


def build_variables(b: Builder, v: dict[str, Any], num_classes: int) -> Variables:
    if b.extracted is not None:
        cols = b.extracted.columns
    else:
        cols = {}
        for key in _INT_COLUMNS:
            col = b.need(v, key, "variables", (list,), "a list of integers")
            cols[key] = _int_column(b, col, f"variables.{key}")
    n = len(cols["id"])
    for key, arr in cols.items():
        if len(arr) != n:
            b.fail(f"variables.{key}", f"has {len(arr)} entries but variables.id has {n}")
    b.first_bad(cols["bytes"] < 0, "variables.bytes", "negative size")
    b.first_bad(cols["bytes"] > MAX_VALUE, "variables.bytes", f"size above {MAX_VALUE} bytes")
    b.first_bad((cols["tile"] < 0) | (cols["tile"] >= b.tiles), "variables.tile", f"tile outside [0, {b.tiles})")
    b.first_bad((cols["class"] < 0) | (cols["class"] >= num_classes), "variables.class",
                f"no such liveness class (there are {num_classes})")
    # Narrowed one at a time, each int64 column let go as soon as it is (the column reader's too): its
    # memory is free again before the next one and the variable index are made.
    tile = cols.pop("tile").astype(np.int32, copy=False)  # the column reader's are int32 already
    klass = cols.pop("class").astype(np.int32, copy=False)
    b.var_index = _var_index(b, cols["id"])
    if b.extracted is not None:
        names, recompute = _extracted_names(b, n)
    else:
        names = NameTable(*_names(b, v.get("name"), n))
        recompute = recompute_tensors(names)
    return Variables(ids=cols["id"], bytes=cols["bytes"], tile=tile, klass=klass, names=names,
                     recompute_tensor=recompute)


def _var_index(b: Builder, ids: np.ndarray) -> VarIndex:
    n = len(ids)
    # Ids 0..n-1 in order (the usual numbering): an id is its own index, nothing to scatter or gather.
    in_order = _rising_from_zero(ids)
    order = np.arange(n, dtype=np.int64) if in_order else _permutation_order(ids)
    dense = order is not None
    if order is None:
        order = np.argsort(ids, kind="stable")
        dup = np.flatnonzero(ids[order][1:] == ids[order][:-1])
        if dup.size:
            i = int(order[dup[0] + 1])
            b.fail(f"variables.id[{i}]", f"variable id {ids[i]} is used twice")
    # With ids 0..n-1 the sorted ids are 0..n-1 again and never read: no gather of n ids.
    return VarIndex(order, ids[:0] if dense else ids[order], dense, in_order)


def _extracted_names(b: Builder, n: int) -> tuple[NameTable, np.ndarray]:
    """The names the column reader took out (packed already), and their recompute flags."""
    assert b.extracted is not None
    names = b.extracted.names
    if names is None:
        return NameTable(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)), np.zeros(n, bool)
    if len(names.ptr) != n + 1:
        raise NotFast  # the ordinary path words the length mismatch
    assert b.extracted.recompute is not None
    return names, b.extracted.recompute


def _names(b: Builder, names: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    if names is None:
        return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    b.check(names, "variables.name", (list,), "a list of strings")
    if len(names) != n:
        b.fail("variables.name", f"has {len(names)} entries but variables.id has {n}")
    try:
        encoded = [s.encode("utf-8") for s in names]
    except AttributeError:
        k = next(i for i, s in enumerate(names) if not isinstance(s, str))
        b.fail(f"variables.name[{k}]", f"expected a string, got {kind(names[k])}")
    except UnicodeEncodeError:
        k = next(i for i, s in enumerate(names) if not _encodable(s))
        b.fail(f"variables.name[{k}]", "not valid Unicode (a lone surrogate escape)")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=ptr[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), ptr


def _int_column(b: Builder, col: list[Any], where: str) -> np.ndarray:
    try:
        arr = np.asarray(col, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        k = next((i for i, x in enumerate(col) if not is_int64(x)), 0)
        if k < len(col) and type(col[k]) is int:
            b.fail(f"{where}[{k}]", f"{col[k]} does not fit in a 64-bit integer")
        b.fail(f"{where}[{k}]", f"expected an integer, got {kind(col[k]) if k < len(col) else 'nothing'}")
    if arr.ndim != 1:
        b.fail(where, "expected a flat list of integers")
    # Floats (and booleans) convert silently under dtype=int64: look for them explicitly.
    if len(col) and not only_ints(col):
        k = next(i for i, x in enumerate(col) if type(x) is not int)
        b.fail(f"{where}[{k}]", f"expected an integer, got {kind(col[k])}")
    return arr


def _rising_from_zero(ids: np.ndarray) -> bool:
    """``ids`` is exactly 0, 1, ..., n-1: n distinct rising integers from 0 to n-1 can be nothing else."""
    n = len(ids)
    return bool(n and int(ids[0]) == 0 and int(ids[-1]) == n - 1 and np.greater(ids[1:], ids[:-1]).all())


def _permutation_order(ids: np.ndarray) -> np.ndarray | None:
    """``argsort(ids)`` when the ids are exactly 0..n-1 (the usual numbering), else None.

    With no repeats the stable argsort is the inverse permutation, built in
    one scatter instead of a sort.
    """
    n = len(ids)
    if n == 0 or int(ids.min()) != 0 or int(ids.max()) != n - 1:
        return None
    seen = np.zeros(n, bool)
    seen[ids] = True
    if not seen.all():
        return None  # a repeated id: the sort path names it
    order = np.empty(n, np.int64)
    # Scattered a block at a time: an arange as long as the ids would be one more column's memory at the peak.
    for lo in range(0, n, _BLOCK):
        hi = min(n, lo + _BLOCK)
        order[ids[lo:hi]] = np.arange(lo, hi, dtype=np.int64)
    return order


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
