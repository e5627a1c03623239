"""Assemble the format-v1 document and write it.

Large columns (variables, steps, program variable lists, dense vectors) stay
numpy arrays inside the document and are written by orjson directly
(``OPT_SERIALIZE_NUMPY``); nothing makes a Python object per variable except
the optional name column, whose strings are shared per tensor.

Output is deterministic: the same spec gives the same bytes (gzip with a
zero timestamp and no file name in its header).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from popliner.export.jsonstream import dumps
from popliner.fileio import atomic_write, check_writable
from popliner.synth.build import build_model
from popliner.synth.graph import Compiled, GraphBuilder
from popliner.synth.layout import Layout, lay_out
from popliner.synth.lower import Calibration, Lowered, lower
from popliner.synth.naming import name_contexts, rename_contexts
from popliner.synth.plans import preset_plans
from popliner.synth.spec import SynthSpec
from popliner.synth.tilevec import encode_dense
from popliner.synth.truth import liveness, tile_memory, vertex_counts

__all__ = ["SynthSummary", "generate_document", "write_profile"]

log = logging.getLogger(__name__)

#: gzip level: 6 costs about three times the time of 1 for ~15% smaller files.
GZIP_LEVEL = 3
TOOL = "popliner synth"


@dataclass(frozen=True)
class SynthSummary:
    """What was generated, for logs and tests."""

    model: str
    mode: str
    tiles: int
    layers: int
    operations: int
    programs: int
    steps: int
    variables: int
    classes: int
    contexts: int
    vertex_types: int
    bytes_written: int = 0
    seconds: float = 0.0


def generate_document(spec: SynthSpec) -> dict[str, Any]:
    """The profile as plain JSON values (lists, dicts, ints): meant for small specs.

    For big ones use :func:`write_profile`, which never turns the columns
    into Python lists.
    """
    doc, _ = _build(spec)
    return json.loads(dumps(doc))  # type: ignore[no-any-return]


def write_profile(spec: SynthSpec, out: str | os.PathLike[str] | IO[bytes], force: bool = False, *,
                  compress: bool | None = None) -> SynthSummary:
    """Generate the profile of ``spec`` and write it to a path or a binary stream.

    A path is written atomically (a temporary file renamed into place) and
    gzip-compressed when its name ends in ``.gz`` (``compress`` overrides).
    An existing file is only replaced with ``force``; that is checked before
    any work is done.
    """
    started = time.perf_counter()
    path = out if isinstance(out, (str, os.PathLike)) else None
    if path is not None:
        check_writable(path, force)
    gz = (path is not None and str(path).endswith(".gz")) if compress is None else compress
    doc, summary = _build(spec)
    log.info("generated %s %s: %d programs, %d steps, %d variables in %.1f s", summary.model, summary.mode,
             summary.programs, summary.steps, summary.variables, time.perf_counter() - started)
    data = dumps(doc)
    del doc  # the serialised bytes replace it: keep the peak memory down
    if gz:
        data = gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if path is not None:
        with atomic_write(path, force=force, binary=True) as f:
            f.write(data)
    elif not isinstance(out, (str, os.PathLike)):  # always true here; narrows the type
        out.write(data)
        out.flush()
    return SynthSummary(**{**summary.__dict__, "bytes_written": len(data),
                           "seconds": round(time.perf_counter() - started, 3)})


def _build(spec: SynthSpec) -> tuple[dict[str, Any], SynthSummary]:
    # Independent random streams, so that changing one part does not reshuffle the others.
    seeds = np.random.SeedSequence(spec.seed).spawn(2)
    compiled = Compiled(spec.recompute, spec.split_after, spec.optimizer_state == "off-chip", spec.state_shards,
                        spec.first_moment == "half")
    g = GraphBuilder(spec.tiles, np.random.default_rng(seeds[0]), spec.optimizer, compiled,
                     preset_plans(spec.model, spec.layers) if spec.planner_inputs else None)
    g.linear_mapping = spec.linear_mapping
    build_model(g, spec)
    graph = g.build()
    layout = lay_out(graph.tensors, spec.tiles, spec.scale, spec.bytes_per_tile)
    calibration = Calibration(spec.vertex_code_factor, spec.vertex_state_factor, spec.exchange_code_factor,
                              spec.control_code_factor, spec.exchange_by_size)
    low = lower(graph, layout, spec.scale, np.random.default_rng(seeds[1]), calibration)
    rename_contexts(low.contexts, spec.naming)
    nsteps = len(low.steps)
    classes, tensor_class = liveness(graph, low.ranges, nsteps)
    piece_class = tensor_class[layout.tensor]
    counts = vertex_counts(spec.tiles, len(low.vertex_types), low.vertex_runs)
    truth = tile_memory(spec.tiles, layout, piece_class, classes, nsteps, low, counts, spec.compiler_categories)
    names = [t.name for t in graph.tensors] if spec.var_names else None
    doc = {
        "format": "popliner-profile",
        "version": 1,
        "source": _source(spec),
        "target": {"tilesPerIpu": spec.tiles, "numTiles": spec.tiles, "numIpus": 1,
                   "bytesPerTile": spec.bytes_per_tile, "clockFrequency": spec.clock_hz, "arch": "ipu2"},
        "vertexTypes": _vertex_types(low, counts),
        "programs": low.programs,
        "controlPrograms": low.control_programs,
        "steps": np.asarray(low.steps, dtype=np.int64),
        "variables": _variables(layout, piece_class, names),
        "livenessClasses": [[list(iv) for iv in c] for c in classes],
        "debugContexts": name_contexts(low.contexts, spec.framework),
        "tileMemory": _tile_memory_doc(truth),
    }
    summary = SynthSummary(
        model=spec.model, mode=spec.mode, tiles=spec.tiles, layers=spec.layers,
        operations=sum(1 for op in graph.ops), programs=len(low.programs), steps=nsteps,
        variables=layout.pieces, classes=len(classes), contexts=len(low.contexts),
        vertex_types=len(low.vertex_types),
    )
    return doc, summary


def _source(spec: SynthSpec) -> dict[str, Any]:
    # No timestamp: the output must be byte-identical for the same spec.
    return {"tool": TOOL, "model": spec.model, "framework": spec.framework, "generator": spec.record()}


def _vertex_types(low: Lowered, counts: np.ndarray) -> list[dict[str, Any]]:
    out = []
    for vid, vt in enumerate(low.vertex_types):
        code = np.where(counts[vid] > 0, vt.code, 0).astype(np.int64)
        out.append({"name": vt.name, "size": vt.size, "codeBytes": _vector(code)})
    return out


def _variables(layout: Layout, piece_class: np.ndarray, names: list[str] | None) -> dict[str, Any]:
    """Columns ordered by tile, as a profile lists them per tile; ids are not positions."""
    order = np.argsort(layout.tile, kind="stable")
    cols: dict[str, Any] = {
        "id": order.astype(np.int64),
        "bytes": layout.nbytes[order],
        "tile": layout.tile[order],
        "class": piece_class[order],
    }
    if names is not None:
        per_tensor = np.array(names, dtype=object)
        cols["name"] = per_tensor[layout.tensor[order]].tolist()
    return cols


def _tile_memory_doc(truth: dict[str, np.ndarray]) -> dict[str, Any]:
    cats = {k.split(".", 1)[1]: v for k, v in truth.items() if k.startswith("category.")}
    return {
        "alwaysLive": truth["alwaysLive"],
        "notAlwaysLivePeak": truth["notAlwaysLivePeak"],
        "categories": {k: _vector(v) for k, v in cats.items()},
    }


def _vector(dense: np.ndarray) -> Any:
    """A TileVector for a key that must be present: an all-zero vector is empty runs."""
    enc = encode_dense(dense)
    return {"runs": []} if enc is None else enc

