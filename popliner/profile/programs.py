"""The ``programs`` section: one pass over the programs, then their TileVectors and references in bulk.

Every program goes through :func:`popliner.profile.rules.program_fields`
(the one copy of the rules for a program's keys and their defaults). The
TileVectors are collected in that pass and read per table afterwards: in
bulk when they take the usual forms, else one by one through the reference
decoder (:func:`~popliner.profile.tilevector.decode_tilevector`), which accepts the unusual forms
and words every fault. Both give the same runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from popliner.profile.model import Programs, VertexTypes
from popliner.profile.rules import NotFast, back_edge, is_int64, kind, only_ints, program_fields, vertex_type_of
from popliner.profile.tilevector import MAX_VALUE, RunTable, RunTableBuilder, decode_tilevector

if TYPE_CHECKING:
    from popliner.profile.build_state import BuildState as Builder

__all__ = ["build_programs"]

_PROGRAM_VECTORS = ("controlCode", "exchangeCode", "cycles")


@dataclass
class _Vectors:
    """The TileVector objects of one table, in document order, and where each sits."""

    rows: list[int]
    objs: list[Any]
    places: list[str]  # "controlCode" or "vertices[k][1]" (after "programs[row].")
    keys: list[int] | None = None  # vertex types (the vertices table only)


@dataclass
class _Rows:
    ids: np.ndarray
    types: np.ndarray
    names: tuple[str, ...]
    context: np.ndarray
    repeat: np.ndarray
    child_ids: tuple[Any, ...]
    var_ids: list[Any]  # the programs' own lists (none when the column reader took them)
    var_lens: np.ndarray
    vectors: dict[str, _Vectors]
    has_cycles: bool


def build_programs(b: Builder, raw: list[Any], vtypes: VertexTypes) -> Programs:
    n = len(raw)
    fast_lens = None if b.extracted is None else b.extracted.program_var_lens
    rows = _read_rows(b, raw, len(vtypes.names), fast_lens)
    tables = {k: _table(b, rows.vectors[k], n) for k in (*_PROGRAM_VECTORS, "vertices")}
    index = b.index_of(rows.ids, "programs", "program")
    b.prog_index = index
    child_ptr, child_idx = _children(b, rows.child_ids, index)
    _check_cycles(child_ptr, child_idx, b, rows.ids)
    var_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(rows.var_lens, out=var_ptr[1:])
    if b.extracted is not None:
        var_idx = _var_positions(b, b.extracted.program_vars, var_ptr)
    else:
        var_idx = _var_refs(b, rows.var_ids, var_ptr)
    return Programs(ids=rows.ids, type=rows.types, names=rows.names, child_ptr=child_ptr, child_idx=child_idx,
                    context=rows.context, control=tables["controlCode"], exchange=tables["exchangeCode"],
                    cycles=tables["cycles"], vertices=tables["vertices"], var_ptr=var_ptr, var_idx=var_idx,
                    repeat_count=rows.repeat, has_cycles=rows.has_cycles)


def _read_rows(b: Builder, raw: list[Any], num_types: int, fast_lens: np.ndarray | None) -> _Rows:
    """One pass: each program's own keys checked (and defaulted), its TileVectors and lists collected."""
    fields: list[tuple[int, int, str, Any, int, int]] = []  # per program: program_fields' answer
    var_ids: list[Any] = []
    var_lens: list[int] = []
    vectors = {k: _Vectors([], [], []) for k in _PROGRAM_VECTORS}
    verts = vectors["vertices"] = _Vectors([], [], [], [])
    assert verts.keys is not None
    lens = None if fast_lens is None else fast_lens.tolist()
    taken = 0  # lists the column reader took out, met so far
    ctx_index = b.ctx_index
    has_cycles = False
    for i, p in enumerate(raw):
        fields.append(program_fields(b, p, i, ctx_index))
        for key in _PROGRAM_VECTORS:
            if key in p:
                table = vectors[key]
                table.rows.append(i)
                table.objs.append(p[key])
                table.places.append(key)
        has_cycles = has_cycles or "cycles" in p
        entries = p.get("vertices")
        if entries is not None:
            if type(entries) is not list:
                b.check(entries, f"programs[{i}].vertices", (list,), "a list of [vertexTypeId, TileVector]")
            for k, entry in enumerate(entries):
                verts.keys.append(vertex_type_of(b, entry, f"programs[{i}].vertices[{k}]", num_types))
                verts.rows.append(i)
                verts.objs.append(entry[1])
                verts.places.append(f"vertices[{k}][1]")
        pvars = p.get("vars")
        length = 0
        if pvars is None:
            pass  # absent or null: no variables
        elif lens is not None and type(pvars) is int:
            # The k-th list the column reader took out must be this program's, in order.
            if pvars != taken or taken >= len(lens):
                raise NotFast
            length = lens[taken]
            taken += 1
        elif type(pvars) is list:
            if lens is not None:
                raise NotFast  # a list the column reader did not see
            var_ids.append(pvars)
            length = len(pvars)
        else:
            b.check(pvars, f"programs[{i}].vars", (list,), "a list of variable ids")
        var_lens.append(length)
    if lens is not None and taken != len(lens):
        raise NotFast  # a list was taken from somewhere other than a program
    ids, types, names, children, context, repeat = zip(*fields, strict=True) if fields else ((),) * 6
    return _Rows(np.array(ids, np.int64), np.array(types, np.int8), names, np.array(context, np.int64),
                 np.array(repeat, np.int64), children, var_ids, np.array(var_lens, np.int64), vectors, has_cycles)


