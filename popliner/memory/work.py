"""Bounded work for any input: the sizes a profile makes popliner allocate, estimated before anything is.

The quantities, their limits, the variables that raise them and the sizes a small file can reach:
docs/bad-inputs.md, "Bounded work". Each is counted from the columns, in time proportional to the file.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import flagged_entries, sorted_unique, union_of
from popliner.errors import ProfileFormatError
from popliner.ops.operations import OperationTable
from popliner.profile.limits import LIMITS, check_tile_cells
from popliner.profile.limits import limit as _limit
from popliner.profile.model import Profile

__all__ = ["LAYER_ROW_OVERHEAD_CELLS", "LIMITS", "RANGE_OVERHEAD_CELLS", "RangeWork", "check_layer_rows",
           "check_range_tables", "check_work", "check_workbook_rows", "liveness_events", "range_cells", "tile_cells"]


def liveness_events(profile: Profile, ops: OperationTable) -> tuple[int, int]:
    """The amplified events of the sweeps: (whole program, every operation alone).

    A sweep expands each (class, tile) aggregate of its variables into the
    intervals of the class. A class of one interval costs one event per
    variable at most, in proportion to the file; a class of many intervals
    shared by variables on many tiles costs (tiles x intervals), which a
    small file can make huge. Counted here are the events of aggregates
    whose class has more than one interval (unclipped: an upper bound), in
    the whole-program sweep and summed over the per-operation sweeps; O(size
    of the file) to count.
    """
    v = profile.variables
    lens = np.diff(profile.class_ptr)
    multi_class = lens > 1
    if v.count == 0 or not multi_class.any():
        return 0, 0
    is_multi = multi_class[v.klass]
    multi = np.flatnonzero(is_multi)
    if multi.size == 0:
        return 0, 0
    tiles = max(profile.tiles, 1)
    span = profile.num_classes * tiles
    whole_keys = _distinct(v.klass[multi].astype(np.int64) * tiles + v.tile[multi], span)
    whole = int(lens[whole_keys // tiles].sum())
    # The owner of each kept (operation, variable) entry only: a search, not an owner for every entry.
    entries = flagged_entries(is_multi, ops.var_idx)
    owner = np.searchsorted(ops.var_ptr, entries, side="right") - 1
    var = ops.var_idx[entries]
    pair = v.klass[var].astype(np.int64) * tiles + v.tile[var]
    stride = int(pair.max(initial=0)) + 1
    per_op_keys = sorted_unique(owner * stride + pair, nearly_sorted=True)
    per_op = int(lens[(per_op_keys % stride) // tiles].sum())
    return whole, per_op


def _distinct(keys: np.ndarray, span: int) -> np.ndarray:
    """Sorted distinct keys in ``[0, span)``: a mask when the span is small, else a sort."""
    if span <= 1 << 26 and (keys.size == 0 or (int(keys.min()) >= 0 and int(keys.max()) < span)):
        return union_of(keys, span)
    return sorted_unique(keys)


def tile_cells(profile: Profile, ops: OperationTable) -> int:
    """Cells of the dense per-tile tables: tiles x vertex types (each type's code on every tile).

    Operations are not counted: nothing holds (operations x tiles) at once
    (100,000 operations on 1,472 tiles load in 10 s and 325 MB); the range
    tables, which grow with layers and tiles, have their own limit.
    """
    return max(profile.tiles, 0) * len(profile.vertex_types.names)


def check_work(profile: Profile, ops: OperationTable) -> None:
    """Refuse a profile that would make popliner allocate past a limit; each check is linear in the file."""
    # The loader refuses this one already (before decoding a TileVector); a Profile built another way is checked too.
    check_tile_cells(profile.path, profile.tiles, len(profile.vertex_types.names))
    env = "POPLINER_MAX_LIVENESS_EVENTS"
    whole, per_op = liveness_events(profile, ops)
    for count, what in ((whole, "in the whole-program sweep"), (per_op, "over the per-operation sweeps")):
        if count > _limit(env):
            raise ProfileFormatError(
                profile.path, "livenessClasses",
                f"{count:,} liveness events {what} (variables on distinct tiles x the intervals of their class), "
                f"above the limit of {_limit(env):,} (about 150 bytes of memory each); set {env} to a larger "
                "count to analyse it anyway")


#: What evaluating one range costs beyond its per-tile row, in cells of the row (about 150 us of Python per range
#: against a fraction of a microsecond per cell; more in a pod plan): 1,000 layers on 2 tiles are 500,500 ranges
#: of 2 cells, but a solve took 70 s.
RANGE_OVERHEAD_CELLS = 512


def range_cells(tiles: int, layers: int) -> int:
    """Cells of a range table: a per-tile row, and the fixed cost of a range, for every range of consecutive layers."""
    return (max(tiles, 0) + RANGE_OVERHEAD_CELLS) * layers * (layers + 1) // 2


def check_range_tables(profile: Profile, layers: int) -> None:
    """Refuse a range table (a solve's, a pod plan's option set's, the planner sheet's) past the cells limit."""
    cells = range_cells(profile.tiles, layers)
    env = "POPLINER_MAX_RANGE_CELLS"
    if cells > _limit(env):
        raise ProfileFormatError(
            profile.path, "target.tilesPerIpu",
            f"({profile.tiles:,} tiles + {RANGE_OVERHEAD_CELLS} for a range's fixed cost) x "
            f"{layers * (layers + 1) // 2:,} ranges of {layers:,} layers = {cells:,} range-table cells, "
            f"above the limit of {_limit(env):,} (8 bytes each, about 0.5 us to evaluate); use a coarser layer "
            f"regex (fewer layers), or set {env} to a larger count to solve it anyway")


class RangeWork:
    """The range-table cells a pod plan evaluates, counted as its option sets evaluate them (one per plan).

    A plan cannot know beforehand how many ranges its option sets read (each
    reads only the ranges that fit, and takes what another with the same
    figures evaluated), and counting every whole table refused real plans
    (docs/bad-inputs.md, "Bounded work"). So a plan checks one table before
    anything is built, as a solve does, then counts each range as a table
    takes its figure; past the limit it stops with one line.
    """

    def __init__(self, profile: Profile) -> None:
        self._path = profile.path
        self._tiles = max(profile.tiles, 0)
        self._limit = _limit("POPLINER_MAX_RANGE_CELLS")
        self.ranges = 0

    @property
    def cells(self) -> int:
        """The cells counted so far: each range's per-tile row and its fixed cost."""
        return (self._tiles + RANGE_OVERHEAD_CELLS) * self.ranges

    def charge(self) -> None:
        """Count one more range figure; refuse once the plan's cells pass the limit (nothing is written then)."""
        self.ranges += 1
        if self.cells > self._limit:
            env = "POPLINER_MAX_RANGE_CELLS"
            raise ProfileFormatError(
                self._path, "target.tilesPerIpu",
                f"({self._tiles:,} tiles + {RANGE_OVERHEAD_CELLS} for a range's fixed cost) x {self.ranges:,} ranges "
                f"evaluated by the plan's option sets = {self.cells:,} range-table cells, above the limit of "
                f"{self._limit:,} (8 bytes each, about 0.5 us to evaluate); use a coarser layer regex (fewer "
                f"layers), fewer option sets, or set {env} to a larger count to plan it anyway")


#: What one layer row costs beyond its per-tile arrays, in cells (about 600 us of Python a row, on a loaded
#: machine): 300,000 layers on a few tiles took 116 s for the layer table.
LAYER_ROW_OVERHEAD_CELLS = 1024


def check_layer_rows(path: str, tiles: int, layers: int) -> None:
    """Refuse per-layer rows (the layer table, the report's) whose work passes ``POPLINER_MAX_LAYER_CELLS``.

    Each row sums its operations' memory per tile, so a row costs its tiles and a fixed share; counted from
    the number of layers, before any row is built.
    """
    cells = (max(tiles, 0) + LAYER_ROW_OVERHEAD_CELLS) * layers
    env = "POPLINER_MAX_LAYER_CELLS"
    if cells > _limit(env):
        raise ProfileFormatError(
            path, "debugContexts",
            f"{layers:,} layers x ({tiles:,} tiles + {LAYER_ROW_OVERHEAD_CELLS} for a row's fixed cost) = "
            f"{cells:,} layer-row cells, above the limit of {_limit(env):,} (about 0.5 us each); use a coarser "
            f"layer regex (fewer layers), or set {env} to a larger count to tabulate them anyway")


def check_workbook_rows(path: str, operations: int) -> None:
    """Refuse a review workbook (.xlsx) of more operation rows than the limit, before any solve or table.

    Not operations x tiles (nothing holds that any more) but the rows: the
    workbook costs about 115 us of CPU per operation (100,000 rows: 12 s),
    so a 10 MB profile of 830,000 tiny operations would take 100 s; its CSV
    tables take 2 s.
    """
    env = "POPLINER_MAX_WORKBOOK_ROWS"
    if operations > _limit(env):
        raise ProfileFormatError(
            path, "debugContexts",
            f"{operations:,} operations, one row each in the review workbook, above the limit of {_limit(env):,} "
            f"rows (about 115 us each to write); write CSV or TSV tables instead (-o FILE.csv), or set {env} to "
            "a larger count to write the workbook anyway")
