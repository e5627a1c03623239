"""The ``programs`` and ``controlPrograms`` sections of an export: every program once, children before none.

Programs are written in libpva's order, each with its per-tile figures
(control code, exchange code, cycles), its vertex counts by type, the
variables it references (only those of IPU 0 that were written) and its
debug context. Programs that something references (a child, a liveness
step, a root) but that ``compilation.programs`` does not list are found in
the program tree and written after the others, so that every reference in
the document resolves.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import numpy as np

from popliner.errors import ExportError
from popliner.export.collect import ContextCollector, Progress, VertexTypeTable
from popliner.export.jsonstream import JsonWriter
from popliner.export.program_contexts import ProgramContexts
from popliner.export.pvaread import as_int, attr, check_size, encode_tilevector, ident, per_tile, program_type, safe_len
from popliner.profile.rules import back_edge

__all__ = ["ProgramsSection"]

log = logging.getLogger("popliner.export")

#: Program types that only order or synchronise others: no operation owns them (see check_program_contexts).
_CONTROL_TYPES = frozenset({"Sequence", "Repeat", "Call", "If", "Switch", "Sync"})


class ProgramsSection:
    """Writes the programs of one report; counts what it wrote (see the export's context checks)."""

    def __init__(self, comp: Any, profile: Path, tiles: int, vtypes: VertexTypeTable, contexts: ContextCollector,
                 program_contexts: ProgramContexts, var_ids: np.ndarray, step_ids: np.ndarray) -> None:
        self.comp = comp
        self.profile = profile
        self.tiles = tiles
        self.vtypes = vtypes
        self.contexts = contexts
        self.program_contexts = program_contexts
        self.var_ids = var_ids  # sorted ids of the written variables
        self.step_ids = step_ids
        self.dropped_refs = 0
        #: Programs with a context; leaf programs other than Sync (an operation can own them), and those with one.
        self.with_context = 0
        self.ownable = 0
        self.ownable_with_context = 0
        #: Whether any program has a ``debugContext`` attribute (None or not).
        self.own_attribute = False
        self._children: dict[int, list[int]] = {}
        self.emitted: set[int] = set()
        self.order: list[int] = []
        self.child_ids: set[int] = set()
        self.control_ids: list[int] | None = None

    def write(self, w: JsonWriter) -> None:
        control = attr(self.comp, "controlPrograms")  # [U]: not in the documented API
        if control is not None:
            self.control_ids = [p if isinstance(p, int) else ident(p) for p in control]
        programs = attr(self.comp, "programs", default=()) or ()
        progress = Progress("programs", safe_len(programs))
        w.key("programs")
        w.begin(b"[")
        for n, program in enumerate(programs, 1):
            self._emit(w, program)
            progress.update(n)
        self._emit_missing(w)
        w.end(b"]")
        self._check_tree()
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
            self._children[pid] = children
        ctx = self._context_of(p, pid)
        self.own_attribute = self.own_attribute or hasattr(p, "debugContext")
        ownable = not children and ptype not in _CONTROL_TYPES
        self.ownable += ownable
        if ctx is not None:
            rec["debugContext"] = ctx
            self.with_context += 1
            self.ownable_with_context += ownable
        self._put(rec, "controlCode", attr(p, "controlCodeByTile"), f"program {pid}'s controlCodeByTile")
        if ptype == "DoExchange":
            # codeBytesByTile means internal-exchange code only for DoExchange.
            self._put(rec, "exchangeCode", attr(p, "codeBytesByTile"), f"program {pid}'s codeBytesByTile")
        cs = attr(p, "computeset", "computeSet")
        vertices = self._vertices(cs) if cs is not None else []
        if vertices:
            rec["vertices"] = vertices
        var_ids = self._program_vars(p, pid)
        if var_ids:
            rec["vars"] = var_ids
        cycles = attr(p, "estimatedCyclesByTile")
        if not safe_len(cycles) and cs is not None:
            cycles = attr(cs, "estimatedCyclesByTile")
        self._put(rec, "cycles", cycles, f"program {pid}'s estimatedCyclesByTile")
        if ptype == "Repeat":
            count = attr(p, "repeatCount", "count", "numIterations")  # [U]
            if count is not None:
                rec["repeatCount"] = check_size(as_int(count), f"program {pid}'s repeat count")
        return rec

    def _put(self, rec: dict[str, Any], key: str, values: Any, what: str) -> None:
        tv = encode_tilevector(per_tile(values, self.tiles, what)) if values is not None else None
        if tv is not None:
            rec[key] = tv

    def _vertices(self, cs: Any) -> list[list[Any]]:
        counts: dict[int, np.ndarray] = {}
        for vertex in attr(cs, "vertices", default=()) or ():
            tid = self.vtypes.type_id(attr(vertex, "type"))
            arr = per_tile(attr(vertex, "countByTile"), self.tiles, "a compute set's vertex countByTile")
            counts[tid] = counts[tid] + arr if tid in counts else arr
        return [[tid, tv] for tid, arr in counts.items() if (tv := encode_tilevector(arr)) is not None]

    def _program_vars(self, p: Any, pid: int) -> list[int]:
        raw: Any = getattr(p, "vars", None)
        from_operation = raw is None
        if from_operation:  # [U] no public code reads Program.vars: take the operation's, as the original PopLiner
            raw = self.program_contexts.operation_vars(pid)
        ids = np.fromiter((ident(v) for v in raw), dtype=np.int64)
        if from_operation:
            ids = np.unique(ids)  # an operation may list a variable once per program
        if ids.size == 0:
            return []
        pos = np.searchsorted(self.var_ids, ids)
        ok = pos < len(self.var_ids)
        ok[ok] = self.var_ids[pos[ok]] == ids[ok]
        self.dropped_refs += int(ids.size - ok.sum())
        return ids[ok].tolist()  # type: ignore[no-any-return]

    def _check_tree(self) -> None:
        """Refuse a program that is its own ancestor (the loader would refuse the document)."""
        found = back_edge(list(self._children), lambda pid: self._children.get(pid, []))
        if found is not None:
            raise ExportError(f"{self.profile}: program {self._children[found[0]][found[1]]} is its own ancestor in "
                              "libpva's program tree (a cycle through `children`); the report is corrupt; profile "
                              "the compilation again")

    def _context_of(self, p: Any, pid: int) -> int | None:
        ctx = self.program_contexts.of(p, pid)
        return None if ctx is None else self.contexts.add(ctx)

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
