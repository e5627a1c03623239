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
import itertools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import numpy as np

from popliner import __version__
from popliner.errors import ExportError, PoplinerError
from popliner.export.collect import ContextCollector, Progress, TileTotals, VertexTypeTable
from popliner.export.jsonstream import FragmentSpool, IntSpool, JsonWriter, spool_folder
from popliner.export.pvaread import (
    as_int,
    attr,
    encode_tilevector,
    enum_name,
    ident,
    per_tile,
    program_type,
    read_intervals,
    safe_len,
)
from popliner.fileio import atomic_write, check_writable

__all__ = ["SDK_MESSAGE", "ExportSummary", "export_report", "load_pva"]

log = logging.getLogger("popliner.export")

#: Values per chunk when spooling and writing big columns.
CHUNK = 1 << 16

SDK_MESSAGE = (
    "popliner export reads profile.pop and debug.cbor through libpva, the Poplar SDK's Python module "
    "`pva`, which cannot be imported here: source the Poplar SDK's enable.sh (e.g. "
    "`source <sdk>/enable.sh`) so that `import pva` works, then run the export again"
)

#: Mk2 figures, used only when the report lacks them (the format requires both).
_DEFAULT_BYTES_PER_TILE = 638976
_DEFAULT_CLOCK_HZ = 1.33e9

_FRAMEWORK_BY_LAYER = (
    ("poptorch", "poptorch"),
    ("xla_op", "tensorflow"),
    ("popxl", "popxl"),
    ("popart", "popart"),
    ("popartbuilder", "popart"),
    ("onnx", "popart"),
)


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


def load_pva(module: Any = None) -> Any:
    """The libpva module: ``module`` when given, else ``import pva``."""
    if module is not None:
        return module
    try:
        import pva  # type: ignore[import-not-found, unused-ignore]  # only inside a Poplar SDK
    except ImportError as exc:
        log.debug("import pva failed: %s", exc)
        raise ExportError(SDK_MESSAGE) from None
    except Exception as exc:  # noqa: BLE001 - a broken SDK install can raise anything at import
        log.debug("import pva failed", exc_info=True)
        where = getattr(exc, "filename", None)
        raise ExportError(f"`import pva` failed with {type(exc).__name__}: {_first_line(exc)}"
                          + (f" (in {where})" if where else "")
                          + "; the Poplar SDK's Python module is broken or not the one you meant: check "
                          "that the SDK's enable.sh was sourced for this Python") from None
    return pva


def _check_context_tree(contexts: Any, profile: Path, allow_flat: bool) -> None:
    """Refuse (or warn, with ``allow_flat``) when no exported debug context has a parent.

    Layers and operation names come from a context's ancestors; a libpva that
    gives no ``parents`` makes every context a root, and the split would come
    out different without any other sign.
    """
    if contexts.count <= 1 or contexts.any_parent:
        return
    problem = (f"{profile}: none of the {contexts.count:,} debug contexts has a parent (libpva gave no "
               "`parents`), so operations would get wrong names and layers")
    if not allow_flat:
        raise ExportError(problem + "; pass --allow-flat-contexts to export anyway")
    log.warning("%s; exported anyway (--allow-flat-contexts)", problem)


