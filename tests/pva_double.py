"""TEST DOUBLE of the part of libpva (the Poplar SDK's ``pva`` module) that
``popliner export`` reads. It is NOT libpva.

Every attribute has the type and shape that public code using the real
library shows; docs/libpva-mapping.md ("Evidence") gives, per attribute, the
repository, file, line and SDK branch. In short:

- graphcore/popliner (the original PopLiner, ``popliner/{stage,operation,
  operation_list}.py``, ``tests/test_single_stage.py``): the target's
  ``tilesPerIpu``/``numTiles``, ``livenessProgramSteps[].program._id``,
  ``loweredVariables.allBriefVars`` (``id``, ``bytes``, ``tileId``,
  ``equivalenceClass.id``/``.steps[].start``/``.end``), programs (``_id``,
  ``children``, ``controlCodeByTile``, ``codeBytesByTile``, ``type`` compared
  with ``pva.Program.Type.DoExchange``, ``computeset.vertices[].type.name``/
  ``.size``/``.countByTile``), ``tiles[].memory.vertices[].type.name``/
  ``.codeBytes``, ``memory.category.<name>.total``, ``alwaysLiveBytes``, and
  ``pva.OperationAnalysis(report).operations[]`` with ``name``,
  ``debugContext.id``/``.json``, ``programs()`` (a method), ``vars``,
  ``firstStepIndex``/``lastStepIndex``;
- graphcore/poptorch ``tests/precompilation_test.py`` (sdk-release-3.0 to
  3.4): ``replacedDebugContext`` is a list (truthy when not empty, indexed
  ``[0]``), a context's ``parents`` is a list, ``layer`` is parsed with
  ``json.loads(...)["layer"]``, ``json`` is JSON text, ``location.fileName``/
  ``.lineNumber``;
- graphcore/popart ``tests/integration/report_test.py`` (sdk-release-3.0 to
  3.4): ``compilation.target.architecture == pva.IPU.Architecture.Ipu2``;
- graphcore/ipu_tensorflow_addons and others: the target's ``numIPUs``,
  ``bytesPerTile``, ``bytesPerIPU``, ``clockFrequency``, ``numReplicas``,
  ``ipusPerReplica``, ``tilesPerReplica``, ``type``.

Where no public code settles a shape the double offers each plausible one
(keyword arguments of :func:`make_pva`) and the exporter is tested on all:
``Program.debugContext`` present or absent (``program_contexts``), a
context's ``layer`` as JSON object text or a plain string (``layer_shape``),
``architecture`` an enum or absent (``architecture``), ``Program.vars``
present or only ``Operation.vars`` (``program_vars``), lists or another
sequence type (``sequence``), ``repeatCount`` and ``controlPrograms``
present or not. ``pva.OperationAnalysis`` always exists, as in libpva.

The double is built FROM a format-v1 document (a dict), so exporting it must
give back an equivalent document: that is the round-trip test.
"""

from __future__ import annotations

import enum
import json
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

__all__ = ["BoundVector", "make_pva"]

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


class Architecture(enum.Enum):
    """``pva.IPU.Architecture`` (PopART's report_test compares with ``Ipu2``)."""

    Ipu1 = 1
    Ipu2 = 2
    Ipu21 = 3


class BoundVector(Sequence[Any]):
    """A sequence that is neither a list nor a tuple, as an opaque pybind11 vector binding would be."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Any]: ...

    def __getitem__(self, i: int | slice) -> Any:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def append(self, item: Any) -> None:
        self._items.append(item)


class _Obj:
    """An object whose attributes are read one at a time, as through pybind11 properties."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class Program(_Obj):
    def __repr__(self) -> str:
        return f"Program({self._id}, {self.type.name})"  # type: ignore[attr-defined]


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


