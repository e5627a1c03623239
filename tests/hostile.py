"""Hand-crafted hostile inputs (issue 22): small files that ask for a lot of work, or break odd rules.

Used by the tests and by ``scripts/hostile.py``, which measures each case
(exit code, time, peak memory) in a fresh process.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.helpers import chain_document

__all__ = ["context_chain", "deep_source", "liveness_amplification", "many_layers", "many_operations",
           "many_vertex_types", "no_contexts", "write_json"]


def _base(tiles: int) -> dict[str, Any]:
    return {
        "format": "popliner-profile",
        "version": 1,
        "target": {"tilesPerIpu": tiles, "numTiles": tiles, "numIpus": 1, "bytesPerTile": 1 << 20,
                   "clockFrequency": 1e9},
        "vertexTypes": [],
    }


def liveness_amplification(steps: int = 100_000, intervals: int = 50_000, variables: int = 500,
                           ops: int = 4) -> dict[str, Any]:
    """One liveness class of ``intervals`` intervals shared by ``variables`` variables, each on its own tile.

    The variables' events are (variables x intervals) per operation that uses
    them: 25 M at the defaults, from a file of about 1 MB.
    """
    tiles = max(variables, 1)
    doc = _base(tiles)
    var_ids = list(range(1000, 1000 + variables))
    doc["programs"] = [{"id": 1, "type": "Sequence", "children": list(range(2, 2 + ops))}] + [
        {"id": 2 + k, "type": "OnTileExecute", "debugContext": 10 + k, "vars": var_ids} for k in range(ops)]
    doc["controlPrograms"] = [1]
    doc["steps"] = [2 + (i * ops) // steps for i in range(steps)]
    doc["variables"] = {"id": var_ids, "bytes": [4] * variables, "tile": list(range(variables)),
                        "class": [0] * variables}
    stride = max(steps // max(intervals, 1), 1)
    doc["livenessClasses"] = [[[i * stride, i * stride + 1] for i in range(min(intervals, steps))]]
    doc["debugContexts"] = [{"id": 10 + k, "parent": None, "layer": "popart", "name": f"op{k}",
                             "data": {"opName": f"layer{k}/op"}} for k in range(ops)]
    return doc


def context_chain(depth: int, op_every: int = 1) -> dict[str, Any]:
    """``depth`` debug contexts in one parent chain, each with a program of its own.

    Every ``op_every``-th context is in an operation layer, so there are
    ``depth / op_every`` operations, each of which looks up its ancestors.
    """
    contexts: list[dict[str, Any]] = []
    for i in range(depth):
        ctx: dict[str, Any] = {"layer": "popart" if i % op_every == 0 else "poplibs", "name": f"c{i}"}
        if i:
            ctx["parent"] = i - 1
        contexts.append(ctx)
    return chain_document(contexts)


def deep_source(depth: int = 990) -> str:
    """A two-operation profile (JSON text) whose free-form ``source`` object is nested ``depth`` levels deep.

    Text, not a document: Python's own encoder cannot write it either.
    """
    doc = chain_document([{"name": "a"}, {"name": "b"}])
    doc["source"] = "@"
    return json.dumps(doc).replace('"@"', '{"x":' * depth + "{}" + "}" * depth)


def no_contexts(programs: int = 3) -> dict[str, Any]:
    """A profile whose programs carry no debug context at all (an exporter that wrote none)."""
    doc = chain_document([{"name": f"c{i}"} for i in range(programs)])
    for p in doc["programs"]:
        p.pop("debugContext", None)
    doc["debugContexts"] = []
    return doc


def write_json(doc: dict[str, Any] | str, path: Path) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, separators=(",", ":")))
    return path


def many_vertex_types(types: int = 50_000, tiles: int = 65_536) -> dict[str, Any]:
    """``types`` vertex types on a ``tiles``-tile IPU, each with code on one tile: (types x tiles) if held dense."""
    doc = chain_document([{"name": "a"}, {"name": "b"}], tiles=1)
    doc["target"].update(tilesPerIpu=tiles, numTiles=tiles)
    for p in doc["programs"]:
        if "controlCode" in p:
            p["controlCode"] = {"sparse": [[0, 1]]}
    doc["vertexTypes"] = [{"name": f"v{i}", "size": 4, "codeBytes": {"sparse": [[i % tiles, 8]]}}
                          for i in range(types)]
    doc["programs"][1]["vertices"] = [[i, {"sparse": [[i % tiles, 1]]}] for i in range(types)]
    return doc


def many_operations(count: int = 20_000, tiles: int = 65_536, layers: int = 50) -> dict[str, Any]:
    """``count`` operations on a ``tiles``-tile IPU, one variable each: (operations x tiles) if held dense."""
    doc = chain_document([{"name": f"op{i}", "data": {"opName": f"layer{i % layers}/op{i}"}} for i in range(count)],
                         tiles=1)
    doc["target"].update(tilesPerIpu=tiles, numTiles=tiles)
    for i, p in enumerate(doc["programs"][1:]):
        p["controlCode"] = {"sparse": [[i % tiles, 1]]}
        p["vars"] = [10 + i]
    doc["variables"] = {"id": [10 + i for i in range(count)], "bytes": [4] * count,
                        "tile": [i % tiles for i in range(count)], "class": [0] * count}
    doc["livenessClasses"] = [[[0, count]]]
    return doc


def many_layers(count: int = 300_000, tiles: int = 2, seed: int = 39) -> dict[str, Any]:
    """``count`` one-operation layers, each a debug context of its own named ``<block>_<hex>/op``.

    The layer is the name before ``/op`` (``--layer-name-regex '^(.*)/op$'``). Random hex keeps gzip from
    shrinking the names much: at the defaults the file is about 8.6 MB gzipped (issue 39 point 7's 8.7 MB).
    Each program's ``controlCode`` is a dense list, one value per tile.
    """
    rng = random.Random(seed)
    names = [f"blk{i}_{rng.getrandbits(80):020x}/op" for i in range(count)]
    return chain_document([{"name": name} for name in names], tiles=tiles)