def _table(b: Builder, vec: _Vectors, n: int) -> RunTable:
    """One row per program: in bulk when every TileVector takes the usual form, else one by one."""
    bulk = bulk_runs(vec.rows, vec.objs, vec.keys, n, b.tiles)
    if bulk is not None:
        return bulk
    out = RunTableBuilder(keyed=vec.keys is not None)
    at = 0
    for row in range(n):
        while at < len(vec.rows) and vec.rows[at] == row:
            first, stop, value = decode_tilevector(vec.objs[at], b.tiles, f"programs[{row}].{vec.places[at]}", b.err)
            out.add(first, stop, value, None if vec.keys is None else [vec.keys[at]] * len(first))
            at += 1
        out.end_row()
    return out.build()


class _Unusual(Exception):
    """A TileVector the bulk reader does not take: the table is read one vector at a time."""


def bulk_runs(rows: list[int], objs: list[Any], keys: list[int] | None, n: int, tiles: int,
              chunk_cells: int = 1 << 21) -> RunTable | None:
    """One table (a row per program) from TileVectors: dense, or ``{"runs": ...}`` or ``{"sparse": ...}`` in order.

    Accepts runs in order within tiles, sparse tiles ascending, values in range, and dense lists of
    ``tiles`` integers, and gives the runs :func:`~popliner.profile.tilevector.decode_tilevector` gives,
    zero values dropped; None on anything else. Dense vectors are read
    ``chunk_cells`` values at a time (8 bytes each), which bounds the arrays made for them.
    """
    try:
        return _bulk_runs(rows, objs, keys, n, tiles, chunk_cells)
    except _Unusual:
        return None