class Categories:
    """``tile.memory.category``: one attribute per storage category, each with ``total``."""

    def __init__(self, totals: dict[str, int]) -> None:
        for name, value in totals.items():
            setattr(self, name, _Obj(total=value))


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
    def __init__(self, doc: dict[str, Any], ipus: int, shapes: dict[str, Any]) -> None:
        self.doc = doc
        self.ipus = ipus
        self.tiles = doc["target"]["tilesPerIpu"]
        self.shapes = shapes
        self.vars_of: dict[int, list[_Obj]] = {}  # every program's variables, whether it shows them or not
        wrap = shapes["sequence"]
        self.seq: Callable[[list[Any]], Any] = BoundVector if wrap == "vector" else list

    def per_tile(self, tv: Any) -> list[int]:
        return _all_ipus(dense(tv, self.tiles), self.ipus)

    def target(self) -> _Obj:
        t = self.doc["target"]
        num_tiles = self.tiles * self.ipus
        target = _Obj(numTiles=num_tiles, tilesPerIpu=self.tiles, numIPUs=self.ipus, bytesPerTile=t["bytesPerTile"],
                      bytesPerIPU=t["bytesPerTile"] * self.tiles, totalMemory=t["bytesPerTile"] * num_tiles,
                      clockFrequency=float(t["clockFrequency"]), numReplicas=1, ipusPerReplica=self.ipus,
                      tilesPerReplica=num_tiles, type=TargetType.Ipu)
        arch = t.get("arch")
        if self.shapes["architecture"] == "enum" and isinstance(arch, str):
            target.architecture = Architecture[arch.capitalize()]
        return target

    def contexts(self) -> dict[int, _Obj]:
        by_id: dict[int, _Obj] = {}
        for c in self.doc["debugContexts"]:
            # Like debug.cbor: the JSON holds id, parentId, name and layer besides the layer's keys.
            text = {"id": c["id"], "parentId": c["parent"], "name": c["name"], "layer": c["layer"],
                    **(c.get("data") or {})}
            layer = json.dumps({"layer": c["layer"]}) if self.shapes["layer_shape"] == "json" else c["layer"]
            ctx = _Obj(id=c["id"], layer=layer, json=json.dumps(text),
                       location=_Obj(fileName="model.py", lineNumber=1))
            if not self.shapes["flat_contexts"]:
                ctx.parents = self.seq([])
            by_id[c["id"]] = ctx
        if not self.shapes["flat_contexts"]:
            for c in self.doc["debugContexts"]:
                if c["parent"] is not None:
                    by_id[c["id"]].parents = self.seq([by_id[c["parent"]]])
        return by_id

    def variables(self) -> tuple[list[_Obj], dict[int, list[_Obj]]]:
        classes = [
            _Obj(id=CLASS_ID_OFFSET + i, steps=[_Obj(start=s, end=e) for s, e in ivs])
            for i, ivs in enumerate(self.doc["livenessClasses"])
        ]
        v = self.doc["variables"]
        brief: list[_Obj] = []
        full: dict[int, list[_Obj]] = {}
        for k in range(self.ipus):
            for vid, nbytes, tile, cls in zip(v["id"], v["bytes"], v["tile"], v["class"]):
                copy_id = vid + k * IPU_ID_OFFSET
                brief.append(_Obj(id=copy_id, bytes=nbytes, tileId=tile + k * self.tiles,
                                  equivalenceClass=classes[cls]))
                full.setdefault(vid, []).append(_Obj(_id=copy_id, name=f"var{copy_id}", bytes=nbytes))
        return brief, full

    def programs(self, contexts: dict[int, _Obj], full_vars: dict[int, list[_Obj]]) -> dict[int, Program]:
        vtypes = [_Obj(name=t["name"], size=t["size"]) for t in self.doc["vertexTypes"]]
        by_id: dict[int, Program] = {}
        num = self.tiles * self.ipus
        for p in self.doc["programs"]:
            ptype = ProgramType[_FORMAT_TO_DOUBLE.get(p["type"], p["type"])]
            prog = Program(_id=p["id"], name=p.get("name", ""), type=ptype, children=self.seq([]),
                           controlCodeByTile=self.per_tile(p.get("controlCode")), codeBytesByTile=[0] * num,
                           estimatedCyclesByTile=[])
            program_vars = [lv for vid in p.get("vars", []) for lv in full_vars[vid]]
            if self.shapes["program_vars"]:
                prog.vars = program_vars
            self.vars_of[p["id"]] = program_vars
            if p["type"] == "DoExchange":
                prog.codeBytesByTile = self.per_tile(p.get("exchangeCode"))
            if self.shapes["program_contexts"]:
                ctx = p.get("debugContext")
                prog.debugContext = None if ctx is None else contexts[ctx]
            cycles = self.per_tile(p["cycles"]) if "cycles" in p else []
            if p["type"] == "OnTileExecute":
                verts = [_Obj(type=vtypes[vt], countByTile=self.per_tile(tv)) for vt, tv in p.get("vertices", [])]
                prog.computeset = _Obj(name=p.get("name", ""), vertices=verts, estimatedCyclesByTile=cycles)
            else:
                prog.estimatedCyclesByTile = cycles
            if "repeatCount" in p and self.shapes["repeat_count"]:
                prog.repeatCount = p["repeatCount"]
            by_id[p["id"]] = prog
        for p in self.doc["programs"]:
            by_id[p["id"]].children = self.seq([by_id[c] for c in p.get("children", [])])
        return by_id

    def tile_list(self) -> list[_Obj]:
        vtypes = self.doc["vertexTypes"]
        size_types: list[_Obj] = [
            _Obj(name=t["name"], size=t["size"]) if self.shapes["tile_vertex_sizes"] else _Obj(name=t["name"])
            for t in vtypes
        ]
        code = [self.per_tile(t["codeBytes"]) for t in vtypes]
        tm = self.doc.get("tileMemory")
        always = self.per_tile(tm.get("alwaysLive")) if tm else None
        peak = self.per_tile(tm.get("notAlwaysLivePeak")) if tm else None
        cats = {k: self.per_tile(v) for k, v in (tm or {}).get("categories", {}).items()}
        tiles = []
        for t in range(self.tiles * self.ipus):
            memory = _Obj(vertices=[_Obj(type=size_types[i], codeBytes=code[i][t])
                                    for i in range(len(vtypes)) if code[i][t]])
            # libpva always has both figures; the double leaves out what the document lacks, so that the
            # round trip can tell "absent" from "zero" (the exporter must not invent zeros).
            if tm is not None and "alwaysLive" in tm:
                memory.alwaysLiveBytes = always[t] if always else 0
            if tm is not None and "notAlwaysLivePeak" in tm:
                memory.notAlwaysLiveBytes = peak[t] if peak else 0
            if tm is not None:
                memory.category = Categories({k: v[t] for k, v in cats.items()})
            tiles.append(_Obj(memory=memory))
        return tiles

    def operations(self, contexts: dict[int, _Obj], programs: dict[int, Program],
                   replaced: dict[int, Any]) -> list[_Obj]:
        """``OperationAnalysis(report).operations``: one per context that programs carry, in program order."""
        steps = {pid: i for i, pid in reversed(list(enumerate(self.doc["steps"])))}
        by_ctx: dict[int, list[Program]] = {}
        for p in self.doc["programs"]:
            if p.get("debugContext") is not None:
                by_ctx.setdefault(p["debugContext"], []).append(programs[p["id"]])
        ops = []
        for cid, progs in by_ctx.items():
            swap = replaced.get(cid, [])
            swap = [swap] if isinstance(swap, int) else list(swap)
            at = [steps[q._id] for q in progs if q._id in steps]  # type: ignore[attr-defined]
            used = {id(v): v for q in progs for v in self.vars_of[q._id]}  # type: ignore[attr-defined]
            op = _Obj(name=json.loads(contexts[cid].json).get("name", ""), debugContext=contexts[cid],
                      replacedDebugContext=self.seq([contexts[r] for r in swap]), vars=list(used.values()),
                      firstStepIndex=min(at, default=-1), lastStepIndex=max(at, default=-1))
            op.programs = (lambda ps=progs: list(ps))  # a method in libpva: op.programs()
            ops.append(op)
        return ops


