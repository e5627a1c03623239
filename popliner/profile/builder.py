"""A parsed format-v1 document (with or without the column reader's arrays) checked and built into a Profile.

Every parse path ends here: the ordinary one hands over the whole parsed
document, the column reader the document with its bulky lists replaced by
placeholders and those lists as arrays. The checks are the same for both
(:mod:`popliner.profile.rules`); the only difference is where an integer
column comes from.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from popliner.hardware import CLOCK_HZ_RANGE
from popliner.profile import varcols
from popliner.profile.build_state import BuildState
from popliner.profile.columns import Extracted
from popliner.profile.limits import check_tile_cells
from popliner.profile.model import Contexts, Profile, Target, VertexTypes
from popliner.profile.programs import build_programs
from popliner.profile.rules import INT64_MAX, MAX_TILES, NotFast, back_edge, kind
from popliner.profile.tilevector import MAX_VALUE, RunTable, RunTableBuilder, decode_tilevector
from popliner.profile.totals import check_totals

__all__ = ["Builder"]

log = logging.getLogger(__name__)


class Builder(BuildState):
    """Validates the document section by section while building arrays."""

    def __init__(self, doc: Any, path: str, sha256: str, extracted: Extracted | None = None) -> None:
        super().__init__(path, extracted)
        self.doc = doc
        self.sha256 = sha256

    def build(self) -> Profile:
        doc = self.check(self.doc, "", (dict,), "a JSON object at the top level")
        self._check_format(doc)
        target = self.build_target(self.need(doc, "target", "", (dict,), "an object"))
        self.tiles = target.tiles_per_ipu
        raw_types = doc.get("vertexTypes")
        if isinstance(raw_types, list):  # refused from the sizes alone, before any TileVector is decoded
            check_tile_cells(self.path, self.tiles, len(raw_types))
        steps_raw = self.need(doc, "steps", "", (list,), "a list of program ids")
        self.num_steps = len(steps_raw)
        contexts = self.build_contexts(self.need(doc, "debugContexts", "", (list,), "a list"))
        classes = varcols.build_classes(self, self.need(doc, "livenessClasses", "", (list,), "a list"))
        raw_vars = self.need(doc, "variables", "", (dict,), "an object")
        if self.extracted is not None and raw_vars != Extracted.VARIABLES_PLACEHOLDER:
            raise NotFast
        variables = varcols.build_variables(self, raw_vars, len(classes[0]) - 1)
        vertex_types = self.build_vertex_types(self.need(doc, "vertexTypes", "", (list,), "a list"))
        programs = build_programs(self, self.need(doc, "programs", "", (list,), "a list"), vertex_types)
        controls = self.program_refs(self.need(doc, "controlPrograms", "", (list,), "a list"), "controlPrograms")
        steps = self.program_refs(steps_raw, "steps")
        tile_memory = self.build_tile_memory(doc.get("tileMemory"))
        source = doc.get("source")
        if source is None:
            source = {}
        self.check(source, "source", (dict,), "an object")
        check_totals(self, variables, vertex_types, programs)
        return Profile(path=self.path, sha256=self.sha256, target=target, vertex_types=vertex_types,
                       programs=programs, control_programs=controls, steps=steps, variables=variables,
                       class_ptr=classes[0], iv_start=classes[1], iv_end=classes[2], contexts=contexts,
                       tile_memory=tile_memory, source=source)

    def _check_format(self, doc: dict[str, Any]) -> None:
        if "format" not in doc:
            self.fail("", 'missing required key "format"; is this a popliner profile?')
        fmt = doc["format"]
        if fmt != "popliner-profile":
            self.fail("format", f'expected "popliner-profile", got {json.dumps(fmt)}; is this a popliner profile?')
        if "version" not in doc:
            self.fail("", 'missing required key "version"')
        version = doc["version"]
        # true == 1 and 1.0 == 1 in Python; only the JSON integer 1 is version 1.
        if type(version) is not int or version != 1:
            self.fail("version", f"unsupported version {json.dumps(version)}; this popliner reads version 1")

    def build_target(self, t: dict[str, Any]) -> Target:
        tiles = self.int_at(self.need(t, "tilesPerIpu", "target", (int,), "an integer"), "target.tilesPerIpu", 1)
        if tiles > MAX_TILES:
            self.fail("target.tilesPerIpu", f"{tiles} tiles per IPU is beyond any IPU (limit {MAX_TILES})")
        num_tiles = self.int_at(self.need(t, "numTiles", "target", (int,), "an integer"), "target.numTiles", 1,
                                MAX_VALUE)
        num_ipus = self.int_at(self.need(t, "numIpus", "target", (int,), "an integer"), "target.numIpus", 1,
                               MAX_VALUE)
        bpt = self.int_at(self.need(t, "bytesPerTile", "target", (int,), "an integer"), "target.bytesPerTile", 1,
                          MAX_VALUE)
        clock = self.need(t, "clockFrequency", "target", (int, float), "a number")
        low, high = CLOCK_HZ_RANGE
        if not clock > 0 or clock != clock or clock == float("inf"):
            self.fail("target.clockFrequency", f"expected a positive frequency in Hz, got {clock}")
        if not low <= clock <= high:  # 1e-300 Hz made every time infinite
            self.fail("target.clockFrequency", f"{clock:g} Hz is no IPU clock (expected {low:g} to {high:g} Hz)")
        arch = t.get("arch")
        if arch is not None:
            self.check(arch, "target.arch", (str,), "a string")
        if num_tiles != tiles:
            log.warning(
                "%s: target.numTiles (%d) differs from tilesPerIpu (%d): the profile covers several IPUs or "
                "replicas; popliner models one IPU and uses its first %d tiles",
                self.path, num_tiles, tiles, tiles,
            )
        return Target(tiles, num_tiles, num_ipus, bpt, float(clock), arch)

    def build_contexts(self, raw: list[Any]) -> Contexts:
        n = len(raw)
        ids = np.empty(n, np.int64)
        parent_ids: list[int | None] = []
        layers: list[str] = []
        names: list[str] = []
        data: list[dict[str, Any] | None] = []
        for i, c in enumerate(raw):
            where = f"debugContexts[{i}]"
            self.check(c, where, (dict,), "an object")
            ids[i] = self.int_at(self.need(c, "id", where, (int,), "an integer"), f"{where}.id", 0, INT64_MAX)
            if "parent" not in c:
                self.fail(where, 'missing required key "parent" (null for a root)')
            par = c["parent"]
            if par is not None:
                self.int_at(par, f"{where}.parent", 0, INT64_MAX)
            parent_ids.append(par)
            layers.append(self.need(c, "layer", where, (str,), "a string"))
            names.append(self.need(c, "name", where, (str,), "a string"))
            d = c.get("data")
            if d is not None:
                self.check(d, f"{where}.data", (dict,), "an object")
                inputs = d.get("inputs")
                if inputs is not None and not (isinstance(inputs, list) and all(isinstance(s, str) for s in inputs)):
                    self.fail(f"{where}.data.inputs", "expected a list of strings")
            data.append(d)
        index = self.index_of(ids, "debugContexts", "debug context")
        self.ctx_index = index
        parent = np.full(n, -1, np.int64)
        for i, par in enumerate(parent_ids):
            if par is not None:
                j = index.get(par)
                if j is None:
                    self.fail(f"debugContexts[{i}].parent", f"no debug context has id {par}")
                parent[i] = j
        self._check_context_cycles(parent)
        return Contexts(ids, parent, tuple(layers), tuple(names), tuple(data))

    def _check_context_cycles(self, parent: np.ndarray) -> None:
        par = parent.tolist()
        found = back_edge(range(len(par)), lambda c: () if par[c] == -1 else (par[c],))
        if found is not None:
            self.fail(f"debugContexts[{par[found[0]]}].parent", "the parent links form a cycle")

    def build_vertex_types(self, raw: list[Any]) -> VertexTypes:
        names: list[str] = []
        sizes = np.zeros(len(raw), np.int64)
        code = RunTableBuilder()
        for i, vt in enumerate(raw):
            where = f"vertexTypes[{i}]"
            self.check(vt, where, (dict,), "an object")
            names.append(self.need(vt, "name", where, (str,), "a string"))
            sizes[i] = self.int_at(self.need(vt, "size", where, (int,), "an integer"), f"{where}.size", 0, MAX_VALUE)
            if "codeBytes" in vt:  # absent: like every TileVector, all zeros (a type no tile uses)
                code.add(*decode_tilevector(vt["codeBytes"], self.tiles, f"{where}.codeBytes", self.err))
            code.end_row()
        return VertexTypes(tuple(names), sizes, code.build())

    def program_refs(self, raw: list[Any], section: str) -> np.ndarray:
        out = np.empty(len(raw), np.int64)
        for i, pid in enumerate(raw):
            if type(pid) is not int:
                self.fail(f"{section}[{i}]", f"expected a program id, got {kind(pid)}")
            j = self.prog_index.get(pid)
            if j is None:
                self.fail(f"{section}[{i}]", f"no program has id {pid}")
            out[i] = j
        return out

    def build_tile_memory(self, raw: Any) -> dict[str, np.ndarray] | None:
        if raw is None:
            return None
        self.check(raw, "tileMemory", (dict,), "an object")
        tables = [(key, raw[key], f"tileMemory.{key}") for key in ("alwaysLive", "notAlwaysLivePeak") if key in raw]
        cats = raw.get("categories", {})
        self.check(cats, "tileMemory.categories", (dict,), "an object")
        tables += [(f"category.{name}", vec, f"tileMemory.categories.{name}") for name, vec in cats.items()]
        out: dict[str, np.ndarray] = {}
        for key, vec, where in tables:
            first, stop, value = decode_tilevector(vec, self.tiles, where, self.err)
            out[key] = RunTable(np.array([0, len(first)]), first, stop, value).dense(0, self.tiles)
        return out