def _check_program_contexts(run: _Export, profile: Path, allow_missing: bool) -> None:
    """Refuse (or warn, with ``allow_missing``) when most programs got no debug context from libpva.

    popliner groups programs into operations, and operations into layers,
    by their debug contexts: a profile without them loads, but every program
    is unattributed and nothing can be split. Real compilations give a
    context to nearly every program (98-99% in the bundled profiles).
    """
    total, with_context = run.programs_written, run.programs_with_context
    if total == 0 or 2 * with_context >= total:
        return
    source = ("programs carry no `debugContext` and pva.OperationAnalysis gave none for them"
              if with_context == 0 else "libpva gave them none")
    problem = (f"{profile}: {total - with_context:,} of {total:,} programs have no debug context ({source}), "
               f"so popliner would group {'nothing' if with_context == 0 else 'most programs into no operation'} "
               "and could not split the model; export with the debug.cbor written by the same compilation "
               "(POPLAR_ENGINE_OPTIONS autoReport.outputDebugInfo)")
    if not allow_missing:
        raise ExportError(problem + ", or pass --allow-missing-contexts to export anyway")
    log.warning("%s; exported anyway (--allow-missing-contexts)", problem)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def export_report(
    profile_pop: str | os.PathLike[str],
    debug_cbor: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    force: bool = False,
    pva_module: Any = None,
    allow_flat_contexts: bool = False,
    allow_missing_contexts: bool = False,
) -> ExportSummary:
    """Write the format-v1 profile of one Poplar compilation to ``out_path``.

    gzip-compressed when ``out_path`` ends in ``.gz``. An existing file is
    replaced only with ``force``. Nothing is left under ``out_path`` when the
    export fails or is interrupted.
    """
    profile, debug, out = Path(profile_pop), Path(debug_cbor), Path(out_path)
    _check_inputs(profile, debug)
    pva = load_pva(pva_module)
    check_writable(out, force)
    report = _open_report(pva, profile, debug)
    run = _Export(report, pva, profile, spool_folder(out))
    try:
        with atomic_write(out, force=force, binary=True) as raw, _maybe_gzip(raw, out) as stream:
            writer = JsonWriter(stream)
            run.write(writer)
            writer.flush()
            _check_program_contexts(run, profile, allow_missing_contexts)  # before the rename
            _check_context_tree(run.contexts, profile, allow_flat_contexts)
    except PoplinerError:
        raise
    except Exception as exc:
        # libpva errors (and any bug here) become one line; -vv shows the traceback.
        log.debug("export failed", exc_info=True)
        raise ExportError(f"{profile}: export failed while {run.stage}: {type(exc).__name__}: {exc}") from exc
    finally:
        run.close()
    summary = run.summary(out)
    log.info("export: wrote %s (%s)", out, summary.describe())
    return summary


def _check_inputs(profile: Path, debug: Path) -> None:
    for path, what in ((profile, "Poplar profile (profile.pop)"), (debug, "debug information (debug.cbor)")):
        if not path.is_file():
            raise ExportError(f"{path}: no such file; expected the {what}")
    if profile.suffix.lower() == ".cbor" and debug.suffix.lower() == ".pop":
        raise ExportError(f"{profile} and {debug} look swapped: give profile.pop first, then debug.cbor")


def _open_report(pva: Any, profile: Path, debug: Path) -> Any:
    opener = getattr(pva, "openReport", None)
    if opener is None:
        raise ExportError("the importable `pva` module has no openReport(); is it the Poplar SDK's libpva?")
    try:
        return opener(str(profile), str(debug))
    except Exception as exc:  # noqa: BLE001 - libpva's exception types are not documented
        raise ExportError(f"{profile}: libpva cannot open the report (with {debug}): {exc}") from None


@contextlib.contextmanager
def _maybe_gzip(raw: IO[bytes], out: Path) -> Iterator[IO[bytes]]:
    if not out.name.endswith(".gz"):
        yield raw
        return
    # mtime=0 and no file name: the same report gives the same bytes.
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
        yield gz  # type: ignore[misc]


def _chunks(values: np.ndarray) -> Iterator[np.ndarray]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


