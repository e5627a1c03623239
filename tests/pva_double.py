"""TEST DOUBLE of the part of libpva (the Poplar SDK's ``pva`` module) that
``popliner export`` reads. It is NOT libpva and says nothing about how the
real library behaves beyond attribute names and shapes.

The shapes follow shared/reference/libpva-data-model.md. Where that page
marks an attribute unknown, the double makes the same choice as the exporter
(docs/libpva-mapping.md lists them): ``Program.debugContext``,
``Program.repeatCount``, the debug-context name inside ``json``, and
``parents[0]`` as the direct parent. ``compilation.controlPrograms`` is not
documented, so it exists only when asked for.

The double is built FROM a format-v1 document (a dict), so exporting it must
give back an equivalent document: that is the round-trip test.
"""

from __future__ import annotations

import enum
import json
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["make_pva"]

#: Ids of copies of variables on IPU k > 0 are ``id + k * IPU_ID_OFFSET``.
IPU_ID_OFFSET = 1_000_000
#: Class ids in the double are the document's class index plus this (ids are not positions).
CLASS_ID_OFFSET = 5000


class ProgramType(enum.Enum):
    """A subset of ``pva.Program.Type``; the format's ``Switch`` is libpva's ``OnEveryTileSwitch``."""

    Sequence = 0
    Repeat = 1
    Call = 2
    If = 3
    OnEveryTileSwitch = 4
    OnTileExecute = 5
    DoExchange = 6
    GlobalExchange = 7
    StreamCopyBegin = 8
    StreamCopyMid = 9
    StreamCopyEnd = 10
    Copy = 11
    Sync = 12
    WriteUndef = 13  # an "Other" in the format


_FORMAT_TO_DOUBLE = {"Switch": "OnEveryTileSwitch", "Other": "WriteUndef"}


class TargetType(enum.Enum):
    Ipu = 0
    IpuModel = 1


@dataclass
class Version:
    string: str


@dataclass
class Target:
    numTiles: int
    tilesPerIpu: int
    numIPUs: int
    bytesPerTile: int
    bytesPerIPU: int
    clockFrequency: float
    numReplicas: int
    ipusPerReplica: int
    tilesPerReplica: int
    type: TargetType


@dataclass(eq=False)
class VertexType:
    name: str
    size: int


@dataclass(eq=False)
class NameOnlyVertexType:
    """A tile-memory vertex type that carries no state size."""

    name: str


@dataclass
class ComputeSetVertex:
    type: VertexType
    countByTile: list[int]


@dataclass
class ComputeSet:
    name: str
    vertices: list[ComputeSetVertex]
    estimatedCyclesByTile: list[int]


@dataclass(eq=False)
class DebugContext:
    id: int
    layer: str
    json: str
    parents: list[DebugContext] = field(default_factory=list)
    location: Any = None


@dataclass(eq=False)
class LoweredVar:
    """A full lowered-variable record, as in ``Program.vars``."""

    _id: int
    name: str
    bytes: int


@dataclass
class Interval:
    start: int
    end: int


@dataclass(eq=False)
class EquivalenceClass:
    id: int
    steps: list[Interval]


@dataclass(eq=False)
class BriefVar:
    id: int
    bytes: int
    tileId: int
    equivalenceClass: EquivalenceClass


class Program:
    """A program; the attributes present depend on its type, as in libpva."""

    def __init__(self, pid: int, name: str, ptype: ProgramType, num_tiles: int) -> None:
        self._id = pid
        self.name = name
        self.type = ptype
        self.children: list[Program] = []
        self.controlCodeByTile = [0] * num_tiles
        self.codeBytesByTile = [0] * num_tiles
        self.estimatedCyclesByTile: list[int] = []
        self.vars: list[LoweredVar] = []

    def __repr__(self) -> str:
        return f"Program({self._id}, {self.type.name})"


@dataclass
class LivenessStep:
    program: Program


class FailingList(list):  # type: ignore[type-arg]
    """A list whose iteration raises ``exc`` after ``after`` items (an I/O error midway)."""

    def __init__(self, items: list[Any], after: int, exc: BaseException) -> None:
        super().__init__(items)
        self.after = after
        self.exc = exc

    def __iter__(self) -> Iterator[Any]:
        for i, item in enumerate(list.__iter__(self)):
            if i == self.after:
                raise self.exc
            yield item


@dataclass
class LoweredVariables:
    allBriefVars: list[BriefVar]


@dataclass
class CategoryTotal:
    total: int


class Categories:
    """``tile.memory.category``: one attribute per storage category."""

    def __init__(self, totals: dict[str, int]) -> None:
        for name, value in totals.items():
            setattr(self, name, CategoryTotal(value))


@dataclass
class TileVertex:
    type: Any
    codeBytes: int


@dataclass
class TileMemory:
    vertices: list[TileVertex]
    alwaysLiveBytes: int | None = None
    notAlwaysLiveBytes: int | None = None
    category: Categories | None = None