def _bulk_runs(rows: list[int], objs: list[Any], keys: list[int] | None, n: int, tiles: int,
               chunk_cells: int) -> RunTable:
    runs_at: list[int] = []
    runs_lists: list[Any] = []
    sparse_at: list[int] = []
    sparse_lists: list[Any] = []
    dense_at: list[int] = []
    dense_lists: list[Any] = []
    for k, obj in enumerate(objs):
        if type(obj) is list:  # a value per tile
            dense_at.append(k)
            dense_lists.append(obj)
            continue
        if type(obj) is not dict or len(obj) != 1:
            raise _Unusual
        runs = obj.get("runs")
        if type(runs) is list:
            runs_at.append(k)
            runs_lists.append(runs)
            continue
        sparse = obj.get("sparse")
        if runs is not None or type(sparse) is not list:
            raise _Unusual
        sparse_at.append(k)
        sparse_lists.append(sparse)
    parts = [(runs_at, *_int_rows(runs_lists, 3))]
    if sparse_lists:
        # A sparse entry [tile, value] is the run [tile, tile + 1, value]; "tiles ascending
        # from 0" is then "each run starts at or after the previous one's stop".
        pairs, lens = _int_rows(sparse_lists, 2)
        parts.append((sparse_at, np.stack([pairs[:, 0], pairs[:, 0] + 1, pairs[:, 1]], axis=1), lens))
    if dense_lists:
        parts.append((dense_at, *_dense_rows(dense_lists, tiles, chunk_cells)))
    arr, counts = _in_object_order(parts, len(objs))
    first, stop, value = arr[:, 0], arr[:, 1], arr[:, 2]
    prev = np.empty_like(stop)
    if len(prev):
        prev[1:] = stop[:-1]
        starts = np.cumsum(counts) - counts
        prev[starts[counts > 0]] = 0  # each TileVector's first run starts at or after tile 0
    ok = (first >= prev) & (first < stop) & (stop <= tiles) & (value >= 0) & (value <= MAX_VALUE)
    if not ok.all():
        raise _Unusual
    keep = value != 0
    owner = np.repeat(np.array(rows, np.int64), counts)[keep]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    key = None if keys is None else np.repeat(np.array(keys, np.int64), counts)[keep].astype(np.int32)
    return RunTable(ptr=ptr, first=first[keep].astype(np.int32), stop=stop[keep].astype(np.int32),
                    value=value[keep], key=key)


