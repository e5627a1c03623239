"""Export Poplar's ``profile.pop`` + ``debug.cbor`` to a format-v1 profile via libpva.

The document is streamed: the target and each program are encoded whole,
the liveness steps and variable columns chunk by chunk, so memory stays far
below the size of the report even with millions of variables. Sections are
written in the order the data can be produced, which JSON objects allow:

    format, version, target, steps, variables, livenessClasses, programs,
    controlPrograms, vertexTypes, tileMemory, debugContexts, source

``pva`` is imported only when an export runs; tests pass a double through
``pva_module``. docs/libpva-mapping.md documents the field mapping.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import numpy as np

from popliner import __version__
from popliner.errors import ExportError, PoplinerError, UsageProblem
from popliner.export.checks import (
    check_context_tree,
    check_inputs,
    check_program_contexts,
    load_pva,
    open_report,
)
from popliner.export.collect import (
    ContextCollector,
    ContextProblem,
    OverLimit,
    Progress,
    TileTotals,
    VertexTypeTable,
)
from popliner.export.jsonstream import DocumentTooLarge, FragmentSpool, IntSpool, JsonWriter, spool_folder
from popliner.export.program_contexts import ProgramContexts
from popliner.export.programs import ProgramsSection
from popliner.export.pvaread import (
    BadValue,
    arch_name,
    as_int,
    attr,
    check_size,
    enum_name,
    ident,
    read_intervals,
    safe_len,
)
from popliner.fileio import atomic_write, check_writable
from popliner.framework import framework_of_layers
from popliner.profile.gunzip import max_profile_bytes
from popliner.profile.rules import INT64_MAX, MAX_TILES
from popliner.profile.tilevector import MAX_VALUE

__all__ = ["ExportSummary", "export_report"]

log = logging.getLogger("popliner.export")

#: Values per chunk when spooling and writing big columns.
CHUNK = 1 << 16

#: Mk2 figures, used only when the report lacks them (the format requires both).
_DEFAULT_BYTES_PER_TILE = 638976
_DEFAULT_CLOCK_HZ = 1.33e9


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote (counts are of the written document)."""

    path: Path
    tiles: int
    programs: int
    steps: int
    variables: int
    liveness_classes: int
    vertex_types: int
    debug_contexts: int
    dropped_variables: int
    note: str | None = None

    def describe(self) -> str:
        return (
            f"{self.programs:,} programs, {self.steps:,} steps, {self.variables:,} variables, "
            f"{self.liveness_classes:,} liveness classes, {self.vertex_types:,} vertex types, "
            f"{self.debug_contexts:,} debug contexts over {self.tiles:,} tiles"
        )


def export_report(
    profile_pop: str | os.PathLike[str],
    debug_cbor: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    force: bool = False,
    pva_module: Any = None,
    allow_flat_contexts: bool = False,
    allow_missing_contexts: bool = False,
    chunk: int = CHUNK,
) -> ExportSummary:
    """Write the format-v1 profile of one Poplar compilation to ``out_path``.

    gzip-compressed when ``out_path`` ends in ``.gz``. An existing file is
    replaced only with ``force``. Nothing is left under ``out_path`` when the
    export fails or is interrupted. ``chunk``: the values spooled and written
    at a time (what bounds the export's memory; any size gives the same file).
    """
    if chunk < 1:
        raise UsageProblem(f"chunk must be at least 1, not {chunk}")
    profile, debug, out = Path(profile_pop), Path(debug_cbor), Path(out_path)
    check_inputs(profile, debug)
    pva = load_pva(pva_module)
    check_writable(out, force)
    report = open_report(pva, profile, debug)
    run = _Export(report, pva, profile, spool_folder(out), chunk)
    try:
        with atomic_write(out, force=force, binary=True) as raw, _maybe_gzip(raw, out) as stream:
            writer = JsonWriter(stream, limit=max_profile_bytes())
            run.write(writer)
            writer.flush()
            assert run.programs is not None  # written, or the write raised
            check_program_contexts(run.programs, profile, allow_missing_contexts)  # before the rename
            check_context_tree(run.contexts, profile, allow_flat_contexts)
    except PoplinerError:
        raise
    except DocumentTooLarge as exc:
        raise ExportError(f"{profile}: the exported profile would pass {exc.limit:,} bytes, the most popliner "
                          "reads (POPLINER_MAX_PROFILE_BYTES); raise that limit to export it anyway") from None
    except (BadValue, ContextProblem) as exc:
        # What the loader would refuse in the written document: refused here, before anything is in place.
        raise ExportError(f"{profile}: while {run.stage}: {exc}; profile the compilation again") from None
    except OverLimit as exc:
        raise ExportError(f"{profile}: while {run.stage}: {exc}") from None
    except Exception as exc:
        # libpva errors (and any bug here) become one line; -vv shows the traceback.
        log.debug("export failed", exc_info=True)
        raise ExportError(f"{profile}: export failed while {run.stage}: {type(exc).__name__}: {exc}") from exc
    finally:
        run.close()
    summary = run.summary(out)
    log.info("export: wrote %s (%s)", out, summary.describe())
    return summary