@dataclass
class Tile:
    memory: TileMemory


@dataclass
class Compilation:
    target: Target
    tiles: list[Tile]
    programs: list[Program]
    livenessProgramSteps: list[LivenessStep]
    loweredVariables: LoweredVariables


@dataclass
class Report:
    compilation: Compilation
    poplarVersion: Version


@dataclass
class Operation:
    name: str
    debugContext: DebugContext
    _programs: list[Program]
    replacedDebugContext: DebugContext | None = None

    def programs(self) -> list[Program]:
        return self._programs


# -- building ---------------------------------------------------------------


def dense(tv: Any, tiles: int) -> list[int]:
    """A format-v1 TileVector as a dense list (absent = zeros)."""
    out = [0] * tiles
    if tv is None:
        return out
    if isinstance(tv, list):
        return list(tv)
    for first, stop, value in tv.get("runs", []):
        out[first:stop] = [value] * (stop - first)
    for tile, value in tv.get("sparse", []):
        out[tile] = value
    return out


def _all_ipus(ipu0: list[int], ipus: int) -> list[int]:
    """Per-tile list over every IPU; other IPUs get different values on purpose."""
    out = list(ipu0)
    for k in range(1, ipus):
        out += [v * 2 + k for v in ipu0]
    return out


class _Builder:
    def __init__(self, doc: dict[str, Any], ipus: int, tile_vertex_sizes: bool, program_contexts: bool) -> None:
        self.doc = doc
        self.ipus = ipus
        self.tiles = doc["target"]["tilesPerIpu"]
        self.tile_vertex_sizes = tile_vertex_sizes
        self.program_contexts = program_contexts

    def per_tile(self, tv: Any) -> list[int]:
        return _all_ipus(dense(tv, self.tiles), self.ipus)

    def target(self) -> Target:
        t = self.doc["target"]
        num_tiles = self.tiles * self.ipus
        return Target(
            numTiles=num_tiles, tilesPerIpu=self.tiles, numIPUs=self.ipus, bytesPerTile=t["bytesPerTile"],
            bytesPerIPU=t["bytesPerTile"] * self.tiles, clockFrequency=float(t["clockFrequency"]),
            numReplicas=1, ipusPerReplica=self.ipus, tilesPerReplica=num_tiles, type=TargetType.Ipu,
        )

    def contexts(self) -> dict[int, DebugContext]:
        by_id: dict[int, DebugContext] = {}
        for c in self.doc["debugContexts"]:
            # Like debug.cbor: the JSON holds id, parentId, name and layer besides the layer's keys.
            text = {"id": c["id"], "parentId": c["parent"], "name": c["name"], "layer": c["layer"],
                    **(c.get("data") or {})}
            by_id[c["id"]] = DebugContext(id=c["id"], layer=c["layer"], json=json.dumps(text))
        for c in self.doc["debugContexts"]:
            if c["parent"] is not None:
                by_id[c["id"]].parents = [by_id[c["parent"]]]
        return by_id

    def variables(self) -> tuple[list[BriefVar], dict[int, list[LoweredVar]]]:
        classes = [
            EquivalenceClass(CLASS_ID_OFFSET + i, [Interval(s, e) for s, e in ivs])
            for i, ivs in enumerate(self.doc["livenessClasses"])
        ]
        v = self.doc["variables"]
        brief: list[BriefVar] = []
        full: dict[int, list[LoweredVar]] = {}
        for k in range(self.ipus):
            for vid, nbytes, tile, cls in zip(v["id"], v["bytes"], v["tile"], v["class"]):
                copy_id = vid + k * IPU_ID_OFFSET
                brief.append(BriefVar(copy_id, nbytes, tile + k * self.tiles, classes[cls]))
                full.setdefault(vid, []).append(LoweredVar(copy_id, f"var{copy_id}", nbytes))
        return brief, full

    def programs(self, contexts: dict[int, DebugContext], full_vars: dict[int, list[LoweredVar]]
                 ) -> dict[int, Program]:
        vtypes = [VertexType(t["name"], t["size"]) for t in self.doc["vertexTypes"]]
        by_id: dict[int, Program] = {}
        for p in self.doc["programs"]:
            ptype = ProgramType[_FORMAT_TO_DOUBLE.get(p["type"], p["type"])]
            prog = Program(p["id"], p.get("name", ""), ptype, self.tiles * self.ipus)
            prog.controlCodeByTile = self.per_tile(p.get("controlCode"))
            if p["type"] == "DoExchange":
                prog.codeBytesByTile = self.per_tile(p.get("exchangeCode"))
            prog.vars = [lv for vid in p.get("vars", []) for lv in full_vars[vid]]
            if self.program_contexts:
                ctx = p.get("debugContext")
                prog.debugContext = None if ctx is None else contexts[ctx]  # type: ignore[attr-defined]
            cycles = self.per_tile(p["cycles"]) if "cycles" in p else []
            if p["type"] == "OnTileExecute":
                verts = [ComputeSetVertex(vtypes[vt], self.per_tile(tv)) for vt, tv in p.get("vertices", [])]
                prog.computeset = ComputeSet(p.get("name", ""), verts, cycles)  # type: ignore[attr-defined]
            else:
                prog.estimatedCyclesByTile = cycles
            if "repeatCount" in p:
                prog.repeatCount = p["repeatCount"]  # type: ignore[attr-defined]
            by_id[p["id"]] = prog
        for p in self.doc["programs"]:
            by_id[p["id"]].children = [by_id[c] for c in p.get("children", [])]
        return by_id

    def tile_list(self) -> list[Tile]:
        vtypes = self.doc["vertexTypes"]
        size_types: list[Any] = [
            VertexType(t["name"], t["size"]) if self.tile_vertex_sizes else NameOnlyVertexType(t["name"])
            for t in vtypes
        ]
        code = [self.per_tile(t["codeBytes"]) for t in vtypes]
        tm = self.doc.get("tileMemory")
        always = self.per_tile(tm.get("alwaysLive")) if tm else None
        peak = self.per_tile(tm.get("notAlwaysLivePeak")) if tm else None
        cats = {k: self.per_tile(v) for k, v in (tm or {}).get("categories", {}).items()}
        tiles = []
        for t in range(self.tiles * self.ipus):
            verts = [TileVertex(size_types[i], code[i][t]) for i in range(len(vtypes)) if code[i][t]]
            memory = TileMemory(verts)
            if tm is not None:
                memory.alwaysLiveBytes = always[t] if always else 0
                memory.notAlwaysLiveBytes = peak[t] if peak else 0
                memory.category = Categories({k: v[t] for k, v in cats.items()})
            tiles.append(Tile(memory))
        return tiles


