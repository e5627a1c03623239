"""TileVectors: per-tile integers, stored run-length encoded.

A profile writes a TileVector as a dense list, as ``{"runs": [[first, stop, value]]}``
or as ``{"sparse": [[tile, value]]}``. popliner keeps every one as runs
(``first <= t < stop`` has ``value``): a Mk2 program's control code is usually one
run over all 1472 tiles, so runs are both the compact and the fast form, and a
sum of many vectors is a difference array and one cumulative sum.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from popliner.arrays import expand_ranges

__all__ = ["RunTable", "RunTableBuilder", "decode_tilevector", "dense_runs", "kind", "only_ints", "value_runs"]

#: Largest integer a profile may use for bytes, counts or cycles. JSON numbers
#: beyond it are almost surely corruption, and they would overflow int64 sums.
MAX_VALUE = 2**40

Raise = Callable[[str, str], Exception]


def decode_tilevector(
    raw: Any, tiles: int, where: str, fail: Raise
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Turn one TileVector of the document into ``(first, stop, value)`` runs.

    Zero-valued runs are dropped. ``fail(where, problem)`` builds the exception
    to raise, so the message can name the file and the place.
    """
    if isinstance(raw, list):
        return dense_runs(raw, tiles, where, fail)
    if isinstance(raw, dict):
        if set(raw) == {"runs"}:
            return _explicit_runs(raw["runs"], tiles, f"{where}.runs", fail)
        if set(raw) == {"sparse"}:
            return _sparse_runs(raw["sparse"], tiles, f"{where}.sparse", fail)
        raise fail(where, 'a TileVector object must have exactly one key, "runs" or "sparse"')
    raise fail(where, f"expected a TileVector (list or object), got {kind(raw)}")


def kind(value: Any) -> str:
    """The JSON name of ``value``'s type, for messages."""
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _int_array(raw: Any, where: str, fail: Raise, width: int | None = None) -> np.ndarray:
    """A list (or list of fixed-width lists) of non-negative ints as int64."""
    try:
        arr = np.asarray(raw, dtype=np.int64)
    except OverflowError:
        # An integer beyond int64 (named like the MAX_VALUE check below) or a huge float.
        huge = _first_huge(raw)
        if huge is None:
            raise fail(where, "expected integers, found a non-integer value") from None
        raise fail(where, f"value {huge} is implausibly large (limit {MAX_VALUE})") from None
    except (TypeError, ValueError):
        raise fail(where, "expected non-negative integers" + (f" in [{width}]-lists" if width else "")) from None
    if width is not None and raw and (arr.ndim != 2 or arr.shape[1] != width):
        raise fail(where, f"expected a list of {width}-element integer lists")
    if width is None and arr.ndim != 1:  # [[]] has no element to catch below
        raise fail(where, "expected non-negative integers, found a list")
    if arr.size and (arr.dtype.kind != "i"):
        raise fail(where, "expected integers")
    # np.asarray silently truncates floats when dtype is given; refuse them.
    if arr.size and not only_ints(raw if width is None else itertools.chain.from_iterable(raw)):
        raise fail(where, "expected integers, found a non-integer value")
    if arr.size and int(arr.min()) < 0:
        raise fail(where, "negative value; TileVector entries are non-negative integers")
    if arr.size and int(arr.max()) > MAX_VALUE:
        raise fail(where, f"value {int(arr.max())} is implausibly large (limit {MAX_VALUE})")
    return arr


def _first_huge(raw: list[Any]) -> int | None:
    """The first integer beyond int64 in a list or a list of lists (None: a float overflowed)."""
    for item in raw:
        for v in item if isinstance(item, list) else (item,):
            if type(v) is int and not -(2**63) <= v < 2**63:
                return v
    return None


def only_ints(values: Any) -> bool:
    """Every item is a Python int (not a bool, not a float): one C-level pass over the types."""
    return set(map(type, values)) <= {int}


def dense_runs(raw: list[Any], tiles: int, where: str, fail: Raise) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if len(raw) != tiles:
        raise fail(where, f"dense TileVector has {len(raw)} entries; expected tilesPerIpu = {tiles}")
    first, stop, value = value_runs(_int_array(raw, where, fail))
    return first.astype(np.int32), stop.astype(np.int32), value