@contextlib.contextmanager
def _maybe_gzip(raw: IO[bytes], out: Path) -> Iterator[IO[bytes]]:
    if not out.name.endswith(".gz"):
        yield raw
        return
    # mtime=0 and no file name: the same report gives the same bytes.
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
        yield gz  # type: ignore[misc]


class _Export:
    """One export run: reads libpva sections and writes them in order."""

    def __init__(self, report: Any, pva: Any, profile: Path, folder: Path | None, chunk: int) -> None:
        self.report = report
        self.chunk = chunk
        self.pva = pva
        self.profile = profile
        self.folder = folder
        self.stage = "starting"
        self.comp = attr(report, "compilation")
        self.notes: list[str] = []
        self.contexts = ContextCollector(folder)
        self.tiles = 0
        self.step_ids = np.zeros(0, np.int64)
        self.var_ids = np.zeros(0, np.int64)  # sorted ids of the written variables
        self.num_classes = 0
        self.dropped_vars = 0
        self.vtypes = VertexTypeTable(0)
        self.programs: ProgramsSection | None = None  # once the variables are known

    # -- the document -------------------------------------------------------

    def write(self, w: JsonWriter) -> None:
        if self.comp is None:
            raise ExportError(f"{self.profile}: the report has no compilation section")
        w.begin(b"{")
        w.field("format", "popliner-profile")
        w.field("version", 1)
        self.stage = "reading the target"
        w.field("target", self._target())
        self.stage = "reading the liveness program steps"
        self._steps(w)
        self.stage = "reading the lowered variables"
        self._variables(w)
        self.stage = "reading the programs"
        self.programs = ProgramsSection(self.comp, self.profile, self.tiles, self.vtypes, self.contexts,
                                        ProgramContexts(self.pva, self.report, self.profile), self.var_ids,
                                        self.step_ids)
        self.programs.write(w)
        self.stage = "reading tile memory"
        self._tiles(w)
        self.stage = "writing the debug contexts"
        w.key("debugContexts")
        self.contexts.spool.write_array(w)
        w.field("source", self._source())
        w.end(b"}")
        self.stage = "finishing the file"

    def close(self) -> None:
        self.contexts.spool.close()

    def summary(self, out: Path) -> ExportSummary:
        return ExportSummary(
            path=out, tiles=self.tiles, programs=len(self.programs.order) if self.programs else 0,
            steps=len(self.step_ids),
            variables=len(self.var_ids), liveness_classes=self.num_classes, vertex_types=len(self.vtypes),
            debug_contexts=self.contexts.count, dropped_variables=self.dropped_vars,
            note=" ".join(self.notes) or None,
        )

    # -- target ---------------------------------------------------------------

    def _target(self) -> dict[str, Any]:
        t = attr(self.comp, "target")
        if t is None:
            raise ExportError(f"{self.profile}: the report has no compilation target")
        tiles = as_int(attr(t, "tilesPerIpu"))
        if tiles <= 0:
            raise ExportError(f"{self.profile}: the report's target has no tilesPerIpu")
        if tiles > MAX_TILES:
            # Refused before any per-tile array is made: the loader refuses it too.
            raise ExportError(f"{self.profile}: the report's target gives {tiles:,} tiles per IPU, beyond any IPU "
                              f"(popliner reads at most {MAX_TILES:,}); the report is corrupt; profile the "
                              "compilation again")
        self.tiles = tiles
        self.vtypes = VertexTypeTable(tiles)
        num_tiles = check_size(as_int(attr(t, "numTiles"), tiles), "the target's numTiles") or tiles
        num_ipus = check_size(as_int(attr(t, "numIPUs", "numIpus"), max(1, num_tiles // tiles)),
                              "the target's numIPUs")
        out: dict[str, Any] = {
            "tilesPerIpu": tiles,
            "numTiles": num_tiles,
            "numIpus": max(1, num_ipus),
            "bytesPerTile": self._bytes_per_tile(t, tiles),
            "clockFrequency": self._clock(t),
        }
        # SDK 3.x: an enum, pva.IPU.Architecture.Ipu2 (PopART's report_test.py); a string is taken too.
        arch = arch_name(attr(t, "architecture", "arch", "ipuVersion"))
        if arch is not None:
            out["arch"] = arch
        kind = attr(t, "type")
        if kind is not None and enum_name(kind) not in ("Ipu", "IPU"):
            self.notes.append(f"Compiled for a {enum_name(kind)} target, not IPU hardware.")
        if num_tiles != tiles:
            self._first_ipu_only(t, num_tiles, tiles)
        return out

    def _bytes_per_tile(self, t: Any, tiles: int) -> int:
        bpt = as_int(attr(t, "bytesPerTile"))
        if bpt <= 0:
            bpt = as_int(attr(t, "bytesPerIPU")) // tiles
        if bpt <= 0:
            log.warning("%s: the target gives no bytesPerTile; assuming %d (Mk2)", self.profile,
                        _DEFAULT_BYTES_PER_TILE)
            bpt = _DEFAULT_BYTES_PER_TILE
        return check_size(bpt, "the target's bytesPerTile")

    def _clock(self, t: Any) -> float:
        try:
            clock = float(attr(t, "clockFrequency", default=0.0))
        except (TypeError, ValueError, OverflowError):
            clock = 0.0
        if not math.isfinite(clock):
            raise ExportError(f"{self.profile}: the report's target gives clockFrequency {clock}, not a "
                              "frequency; the report is corrupt; profile the compilation again")
        if 0 < clock < 1e5:  # documented as Hz; a value this small can only be MHz
            clock *= 1e6
        if not clock > 0:
            log.warning("%s: the target gives no clockFrequency; assuming %.3g Hz (Mk2 M2000)", self.profile,
                        _DEFAULT_CLOCK_HZ)
            clock = _DEFAULT_CLOCK_HZ
        return clock

    def _first_ipu_only(self, t: Any, num_tiles: int, tiles: int) -> None:
        replicas = as_int(attr(t, "numReplicas"), 1)
        note = (
            f"The report covers {num_tiles} tiles ({num_tiles // tiles} IPUs, {replicas} replica(s)); "
            f"only the first replica's first IPU (tiles 0 to {tiles - 1}) was exported."
        )
        self.notes.append(note)
        log.warning("%s: %s popliner models one IPU; compile for one IPU without replication for a "
                    "complete profile", self.profile, note)

    # -- liveness steps -----------------------------------------------------

    def _steps(self, w: JsonWriter) -> None:
        steps = attr(self.comp, "livenessProgramSteps", default=()) or ()
        progress = Progress("liveness steps", safe_len(steps))
        ids: list[int] = []
        for i, step in enumerate(steps):
            program = attr(step, "program")
            if program is None:
                raise ExportError(f"{self.profile}: liveness step {i} has no program")
            ids.append(ident(program))
            progress.update(i + 1)
        self.step_ids = np.asarray(ids, dtype=np.int64)
        w.key("steps")
        w.int_array(np.split(self.step_ids, np.arange(self.chunk, len(self.step_ids), self.chunk)))

    # -- lowered variables and liveness classes -----------------------------

    def _variables(self, w: JsonWriter) -> None:
        lowered = attr(self.comp, "loweredVariables")
        brief = attr(lowered, "allBriefVars", default=()) if lowered is not None else ()
        columns = {key: IntSpool(self.folder) for key in ("id", "bytes", "tile", "class")}
        classes = FragmentSpool(self.folder)
        try:
            self._spool_variables(brief, columns, classes)
            ids = columns["id"].read_all()
            keep = _first_occurrences(ids)
            self.var_ids = np.sort(ids if keep is None else ids[keep])
            if keep is not None:
                log.warning("%s: %d lowered variable ids are listed more than once; the first entry of each "
                            "is kept", self.profile, len(ids) - len(self.var_ids))
            self.stage = "writing the lowered variables"
            w.key("variables")
            w.begin(b"{")
            for key, spool in columns.items():
                w.key(key)
                w.int_array(_masked(spool.chunks(self.chunk), keep))
            w.end(b"}")
            w.key("livenessClasses")
            classes.write_array(w)
            self.num_classes = classes.count
        finally:
            for spool in columns.values():
                spool.close()
            classes.close()
        if not len(self.var_ids):
            log.warning("%s: the report has no lowered variables on IPU 0; variable memory will be zero",
                        self.profile)

    def _spool_variables(self, brief: Any, columns: dict[str, IntSpool], classes: FragmentSpool) -> None:
        """One pass over ``allBriefVars``: columns and new classes to the spools.

        The loop runs once per lowered variable (millions): plain ``getattr``
        with an int fast path, and the general readers only for other types.
        """
        num_steps, tiles = len(self.step_ids), self.tiles
        class_index: dict[Any, int] = {}
        ids: list[int] = []
        sizes: list[int] = []
        tile_ids: list[int] = []
        klass: list[int] = []
        progress = Progress("lowered variables", safe_len(brief))
        n = 0
        for n, var in enumerate(brief, 1):  # noqa: B007 - n is read after the loop
            tile = getattr(var, "tileId", None)
            if type(tile) is not int:
                tile = as_int(tile, -1)
            if not 0 <= tile < tiles:
                self.dropped_vars += 1  # another IPU or replica (or no tile at all)
                continue
            eq = getattr(var, "equivalenceClass", None)
            key: int | None = None
            if eq is not None:
                key = getattr(eq, "id", None)
                if type(key) is not int:
                    key = as_int(key, -1)
            index = class_index.get(key)
            if index is None:
                index = class_index[key] = classes.count
                # A variable with no class is treated as always live: over- rather than under-estimate.
                classes.add(read_intervals(eq, num_steps) if eq is not None else [[0, num_steps]])
            vid = getattr(var, "id", None)  # brief records have `id` (the original PopLiner's stage.py)
            if type(vid) is not int or not 0 <= vid <= INT64_MAX:
                vid = ident(var)  # other types, and the refusal of an id the format cannot hold
            nbytes = getattr(var, "bytes", None)
            if type(nbytes) is not int:
                nbytes = as_int(nbytes)
            if not 0 <= nbytes <= MAX_VALUE:
                check_size(nbytes, f"lowered variable {vid}'s bytes")
            ids.append(vid)
            sizes.append(nbytes)
            tile_ids.append(tile)
            klass.append(index)
            if len(ids) >= self.chunk:
                _flush({"id": ids, "bytes": sizes, "tile": tile_ids, "class": klass}, columns)
                progress.update(n)
        _flush({"id": ids, "bytes": sizes, "tile": tile_ids, "class": klass}, columns)

    def _tiles(self, w: JsonWriter) -> None:
        tiles = attr(self.comp, "tiles", default=()) or ()
        totals = TileTotals(self.tiles)
        progress = Progress("tiles", self.tiles)
        for t, tile in enumerate(tiles):
            if t >= self.tiles:
                break  # other IPUs and replicas
            memory = attr(tile, "memory")
            if memory is None:
                continue
            for vertex in attr(memory, "vertices", default=()) or ():
                self.vtypes.add_code(t, attr(vertex, "type"), as_int(attr(vertex, "codeBytes")))
            totals.add(t, memory)
            progress.update(t + 1)
        w.field("vertexTypes", self.vtypes.records())
        record = totals.record()
        if record is not None:
            w.field("tileMemory", record)

    # -- provenance -------------------------------------------------------------

    def _source(self) -> dict[str, Any]:
        src: dict[str, Any] = {
            "tool": f"popliner export {__version__}",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "profile": self.profile.name,
        }
        sdk = attr(attr(self.report, "poplarVersion"), "string")
        if isinstance(sdk, str) and sdk:
            src["sdkVersion"] = sdk
        found = framework_of_layers(self.contexts.layers)  # the detector's own rule
        if found is not None:
            src["framework"] = found[0]
        if self.notes:
            src["note"] = " ".join(self.notes)
        return src


def _flush(buffers: dict[str, list[int]], columns: dict[str, IntSpool]) -> None:
    for key, values in buffers.items():
        if values:
            columns[key].append(values)
            values.clear()


def _first_occurrences(ids: np.ndarray) -> np.ndarray | None:
    """Mask keeping the first entry of each id; None when all ids are unique."""
    if ids.size == 0:
        return None
    _, first = np.unique(ids, return_index=True)
    if len(first) == len(ids):
        return None
    keep = np.zeros(len(ids), dtype=bool)
    keep[first] = True
    return keep


def _masked(chunks: Iterator[np.ndarray], keep: np.ndarray | None) -> Iterator[np.ndarray]:
    offset = 0
    for chunk in chunks:
        yield chunk if keep is None else chunk[keep[offset : offset + len(chunk)]]
        offset += len(chunk)
