"""The work limits of bounded input (``docs/bad-inputs.md``, "Bounded work"), and the one the loader applies.

The limits live here, below the loader, so that a quantity known from the
document's sizes alone is refused as soon as it is known: tiles x vertex
types is known once the target and the length of ``vertexTypes`` are, before
any TileVector is decoded (decoding 50,000 of them took 2 s, which put the
refusal of such a file past its 2 s target). The quantities that need the
operations are counted in :mod:`popliner.memory.work`, with the same limits.
"""

from __future__ import annotations

import os
import sys

from popliner.errors import ProfileFormatError, UsageProblem

__all__ = ["LIMITS", "check_grid_cells", "check_tile_cells", "limit"]

#: Environment variable -> default limit. Liveness events cost about 150 bytes each in a sweep and tile cells
#: 8 bytes in each table that holds them (several do at once): the defaults keep a run under about 2 GB.
LIMITS: dict[str, int] = {
    "POPLINER_MAX_LIVENESS_EVENTS": 8_000_000,
    "POPLINER_MAX_TILE_CELLS": 20_000_000,
    "POPLINER_MAX_RANGE_CELLS": 50_000_000,
    # Tiles x liveness segments of a range table's liveness grid (popliner.memory.liveness.grid): up to two
    # buffers of 4 bytes a cell at once (the differences of the what-if and forward-cut grids).
    # Synthetic BERT-Large training has 4.9 M at 1x and 19.3 M at 4x (96 layers).
    "POPLINER_MAX_GRID_CELLS": 100_000_000,
    # A review workbook writes about 9 cells with formulas per operation, some 115 us of CPU a row.
    "POPLINER_MAX_WORKBOOK_ROWS": 100_000,
    # Rows of a review workbook's planner table read back by check and config-from (one per layer).
    "POPLINER_MAX_PLANNER_LAYERS": 10_000,
    # Characters of a pipeline config, read back and written alike: PyYAML reads some 150-300 KB/s.
    "POPLINER_MAX_CONFIG_BYTES": 1 << 20,
    # Per-layer rows x (tiles + a row's fixed cost): 24,000 layers on a few tiles, 10,000 on 1,472 tiles.
    "POPLINER_MAX_LAYER_CELLS": 25_000_000,
    # Fragments of a simulated step (popliner.simulator.schedule.schedule_fragments): each is timed, traced
    # and drawn; about 200 us each from the schedule to the trace on a loaded machine.
    "POPLINER_MAX_SIM_FRAGMENTS": 150_000,
    # Bytes the parts of a review workbook that are read may unpack to (popliner.config.workbook).
    "POPLINER_MAX_WORKBOOK_BYTES": 32 << 20,
    # A check's result file read as --baseline: a few KB per IPU (layers, largest variables).
    "POPLINER_MAX_RESULT_BYTES": 16 * 1024 * 1024,
}


def limit(env: str) -> int:
    """The limit in force: the environment variable when set (a whole number), else the default.

    A limit past ``sys.maxsize`` means no limit, and is read as ``sys.maxsize``: a count of things held in
    memory never reaches it, and the C APIs the limits are passed to (a read's size) take no more.
    """
    text = os.environ.get(env)
    if not text:
        return LIMITS[env]
    value = int(text) if text.isascii() and text.isdigit() else -1
    if value < 0:
        raise UsageProblem(f"{env}={text!r}: expected a whole number")
    return min(value, sys.maxsize)


def check_tile_cells(path: str, tiles: int, vertex_types: int) -> None:
    """Refuse tiles x vertex types past ``POPLINER_MAX_TILE_CELLS`` (each type's code is held dense per tile)."""
    _check_cells(path, "target.tilesPerIpu", "POPLINER_MAX_TILE_CELLS", tiles, vertex_types,
                 "vertex types", "per-tile cells", "8 bytes each, in several tables", "analyse")


def check_grid_cells(path: str, tiles: int, segments: int) -> None:
    """Refuse a liveness grid of tiles x segments past ``POPLINER_MAX_GRID_CELLS`` (before it is allocated)."""
    _check_cells(path, "livenessClasses", "POPLINER_MAX_GRID_CELLS", tiles, segments,
                 "liveness segments (distinct interval starts and ends)", "liveness grid cells",
                 "4 bytes each, in up to four buffers", "solve")


def _check_cells(path: str, place: str, env: str, tiles: int, per_tile: int, what: str, cells_are: str,
                 cost: str, verb: str) -> None:
    """One refusal for a table of ``tiles`` x ``per_tile`` cells past the limit ``env`` sets."""
    cells = max(tiles, 0) * per_tile
    if cells > limit(env):
        raise ProfileFormatError(
            path, place,
            f"{tiles:,} tiles x {per_tile:,} {what} = {cells:,} {cells_are}, above the limit of {limit(env):,} "
            f"({cost}); set {env} to a larger count to {verb} it anyway")