class _Export:
    """One export run: reads libpva sections and writes them in order."""

    def __init__(self, report: Any, pva: Any, profile: Path, folder: Path | None) -> None:
        self.report = report
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
        self.dropped_refs = 0
        #: Programs written, and those of them with a debug context (see _check_program_contexts).
        self.programs_written = 0
        self.programs_with_context = 0
        self.emitted: set[int] = set()
        self.order: list[int] = []
        self.child_ids: set[int] = set()
        self.control_ids: list[int] | None = None
        self._op_contexts: dict[int, Any] | None = None
        self._ops: list[tuple[Any, list[Any]]] | None = None
        self._replaced: dict[int, Any] | None = None
        self.vtypes = VertexTypeTable(0)

    # -- the document -------------------------------------------------------

    def write(self, w: JsonWriter) -> None:
        if self.comp is None:
            raise ExportError(f"{self.profile}: the report has no compilation section")
        w.begin_object()
        w.field("format", "popliner-profile")
        w.field("version", 1)
        self.stage = "reading the target"
        w.field("target", self._target())
        self.stage = "reading the liveness program steps"
        self._steps(w)
        self.stage = "reading the lowered variables"
        self._variables(w)
        self.stage = "reading the programs"
        self._programs(w)
        self.stage = "reading tile memory"
        self._tiles(w)
        self.stage = "writing the debug contexts"
        w.key("debugContexts")
        self.contexts.spool.write_array(w)
        w.field("source", self._source())
        w.end_object()
        self.stage = "finishing the file"

    def close(self) -> None:
        self.contexts.spool.close()

    def summary(self, out: Path) -> ExportSummary:
        return ExportSummary(
            path=out, tiles=self.tiles, programs=len(self.order), steps=len(self.step_ids),
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
        self.tiles = tiles
        self.vtypes = VertexTypeTable(tiles)
        num_tiles = as_int(attr(t, "numTiles"), tiles)
        num_ipus = as_int(attr(t, "numIPUs", "numIpus"), max(1, num_tiles // tiles))
        out: dict[str, Any] = {
            "tilesPerIpu": tiles,
            "numTiles": num_tiles,
            "numIpus": max(1, num_ipus),
            "bytesPerTile": self._bytes_per_tile(t, tiles),
            "clockFrequency": self._clock(t),
        }
        arch = attr(t, "arch", "ipuVersion", "architecture")  # [U]: no documented name
        if isinstance(arch, str) and arch:
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
        return bpt

    def _clock(self, t: Any) -> float:
        try:
            clock = float(attr(t, "clockFrequency", default=0.0))
        except (TypeError, ValueError):
            clock = 0.0
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
        w.int_array(_chunks(self.step_ids))

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
            w.begin_object()
            for key, spool in columns.items():
                w.key(key)
                w.int_array(_masked(spool.chunks(CHUNK), keep))
            w.end_object()
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
        """One pass over ``allBriefVars``: columns and new classes to the spools."""
        num_steps = len(self.step_ids)
        class_index: dict[Any, int] = {}
        buffers: dict[str, list[int]] = {key: [] for key in columns}
        progress = Progress("lowered variables", safe_len(brief))
        for n, var in enumerate(brief, 1):
            tile = as_int(attr(var, "tileId"), -1)
            if not 0 <= tile < self.tiles:
                self.dropped_vars += 1  # another IPU or replica (or no tile at all)
                continue
            eq = attr(var, "equivalenceClass")
            key = as_int(attr(eq, "id"), -1) if eq is not None else None
            index = class_index.get(key)
            if index is None:
                index = class_index[key] = classes.count
                # A variable with no class is treated as always live: over- rather than under-estimate.
                classes.add(read_intervals(eq, num_steps) if eq is not None else [[0, num_steps]])
            buffers["id"].append(ident(var))
            buffers["bytes"].append(as_int(attr(var, "bytes")))
            buffers["tile"].append(tile)
            buffers["class"].append(index)
            if len(buffers["id"]) >= CHUNK:
                _flush(buffers, columns)
                progress.update(n)
        _flush(buffers, columns)

    # -- programs -------------------------------------------------------------

    def _programs(self, w: JsonWriter) -> None:
        control = attr(self.comp, "controlPrograms")  # [U]: not in the documented API
        if control is not None:
            self.control_ids = [p if isinstance(p, int) else ident(p) for p in control]
        programs = attr(self.comp, "programs", default=()) or ()
        progress = Progress("programs", safe_len(programs))
        w.key("programs")
        w.begin_array()
        for n, program in enumerate(programs, 1):
            self._emit(w, program)
            progress.update(n)
        self._emit_missing(w)
        w.end_array()
        if self.dropped_refs:
            log.info("export: %d program-variable references to variables outside IPU 0 were left out",
                     self.dropped_refs)
        w.field("controlPrograms", self._roots())

    def _emit(self, w: JsonWriter, program: Any) -> None:
        pid = ident(program)
        if pid in self.emitted:
            return
        self.emitted.add(pid)
        self.order.append(pid)
        w.value(self._program(program, pid))

    def _program(self, p: Any, pid: int) -> dict[str, Any]:
        ptype = program_type(p)
        rec: dict[str, Any] = {"id": pid, "type": ptype}
        name = attr(p, "name")
        if isinstance(name, str) and name:
            rec["name"] = name
        children = [ident(c) for c in attr(p, "children", default=()) or ()]
        if children:
            rec["children"] = children
            self.child_ids.update(children)
        ctx = self._context_of(p, pid)
        self.programs_written += 1
        if ctx is not None:
            rec["debugContext"] = ctx
            self.programs_with_context += 1
        self._put(rec, "controlCode", attr(p, "controlCodeByTile"))
        if ptype == "DoExchange":
            # codeBytesByTile means internal-exchange code only for DoExchange.
            self._put(rec, "exchangeCode", attr(p, "codeBytesByTile"))
        cs = attr(p, "computeset", "computeSet")
        vertices = self._vertices(cs) if cs is not None else []
        if vertices:
            rec["vertices"] = vertices
        var_ids = self._program_vars(p)
        if var_ids:
            rec["vars"] = var_ids
        cycles = attr(p, "estimatedCyclesByTile")
        if not safe_len(cycles) and cs is not None:
            cycles = attr(cs, "estimatedCyclesByTile")
        self._put(rec, "cycles", cycles)
        if ptype == "Repeat":
            count = attr(p, "repeatCount", "count", "numIterations")  # [U]
            if count is not None:
                rec["repeatCount"] = as_int(count)
        return rec

    def _put(self, rec: dict[str, Any], key: str, values: Any) -> None:
        tv = encode_tilevector(per_tile(values, self.tiles)) if values is not None else None
        if tv is not None:
            rec[key] = tv

    def _vertices(self, cs: Any) -> list[list[Any]]:
        counts: dict[int, np.ndarray] = {}
        for vertex in attr(cs, "vertices", default=()) or ():
            tid = self.vtypes.type_id(attr(vertex, "type"))
            arr = per_tile(attr(vertex, "countByTile"), self.tiles)
            if tid in counts:
                counts[tid] += arr
            else:
                counts[tid] = arr
        out = []
        for tid, arr in counts.items():
            tv = encode_tilevector(arr)
            if tv is not None:
                out.append([tid, tv])
        return out

    def _program_vars(self, p: Any) -> list[int]:
        raw = attr(p, "vars", default=()) or ()
        ids = np.fromiter((ident(v) for v in raw), dtype=np.int64)
        if ids.size == 0:
            return []
        pos = np.searchsorted(self.var_ids, ids)
        ok = pos < len(self.var_ids)
        ok[ok] = self.var_ids[pos[ok]] == ids[ok]
        self.dropped_refs += int(ids.size - ok.sum())
        return ids[ok].tolist()  # type: ignore[no-any-return]

    def _context_of(self, p: Any, pid: int) -> int | None:
        ctx = self._replaced_contexts().get(pid, _ABSENT)
        if ctx is _ABSENT:
            ctx = getattr(p, "debugContext", _ABSENT)
        if ctx is _ABSENT:
            ctx = self._operation_contexts().get(pid)
        if isinstance(ctx, (list, tuple)):
            ctx = ctx[0] if ctx else None
        return None if ctx is None else self.contexts.add(ctx)

    def _operation_contexts(self) -> dict[int, Any]:
        """Program id -> debug context from ``pva.OperationAnalysis`` (computed once).

        Used only when programs have no ``debugContext`` attribute.
        """
        if self._op_contexts is None:
            self._op_contexts = {}
            analysis = getattr(self.pva, "OperationAnalysis", None)
            if analysis is None:
                log.warning("%s: programs carry no debug context and pva has no OperationAnalysis; "
                            "operations cannot be named", self.profile)
                return self._op_contexts
            log.info("export: programs carry no debugContext; taking contexts from pva.OperationAnalysis")
            for op, programs in self._operations():
                # PopTorch's own tests prefer replacedDebugContext when it is set.
                ctx = attr(op, "replacedDebugContext")
                if ctx is None:
                    ctx = attr(op, "debugContext")
                if ctx is not None:
                    for prog in programs:
                        self._op_contexts.setdefault(ident(prog), ctx)
        return self._op_contexts

    def _operations(self) -> list[tuple[Any, list[Any]]]:
        """(operation, its programs) from ``pva.OperationAnalysis``, computed once; empty without it."""
        if self._ops is None:
            self._ops = []
            analysis = getattr(self.pva, "OperationAnalysis", None)
            if analysis is not None:
                for op in attr(analysis(self.report), "operations", default=()) or ():
                    programs = getattr(op, "programs", None)
                    programs = programs() if callable(programs) else programs
                    self._ops.append((op, list(programs or ())))
        return self._ops

    def _replaced_contexts(self) -> dict[int, Any]:
        """Program id -> an operation's ``replacedDebugContext``, where libpva sets one.

        It wins over the program's own ``debugContext``: when an operation
        replaced another (PopART transforms), it names the original one.
        """
        if self._replaced is None:
            self._replaced = {}
            for op, programs in self._operations():
                ctx = attr(op, "replacedDebugContext")
                if ctx is not None:
                    for prog in programs:
                        self._replaced.setdefault(ident(prog), ctx)
            if self._replaced:
                log.info("export: %d programs take an operation's replacedDebugContext", len(self._replaced))
        return self._replaced

    def _emit_missing(self, w: JsonWriter) -> None:
        """Emit programs referenced (as children, steps, roots) but not listed."""
        while True:
            needed = self.child_ids | set(self.step_ids.tolist()) | set(self.control_ids or ())
            missing = needed - self.emitted
            if not missing:
                return
            found = self._find_programs(missing)
            if not found:
                shown = ", ".join(str(i) for i in sorted(missing)[:5])
                raise ExportError(f"{self.profile}: programs {shown} are referenced but libpva does not list them")
            log.info("export: %d programs were reachable but not in compilation.programs", len(found))
            for program in found:
                self._emit(w, program)

    def _find_programs(self, wanted: set[int]) -> list[Any]:
        """Search the program tree (from steps, roots and the list) for ``wanted`` ids."""
        found: dict[int, Any] = {}
        visited: set[int] = set()
        steps = attr(self.comp, "livenessProgramSteps", default=()) or ()
        sources = itertools.chain(
            (attr(s, "program") for s in steps),
            (p for p in attr(self.comp, "controlPrograms", default=()) or () if not isinstance(p, int)),
            attr(self.comp, "programs", default=()) or (),
        )
        for root in sources:
            stack = [root]
            while stack:
                p = stack.pop()
                if p is None:
                    continue
                pid = ident(p)
                if pid in visited:
                    continue
                visited.add(pid)
                if pid in wanted:
                    found[pid] = p
                    if len(found) == len(wanted):
                        return list(found.values())
                stack.extend(attr(p, "children", default=()) or ())
        return list(found.values())

    def _roots(self) -> list[int]:
        if self.control_ids is not None:
            return self.control_ids
        # [U] no documented list of roots: take the programs nobody calls, in listed order.
        return [pid for pid in self.order if pid not in self.child_ids]

    # -- tiles ----------------------------------------------------------------

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
        for layer, framework in _FRAMEWORK_BY_LAYER:
            if layer in self.contexts.layers:
                src["framework"] = framework
                break
        if self.notes:
            src["note"] = " ".join(self.notes)
        return src


_ABSENT = object()


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
