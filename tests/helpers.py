"""Small profile documents built in tests."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner, Result
from isal import isal_zlib

from popliner.analysis import Analysis, AnalysisOptions, analyse_profile
from popliner.cli import cli
from popliner.memory.facts import MemoryFacts
from popliner.memory.ranges import ProfileRanges
from popliner.memory.stages import range_ops, stage_memory, stash_entry_per_tile
from popliner.profile import cache as cache_mod
from popliner.profile.loader import parse_profile_bytes
from tests.paths import FIXTURES as FIXTURES  # the bundled profiles, one name for every test


def chain_document(contexts: list[dict[str, Any]], tiles: int = 2) -> dict[str, Any]:
    """One leaf program per debug context, run in order, one step each.

    ``contexts`` are debug-context objects without ``id``/``parent`` (ids are
    assigned 100, 101, ...; ``parent`` may be given as an index into the list).
    """
    ctx_docs = []
    for i, c in enumerate(contexts):
        doc = {"id": 100 + i, "parent": None, "layer": "popart", "name": ""} | c
        if isinstance(c.get("parent"), int):
            doc["parent"] = 100 + c["parent"]
        ctx_docs.append(doc)
    programs = [{"id": 1, "type": "Sequence", "children": list(range(2, 2 + len(contexts)))}]
    programs += [{"id": 2 + i, "type": "OnTileExecute", "debugContext": 100 + i, "controlCode": [1] * tiles}
                 for i in range(len(contexts))]
    return {
        "format": "popliner-profile",
        "version": 1,
        "target": {"tilesPerIpu": tiles, "numTiles": tiles, "numIpus": 1, "bytesPerTile": 1000,
                   "clockFrequency": 1e9},
        "vertexTypes": [],
        "programs": programs,
        "controlPrograms": [1],
        "steps": list(range(2, 2 + len(contexts))),
        "variables": {"id": [], "bytes": [], "tile": [], "class": []},
        "livenessClasses": [],
        "debugContexts": ctx_docs,
    }


def analyse_document(doc: dict[str, Any], options: AnalysisOptions | None = None,
                     path: str = "test.json") -> Analysis:
    return analyse_profile(parse_profile_bytes(json.dumps(doc).encode(), path), options or AnalysisOptions())


def write_document(doc: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(doc))
    return path


def ipu_memory(ipu: int, layers: tuple[str, ...], per_tile: Any, stash_per_tile: Any, budget: int,
               copy_buffer: int = 0) -> Any:
    """An IPU of the report and plots from explicit per-tile arrays (a stash of one extra entry)."""
    from popliner.memory.types import StageMemory
    from popliner.pipeline import StageFigure
    from popliner.solvers.result import stage_result

    figure = StageFigure(position=ipu, num_ipus=ipu + 2, layers=tuple(range(len(layers))),
                         memory=StageMemory(per_tile), stash_entry_per_tile=stash_per_tile, stash_entries=2,
                         copy_buffer=copy_buffer, bytes_in=0, bytes_out=0, forward_cycles=0, backward_cycles=0)
    return stage_result(figure, layers, budget)


def stage_cycles_split(analysis: Analysis, layers: Sequence[str], first_stage: bool = False) -> tuple[int, int]:
    """(forward, backward) cycles of one micro-batch through the stage, from the stage's own operations."""
    from popliner.memory.stages import cycles_split

    return cycles_split(analysis.facts, analysis.stage_ops(layers, first_stage))


def stage_stash_entry(analysis: Analysis, layers: Sequence[str], first_stage: bool = False) -> np.ndarray:
    """Bytes per tile of one activation stash entry of the stage (zero in inference)."""
    return stash_entry_per_tile(analysis.facts, analysis.stage_ops(layers, first_stage))


def boundary_bytes(analysis: Analysis, before: Sequence[str], after: Sequence[str]) -> int:
    """Bytes of non-always-live variables used on both sides of a stage boundary."""
    return analysis.facts.boundaries.boundary_bytes(analysis.layer_indices(before), analysis.layer_indices(after))


def range_table_equals_engine(table: ProfileRanges, engine: MemoryFacts, num_layers: int) -> None:
    """Every contiguous range's total and stash entry per tile: the incremental table equals the direct model."""
    for i in range(num_layers):
        for j in range(i, num_layers):
            got = table.per_tile(i, j)
            assert got is not None
            total, stash = got
            ops = range_ops(engine, i, j)
            assert total.tolist() == stage_memory(engine, ops).total_per_tile.tolist(), (i, j)
            assert stash.tolist() == stash_entry_per_tile(engine, ops).tolist(), (i, j)


def invoke(*args: object, ok: tuple[int, ...] = (0,)) -> Result:
    """Run the popliner CLI in-process with ``args``; the exit code must be one of ``ok``."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code in ok, (result.exit_code, result.stderr)
    return result


def rewrite_cache_entry(entry: Path, change: Callable[[dict[str, Any], dict[str, Any]], None],
                        resign: bool = False) -> None:
    """Load a cache entry's members, let ``change`` edit the arrays (and metadata), write it back like popliner.

    ``resign``: give the edited entry a new digest, as a forger who knows the format would.
    """
    with np.load(entry, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(isal_zlib.decompress(arrays["__meta__"]).decode())
    change(arrays, meta)
    arrays["__meta__"] = np.frombuffer(isal_zlib.compress(json.dumps(meta).encode(), 1), np.uint8)
    if resign:
        cache_mod.seal(arrays, meta["sha256"])
    with open(entry, "wb") as fh:
        np.savez(fh, **arrays)


def structural_splits(n: int, problem: Any, stages: int, forbidden: frozenset[int] = frozenset()
                      ) -> list[tuple[tuple[int, int], ...]]:
    """Every split of ``n`` layers into ``stages`` stages that the problem's structure allows, counted out.

    Minimum stage length, pinned splits and allowed boundaries (``forbidden``
    besides the problem's own rules) are honoured; memory is not looked at.
    The brute force the solver tests hold the DPs against.
    """
    out = []
    for cuts in itertools.combinations(range(n - 1), stages - 1):
        ends = [*cuts, n - 1]
        bounds = tuple(zip([0, *(c + 1 for c in cuts)], ends, strict=True))
        if any(j - i + 1 < problem.min_layers for i, j in bounds):
            continue
        if any(p not in ends for p in problem.split_after if p < n - 1):
            continue
        if all(problem.allowed_split(j, forbidden) for j in cuts):
            out.append(bounds)
    return out


def dp_bounds(table: Any, problem: Any, objective: Any = None, deadline: float | None = None) -> Any:
    """The exact DP's best split over every stage count the problem allows, and its value (None if none fits)."""
    from popliner.solvers.dp import dp_per_count

    found = [f for f in dp_per_count(table, problem, objective, deadline).values() if f is not None]
    return min(found, key=lambda f: f[1]) if found else None  # ties: the fewest stages (counts in order)


def value_floor(table: Any, problem: Any, objective: Any = None, *, values: Any = None) -> float:
    """The smallest per-count floor of :func:`popliner.solvers.dp.value_floors` (``inf``: none)."""
    import math

    from popliner.solvers.dp import value_floors

    return min(value_floors(table, problem, objective, values=values).values(), default=math.inf)