def make_pva(
    doc: dict[str, Any],
    *,
    ipus: int = 1,
    control_programs: bool = False,
    tile_vertex_sizes: bool = True,
    program_contexts: bool = True,
    fail_after_vars: int | None = None,
    fail_with: BaseException | None = None,
    flat_contexts: bool = False,
    replaced: dict[int, int] | None = None,
) -> types.ModuleType:
    """A module object standing in for ``pva``, whose report mirrors ``doc``.

    ``ipus`` > 1 makes a multi-IPU report (IPU 0 is ``doc``; other IPUs get
    copies of the variables and different per-tile values).
    ``control_programs`` adds ``compilation.controlPrograms`` (undocumented).
    ``tile_vertex_sizes`` gives tile-memory vertex types a ``size``.
    ``program_contexts`` False leaves ``Program.debugContext`` out and offers
    ``OperationAnalysis`` instead. ``fail_after_vars`` makes iterating
    ``allBriefVars`` raise ``fail_with`` after that many variables.
    ``flat_contexts`` gives no debug context ``parents`` (as a libpva that
    does not expose them would). ``replaced`` (context id -> context id)
    gives the operations of those contexts a ``replacedDebugContext`` and
    offers ``OperationAnalysis`` even when programs carry contexts.
    """
    b = _Builder(doc, ipus, tile_vertex_sizes, program_contexts)
    contexts = b.contexts()
    if flat_contexts:
        for c in contexts.values():
            c.parents = []
    brief, full_vars = b.variables()
    programs = b.programs(contexts, full_vars)
    if fail_after_vars is not None:
        brief = FailingList(brief, fail_after_vars, fail_with or RuntimeError("profile.pop: read error"))
    comp = Compilation(
        target=b.target(),
        tiles=b.tile_list(),
        programs=list(programs.values()),
        livenessProgramSteps=[LivenessStep(programs[pid]) for pid in doc["steps"]],
        loweredVariables=LoweredVariables(brief),
    )
    if control_programs:
        comp.controlPrograms = [programs[pid] for pid in doc["controlPrograms"]]  # type: ignore[attr-defined]
    report = Report(comp, Version("0.0.0 (pva test double)"))

    def operation_analysis(rep: Report) -> types.SimpleNamespace:
        by_ctx: dict[int, list[Program]] = {}
        for p in doc["programs"]:
            if p.get("debugContext") is not None:
                by_ctx.setdefault(p["debugContext"], []).append(programs[p["id"]])
        swap = replaced or {}
        ops = [Operation(f"op{cid}", contexts[cid], progs,
                         contexts[swap[cid]] if cid in swap else None) for cid, progs in by_ctx.items()]
        return types.SimpleNamespace(operations=ops)

    module = types.ModuleType("pva", "TEST DOUBLE of libpva for popliner's tests; not the Poplar SDK.")
    module.openReport = lambda profile, debug=None: report  # type: ignore[attr-defined]
    module.report = report  # type: ignore[attr-defined]  # for tests that alter it
    if not program_contexts or replaced:
        module.OperationAnalysis = operation_analysis  # type: ignore[attr-defined]
    return module