def value_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first, stop, value)`` of the maximal runs of equal non-zero values in a per-tile vector."""
    if values.size == 0:
        return _empty()
    change = np.flatnonzero(values[1:] != values[:-1]) + 1
    first = np.concatenate(([0], change))
    stop = np.concatenate((change, [values.size]))
    value = values[first]
    keep = value != 0
    return first[keep], stop[keep], value[keep]


def _explicit_runs(raw: Any, tiles: int, where: str, fail: Raise) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(raw, list):
        raise fail(where, "expected a list of [first, stop, value]")
    if not raw:
        return _empty()
    arr = _int_array(raw, where, fail, width=3)
    first, stop, value = arr[:, 0], arr[:, 1], arr[:, 2]
    bad = np.flatnonzero((first >= stop) | (stop > tiles))
    if bad.size:
        i = int(bad[0])
        raise fail(
            f"{where}[{i}]",
            f"run [{first[i]}, {stop[i]}) is empty or outside tiles [0, {tiles})",
        )
    order = np.argsort(first, kind="stable")
    first, stop, value = first[order], stop[order], value[order]
    overlap = np.flatnonzero(first[1:] < stop[:-1])
    if overlap.size:
        k = int(overlap[0])
        i, j = int(order[k + 1]), int(order[k])
        raise fail(f"{where}[{i}]", f"run [{first[k + 1]}, {stop[k + 1]}) overlaps [{first[k]}, {stop[k]}) (runs[{j}])")
    keep = value != 0
    return first[keep].astype(np.int32), stop[keep].astype(np.int32), value[keep]


def _sparse_runs(raw: Any, tiles: int, where: str, fail: Raise) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(raw, list):
        raise fail(where, "expected a list of [tile, value]")
    if not raw:
        return _empty()
    arr = _int_array(raw, where, fail, width=2)
    tile, value = arr[:, 0], arr[:, 1]
    bad = np.flatnonzero(tile >= tiles)
    if bad.size:
        i = int(bad[0])
        raise fail(f"{where}[{i}]", f"tile {tile[i]} outside [0, {tiles})")
    order = np.argsort(tile, kind="stable")
    tile, value = tile[order], value[order]
    dup = np.flatnonzero(tile[1:] == tile[:-1])
    if dup.size:
        i = int(order[dup[0] + 1])
        raise fail(f"{where}[{i}]", f"tile {tile[dup[0]]} listed twice")
    keep = value != 0
    return tile[keep].astype(np.int32), (tile[keep] + 1).astype(np.int32), value[keep]


def _empty() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int64)


@dataclass(frozen=True, eq=False)
class RunTable:
    """One run-encoded TileVector per row (a program, a vertex type, ...).

    Row ``r`` owns runs ``ptr[r]:ptr[r+1]``. ``key`` is an optional extra int
    column per run (the vertex type id for vertex-count tables).
    """

    ptr: np.ndarray
    first: np.ndarray
    stop: np.ndarray
    value: np.ndarray
    key: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.ptr) - 1

    def run_rows(self) -> np.ndarray:
        """The row index of every run."""
        return np.repeat(np.arange(self.rows, dtype=np.int64), np.diff(self.ptr))

    def dense(self, row: int, tiles: int) -> np.ndarray:
        return self.sum_runs(np.arange(self.ptr[row], self.ptr[row + 1]), tiles)

    def sum_rows(self, rows: np.ndarray | Sequence[int], tiles: int) -> np.ndarray:
        """Per-tile sum of the given rows (each row counted as often as listed)."""
        return self.sum_runs(self.runs_of(rows), tiles)

    def runs_of(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        """Indices of all runs belonging to ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        return expand_ranges(self.ptr[rows], self.ptr[rows + 1] - self.ptr[rows])

    def sum_runs(self, runs: np.ndarray, tiles: int, weights: np.ndarray | None = None) -> np.ndarray:
        """Per-tile sum of the given runs, optionally each scaled by ``weights``."""
        diff = np.zeros(tiles + 1, dtype=np.int64)
        vals = self.value[runs] if weights is None else self.value[runs] * weights
        np.add.at(diff, self.first[runs], vals)
        np.add.at(diff, self.stop[runs], -vals)
        return np.cumsum(diff[:-1])

    def row_totals(self) -> np.ndarray:
        """Sum over tiles of each row."""
        per_run = self.value * (self.stop - self.first).astype(np.int64)
        return np.bincount(self.run_rows(), weights=per_run, minlength=self.rows).astype(np.int64)

    def row_max(self) -> np.ndarray:
        """Largest value of each row over tiles (0 for an empty row)."""
        out = np.zeros(self.rows, dtype=np.int64)
        if self.value.size:
            np.maximum.at(out, self.run_rows(), self.value)
        return out


class RunTableBuilder:
    """Collects rows of runs, then makes the arrays once.

    Runs are kept as Python ints, because most rows hold one or two runs
    and one conversion at the end is far cheaper than an array per row.
    """

    def __init__(self, keyed: bool = False) -> None:
        self._lens: list[int] = []
        self._first: list[int] = []
        self._stop: list[int] = []
        self._value: list[int] = []
        self._key: list[int] | None = [] if keyed else None
        self._pending = 0

    def add(self, first: np.ndarray | list[int], stop: np.ndarray | list[int], value: np.ndarray | list[int],
            key: np.ndarray | list[int] | None = None) -> None:
        """Append runs to the current row (call :meth:`end_row` to close it)."""
        if self._key is not None:
            if key is None:
                raise ValueError("keyed table needs a key per run")
            self._key += _ints(key)
        self._first += _ints(first)
        self._stop += _ints(stop)
        self._value += _ints(value)
        self._pending += len(first)

    def end_row(self) -> None:
        self._lens.append(self._pending)
        self._pending = 0

    def build(self) -> RunTable:
        ptr = np.zeros(len(self._lens) + 1, dtype=np.int64)
        np.cumsum(self._lens, out=ptr[1:])

        def arr(values: list[int], dtype: type) -> np.ndarray:
            return np.array(values, dtype=dtype) if values else np.zeros(0, dtype)

        return RunTable(
            ptr=ptr,
            first=arr(self._first, np.int32),
            stop=arr(self._stop, np.int32),
            value=arr(self._value, np.int64),
            key=None if self._key is None else arr(self._key, np.int32),
        )


def _ints(values: np.ndarray | list[int]) -> list[int]:
    return values.tolist() if isinstance(values, np.ndarray) else values