def _int_rows(lists: list[Any], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ``width``-integer lists, back to back, as an int64 array; and how many rows each list had."""
    lens = np.fromiter(map(len, lists), np.int64, len(lists))
    rows = list(itertools.chain.from_iterable(lists))
    if not (set(map(type, rows)) <= {list} and set(map(len, rows)) <= {width}):
        raise _Unusual
    flat = list(itertools.chain.from_iterable(rows))
    if not set(map(type, flat)) <= {int}:
        raise _Unusual  # (booleans and floats included)
    try:
        return np.array(flat, np.int64).reshape(-1, width), lens
    except OverflowError:
        raise _Unusual from None


def _dense_rows(lists: list[Any], tiles: int, chunk_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense TileVectors (a value per tile) as runs of equal values, zeros included, like :func:`_int_rows`.

    All at once rather than one numpy call per vector (300,000 one-operation programs: 15 s, issue 39),
    a chunk of vectors at a time; ranges are checked by the caller, as for the other forms.
    """
    if any(len(values) != tiles for values in lists):
        raise _Unusual  # the reference decoder words the wrong length
    if tiles == 0:
        return np.zeros((0, 3), np.int64), np.zeros(len(lists), np.int64)
    step = max(chunk_cells // tiles, 1)
    runs: list[np.ndarray] = []
    lens: list[np.ndarray] = []
    for at in range(0, len(lists), step):
        flat = list(itertools.chain.from_iterable(lists[at:at + step]))
        if not set(map(type, flat)) <= {int}:
            raise _Unusual  # (booleans and floats included)
        try:
            values = np.array(flat, np.int64).reshape(-1, tiles)
        except OverflowError:
            raise _Unusual from None
        starts = np.ones(values.shape, bool)
        np.not_equal(values[:, 1:], values[:, :-1], out=starts[:, 1:])
        where = np.flatnonzero(starts)
        first = where % tiles
        stop = np.empty_like(first)
        stop[:-1] = first[1:]
        stop[np.flatnonzero(first == 0) - 1] = tiles  # a vector's last run ends at its last tile
        runs.append(np.stack([first, stop, values.ravel()[where]], axis=1))
        lens.append(starts.sum(axis=1))
    return np.concatenate(runs), np.concatenate(lens).astype(np.int64)


def _in_object_order(parts: list[tuple[list[int], np.ndarray, np.ndarray]], count: int) -> tuple[
        np.ndarray, np.ndarray]:
    """Runs of several groups of objects (object positions, runs, runs per object) merged in object order."""
    if len(parts) == 1:
        return parts[0][1], parts[0][2]
    counts = np.zeros(count, np.int64)
    for at, _, lens in parts:
        counts[at] = lens
    owner = np.concatenate([np.repeat(np.array(at, np.int64), lens) for at, _, lens in parts])
    runs = np.concatenate([r for _, r, _ in parts])
    return runs[np.argsort(owner, kind="stable")], counts


def _children(b: Builder, child_ids: tuple[Any, ...], index: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.fromiter((len(c) for c in child_ids), np.int64, len(child_ids))
    ptr = np.zeros(len(child_ids) + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    idx = np.empty(int(ptr[-1]), np.int64)
    k = 0
    for i, children in enumerate(child_ids):
        for j, cid in enumerate(children):
            if type(cid) is not int:
                b.fail(f"programs[{i}].children[{j}]", f"expected a program id, got {kind(cid)}")
            target = index.get(cid)
            if target is None:
                b.fail(f"programs[{i}].children[{j}]", f"no program has id {cid}")
            idx[k] = target
            k += 1
    return ptr, idx


def _var_refs(b: Builder, var_ids: list[Any], var_ptr: np.ndarray) -> np.ndarray:
    flat = list(itertools.chain.from_iterable(var_ids))
    if not flat:
        return np.zeros(0, np.int64)
    try:
        arr = np.asarray(flat, dtype=np.int64)
        ok = arr.ndim == 1 and only_ints(flat)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        k = next(i for i, x in enumerate(flat) if not is_int64(x))
        p, j = _var_place(var_ptr, k)
        if type(flat[k]) is int:  # beyond int64, so no variable can have it
            b.fail(f"programs[{p}].vars[{j}]", f"no variable has id {flat[k]}")
        b.fail(f"programs[{p}].vars[{j}]", f"expected a variable id, got {kind(flat[k])}")
    return _var_positions(b, arr, var_ptr)


def _var_positions(b: Builder, arr: np.ndarray, var_ptr: np.ndarray) -> np.ndarray:
    """Variable ids (int64, in program order) to variable indices."""
    vi = b.var_index
    n = len(vi.order)
    if vi.dense:
        # Ids 0..n-1: an id is its own position in sorted order, no search needed.
        if len(arr) and (int(arr.min()) < 0 or int(arr.max()) >= n):
            k = int(np.flatnonzero((arr < 0) | (arr >= n))[0])
            p, j = _var_place(var_ptr, k)
            b.fail(f"programs[{p}].vars[{j}]", f"no variable has id {arr[k]}")
        if vi.in_order:
            return arr  # int64, made for this and held nowhere else
        # Gathered in place (ids checked above, so "clip" never clips): made for this and held nowhere
        # else, so the positions need no second array as long as the program lists.
        return np.take(vi.order, arr, out=arr, mode="clip")
    pos = np.searchsorted(vi.sorted_ids, arr)
    pos_clip = np.minimum(pos, max(len(vi.sorted_ids) - 1, 0))
    found = (pos < len(vi.sorted_ids)) & (vi.sorted_ids[pos_clip] == arr) if len(
        vi.sorted_ids) else np.zeros(len(arr), bool)
    if not found.all():
        k = int(np.flatnonzero(~found)[0])
        p, j = _var_place(var_ptr, k)
        b.fail(f"programs[{p}].vars[{j}]", f"no variable has id {arr[k]}")
    return np.take(vi.order, pos, out=pos, mode="clip")  # pos is int64, and found in range above


def _var_place(var_ptr: np.ndarray, k: int) -> tuple[int, int]:
    p = int(np.searchsorted(var_ptr, k, side="right") - 1)
    return p, k - int(var_ptr[p])


def _check_cycles(child_ptr: np.ndarray, child_idx: np.ndarray, b: Builder, ids: np.ndarray) -> None:
    ptr, idx = child_ptr.tolist(), child_idx.tolist()
    found = back_edge(range(len(ptr) - 1), lambda p: idx[ptr[p] : ptr[p + 1]])
    if found is not None:
        node, k = found
        b.fail(f"programs[{node}].children[{k}]",
               f"program {int(ids[idx[ptr[node] + k]])} is its own ancestor (cycle in the tree)")