def make_pva(
    doc: dict[str, Any],
    *,
    ipus: int = 1,
    control_programs: bool = False,
    tile_vertex_sizes: bool = True,
    program_contexts: bool = True,
    layer_shape: str = "json",
    architecture: str = "enum",
    sequence: str = "list",
    program_vars: bool = True,
    repeat_count: bool = True,
    fail_after_vars: int | None = None,
    fail_with: BaseException | None = None,
    flat_contexts: bool = False,
    replaced: dict[int, Any] | None = None,
) -> types.ModuleType:
    """A module object standing in for ``pva``, whose report mirrors ``doc``.

    ``ipus`` > 1 makes a multi-IPU report (IPU 0 is ``doc``; other IPUs get
    copies of the variables and different per-tile values).
    ``control_programs`` adds ``compilation.controlPrograms`` (undocumented).
    ``tile_vertex_sizes`` gives tile-memory vertex types a ``size``.
    ``program_contexts`` False leaves ``Program.debugContext`` out (then only
    ``OperationAnalysis`` names the programs' operations).
    ``layer_shape`` "json" gives a context's ``layer`` as ``{"layer": ...}``
    text (PopTorch's test parses it so), "text" as the plain name.
    ``architecture`` "enum" gives ``target.architecture`` as
    ``Architecture.Ipu2`` and the like, "absent" leaves it out (SDKs before 3.0).
    ``sequence`` "vector" gives ``children``, ``parents`` and
    ``replacedDebugContext`` as a sequence that is not a list.
    ``program_vars`` False leaves ``Program.vars`` out: only the operations'
    ``vars`` (the original PopLiner's source) list the variables.
    ``repeat_count`` False leaves ``Program.repeatCount`` out (no public code
    shows a name for it).
    ``fail_after_vars`` makes iterating ``allBriefVars`` raise ``fail_with``
    after that many variables. ``flat_contexts`` gives debug contexts no
    ``parents`` attribute at all (a libpva that exposes no links).
    ``replaced`` (context id -> context id, or a list of them) gives the
    operations of those contexts a non-empty ``replacedDebugContext``; every
    other operation has an empty list, as in libpva.
    """
    shapes = {"tile_vertex_sizes": tile_vertex_sizes, "program_contexts": program_contexts,
              "layer_shape": layer_shape, "architecture": architecture, "sequence": sequence,
              "flat_contexts": flat_contexts, "program_vars": program_vars,
              "repeat_count": repeat_count}
    b = _Builder(doc, ipus, shapes)
    contexts = b.contexts()
    brief, full_vars = b.variables()
    programs = b.programs(contexts, full_vars)
    brief_seq: list[_Obj] = brief
    if fail_after_vars is not None:
        brief_seq = FailingList(brief, fail_after_vars, fail_with or RuntimeError("profile.pop: read error"))
    comp = _Obj(
        target=b.target(),
        tiles=b.tile_list(),
        programs=list(programs.values()),
        livenessProgramSteps=[_Obj(program=programs[pid]) for pid in doc["steps"]],
        loweredVariables=_Obj(allBriefVars=brief_seq),
    )
    if control_programs:
        comp.controlPrograms = [programs[pid] for pid in doc["controlPrograms"]]
    report = _Obj(compilation=comp, poplarVersion=_Obj(string="0.0.0 (pva test double)", major=0, minor=0))
    operations = b.operations(contexts, programs, replaced or {})

    module = types.ModuleType("pva", "TEST DOUBLE of libpva for popliner's tests; not the Poplar SDK.")
    module.openReport = lambda profile, debug=None: report  # type: ignore[attr-defined]
    module.report = report  # type: ignore[attr-defined]  # for tests that alter it
    module.OperationAnalysis = lambda rep: _Obj(operations=operations)  # type: ignore[attr-defined]
    module.Program = types.SimpleNamespace(Type=ProgramType)  # type: ignore[attr-defined]
    module.IPU = types.SimpleNamespace(Architecture=Architecture)  # type: ignore[attr-defined]
    return module
