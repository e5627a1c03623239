"""Property tests of the format-v1 loader.

``documents()`` builds random but consistent profiles (tiles, vertex types, a
program DAG, steps, variables, liveness classes, a debug-context tree, every
TileVector encoding). Every one must load, and the loaded arrays must match
the document as decoded by ``expand`` below, a deliberately naive decoder
used as the oracle. Then one mutation from ``MUTATIONS`` breaks a document;
the loader must raise ProfileFormatError (never another exception) naming the
file, and the JSON Schema must reject the structural mutations too.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from popliner.errors import ProfileFormatError
from popliner.profile.loader import parse_profile_bytes
from popliner.profile.model import PROGRAM_TYPES, TYPE_CODE, Profile
from popliner.profile.schema import load_schema
from popliner.profile.tilevector import MAX_VALUE
from tests.sizes import examples, sized

Doc = dict[str, Any]
INT64_MAX = 2**63 - 1

SCHEMA = load_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the oracle -----------------------------------------------------------------


def expand(raw: Any, tiles: int) -> list[int]:
    """One value per tile from a TileVector as written (None = key absent)."""
    out = [0] * tiles
    if raw is None:
        return out
    if isinstance(raw, list):
        return list(raw)
    for first, stop, value in raw.get("runs", []):
        for t in range(first, stop):
            out[t] = value
    for tile, value in raw.get("sparse", []):
        out[tile] = value
    return out


# -- valid documents --------------------------------------------------------------

# Values that stress the decoder: zeros (dropped), repeats (merged into runs),
# beyond int32, and the largest value allowed.
VALUES = st.one_of(st.just(0), st.integers(0, 9), st.sampled_from([1000, 2**31, 2**35 + 1, MAX_VALUE]))
NAMES = st.text(max_size=6)


@st.composite
def tilevectors(draw: st.DrawFn, tiles: int, may_be_absent: bool = True) -> Any:
    """A TileVector in a random encoding; None means "leave the key out"."""
    encodings = ["dense", "runs", "sparse", "absent"] if may_be_absent else ["dense", "runs", "sparse"]
    encoding = draw(st.sampled_from(encodings))
    if encoding == "absent":
        return None
    # Few distinct values so that equal neighbours (runs) are common.
    palette = draw(st.lists(VALUES, min_size=1, max_size=3))
    values = draw(st.lists(st.sampled_from(palette), min_size=tiles, max_size=tiles))
    if encoding == "dense":
        return values
    if encoding == "sparse":
        keep_zeros = draw(st.booleans())
        entries = [[t, v] for t, v in enumerate(values) if v or keep_zeros]
        return {"sparse": draw(st.permutations(entries))}
    runs: list[list[int]] = []
    for t, v in enumerate(values):
        # Start a new run on a change of value, or at random to split equal stretches.
        if runs and runs[-1][2] == v and not draw(st.booleans()):
            runs[-1][1] = t + 1
        else:
            runs.append([t, t + 1, v])
    if draw(st.booleans()):
        runs = [r for r in runs if r[2]]  # zero runs may be written or left out
    return {"runs": draw(st.permutations(runs))}


def may_omit(object_type: str, key: str) -> bool:
    """What the JSON Schema says: a key may be left out when it is not required or is a TileVector."""
    node = SCHEMA["$defs"][object_type]
    prop = node["properties"][key]
    return key not in node.get("required", ()) or prop.get("$ref") == "#/$defs/TileVector"


def unique_ints(lo: int, hi: int, n: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(lo, hi), min_size=n, max_size=n, unique=True)


def optional(doc: Doc, key: str, value: Any) -> None:
    if value is not None:
        doc[key] = value


@st.composite
def documents(draw: st.DrawFn) -> Doc:
    tiles = draw(st.integers(1, 6))
    vertex_types = []
    for _ in range(draw(st.integers(0, 3))):
        vt: Doc = {"name": draw(NAMES), "size": draw(st.integers(0, 10**6))}
        # Left out at times (the schema says it may be, as it says for every TileVector), and then
        # often for a type that no program runs, as an independent writer does.
        optional(vt, "codeBytes", draw(tilevectors(tiles, may_be_absent=may_omit("VertexType", "codeBytes"))))
        vertex_types.append(vt)

    # Debug contexts: a forest built in creation order (a parent is always created
    # earlier), then listed in a random order.
    n_ctx = draw(st.integers(0, 5))
    ctx_ids = draw(unique_ints(0, INT64_MAX, n_ctx))
    contexts = []
    for k, cid in enumerate(ctx_ids):
        parent = draw(st.one_of(st.none(), st.sampled_from(ctx_ids[:k]))) if k else None
        c: Doc = {"id": cid, "parent": parent, "layer": draw(st.sampled_from(["popart", "poplibs", "poplar", "onnx"])),
                  "name": draw(NAMES)}
        if draw(st.booleans()):
            c["data"] = {"opName": draw(NAMES), "inputs": draw(st.lists(NAMES, max_size=2))}
        contexts.append(c)
    contexts = draw(st.permutations(contexts))

    # Liveness: the steps are drawn after the programs, but their count is known now.
    n_steps = draw(st.integers(0, 6))
    classes = []
    for _ in range(draw(st.integers(0, 4))):
        intervals = []
        for _ in range(draw(st.integers(0, 3))):
            start = draw(st.integers(0, n_steps))
            intervals.append([start, draw(st.integers(start, n_steps))])
        classes.append(intervals)

    n_vars = draw(st.integers(0, 6)) if classes else 0
    var_ids = draw(unique_ints(-(2**63), INT64_MAX, n_vars))
    variables: Doc = {
        "id": var_ids,
        "bytes": draw(st.lists(st.integers(0, MAX_VALUE), min_size=n_vars, max_size=n_vars)),
        "tile": draw(st.lists(st.integers(0, tiles - 1), min_size=n_vars, max_size=n_vars)),
        "class": draw(st.lists(st.integers(0, len(classes) - 1), min_size=n_vars, max_size=n_vars)) if classes else [],
    }
    if draw(st.booleans()):
        variables["name"] = draw(st.lists(NAMES, min_size=n_vars, max_size=n_vars))

    # Programs: a DAG in creation order (children are created later, so no cycle;
    # a child may be shared), then listed in a random order.
    n_prog = draw(st.integers(1, 6))
    prog_ids = draw(unique_ints(0, INT64_MAX, n_prog))
    programs = []
    for k, pid in enumerate(prog_ids):
        p: Doc = {"id": pid, "type": draw(st.sampled_from(PROGRAM_TYPES))}
        later = prog_ids[k + 1:]
        if len(later) > 0 and draw(st.booleans()):
            p["children"] = draw(st.lists(st.sampled_from(later), max_size=3))
        if draw(st.booleans()):
            p["name"] = draw(NAMES)
        if len(ctx_ids) > 0 and draw(st.booleans()):
            p["debugContext"] = draw(st.one_of(st.none(), st.sampled_from(ctx_ids)))
        for key in ("controlCode", "exchangeCode", "cycles"):
            optional(p, key, draw(tilevectors(tiles)))
        if len(vertex_types) > 0 and draw(st.booleans()):
            types = draw(st.lists(st.integers(0, len(vertex_types) - 1), max_size=len(vertex_types), unique=True))
            p["vertices"] = [[vt, draw(tilevectors(tiles, may_be_absent=False))] for vt in types]
        if len(var_ids) > 0 and draw(st.booleans()):
            p["vars"] = draw(st.lists(st.sampled_from(var_ids), max_size=4))
        if draw(st.booleans()):
            p["repeatCount"] = draw(st.integers(0, 1000))
        programs.append(p)
    programs = draw(st.permutations(programs))

    doc: Doc = {
        "format": "popliner-profile",
        "version": 1,
        "target": {"tilesPerIpu": tiles, "numTiles": tiles, "numIpus": 1,
                   "bytesPerTile": draw(st.integers(1, 638976)),
                   "clockFrequency": draw(st.sampled_from([1.33e9, 1.85e9, 1000000000]))},
        "vertexTypes": vertex_types,
        "programs": programs,
        "controlPrograms": draw(st.lists(st.sampled_from(prog_ids), max_size=2)),
        "steps": draw(st.lists(st.sampled_from(prog_ids), min_size=n_steps, max_size=n_steps)),
        "variables": variables,
        "livenessClasses": classes,
        "debugContexts": contexts,
    }
    if draw(st.booleans()):
        doc["source"] = {"tool": "hypothesis", "framework": "synthetic"}
    if draw(st.booleans()):
        doc["target"]["arch"] = "ipu2"
    if draw(st.booleans()):
        tm: Doc = {}
        optional(tm, "alwaysLive", draw(tilevectors(tiles)))
        optional(tm, "notAlwaysLivePeak", draw(tilevectors(tiles)))
        tm["categories"] = {name: draw(tilevectors(tiles, may_be_absent=False))
                            for name in draw(st.lists(st.sampled_from(["vertexCode", "controlCode"]), unique=True))}
        doc["tileMemory"] = tm
    return doc


def encode(doc: Any, ascii_only: bool = True) -> bytes:
    return json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8")


# -- checking a loaded profile against its document ---------------------------------


def covered(intervals: list[list[int]]) -> set[int]:
    return {s for start, end in intervals for s in range(start, end)}


def assert_matches(doc: Doc, p: Profile) -> None:
    tiles = doc["target"]["tilesPerIpu"]
    assert p.tiles == tiles

    vts = doc["vertexTypes"]
    assert p.vertex_types.names == tuple(v["name"] for v in vts)
    assert p.vertex_types.size.tolist() == [v["size"] for v in vts]
    for i, v in enumerate(vts):
        assert p.vertex_types.code.dense(i, tiles).tolist() == expand(v.get("codeBytes"), tiles)

    progs = doc["programs"]
    pr = p.programs
    ids = pr.ids.tolist()
    assert ids == [q["id"] for q in progs]
    assert pr.type.tolist() == [TYPE_CODE[q["type"]] for q in progs]
    assert pr.names == tuple(q.get("name", "") for q in progs)
    ctx_ids = p.contexts.ids.tolist()
    var_ids = p.variables.ids.tolist()
    verts = pr.vertices
    assert verts.key is not None  # the vertex table is keyed by vertex type
    for i, q in enumerate(progs):
        assert [ids[c] for c in pr.children(i).tolist()] == q.get("children", [])
        ctx = pr.context[i]
        assert (ctx_ids[ctx] if ctx >= 0 else None) == q.get("debugContext")
        assert pr.control.dense(i, tiles).tolist() == expand(q.get("controlCode"), tiles)
        assert pr.exchange.dense(i, tiles).tolist() == expand(q.get("exchangeCode"), tiles)
        assert pr.cycles.dense(i, tiles).tolist() == expand(q.get("cycles"), tiles)
        assert pr.repeat_count[i] == q.get("repeatCount", 1)
        runs = verts.runs_of([i])
        for vt, tv in q.get("vertices", []):
            assert verts.sum_runs(runs[verts.key[runs] == vt], tiles).tolist() == expand(tv, tiles)
        listed = {vt for vt, _ in q.get("vertices", [])}
        assert set(verts.key[runs].tolist()) <= listed
        mine = pr.var_idx[pr.var_ptr[i]:pr.var_ptr[i + 1]].tolist()
        assert [var_ids[v] for v in mine] == q.get("vars", [])
    assert pr.has_cycles == any("cycles" in q for q in progs)
    assert [ids[c] for c in p.control_programs.tolist()] == doc["controlPrograms"]
    assert [ids[s] for s in p.steps.tolist()] == doc["steps"]

    v = doc["variables"]
    assert var_ids == v["id"]
    assert p.variables.bytes.tolist() == v["bytes"]
    assert p.variables.tile.tolist() == v["tile"]
    assert p.variables.klass.tolist() == v["class"]
    # An empty or absent name reads back as the placeholder var#<id>.
    names = v.get("name") or [""] * len(var_ids)
    assert [p.variables.name(k) for k in range(len(var_ids))] == [n or f"var#{i}" for n, i in zip(names, var_ids)]

    # Intervals come back merged: sorted, non-empty, disjoint, covering the same steps.
    classes = doc["livenessClasses"]
    assert p.num_classes == len(classes)
    for c, intervals in enumerate(classes):
        a, b = p.class_ptr[c], p.class_ptr[c + 1]
        starts, ends = p.iv_start[a:b].tolist(), p.iv_end[a:b].tolist()
        assert all(s < e for s, e in zip(starts, ends))
        assert all(e < s2 for e, s2 in zip(ends, starts[1:]))
        assert covered([[s, e] for s, e in zip(starts, ends)]) == covered(intervals)
        n = len(doc["steps"])
        assert p.always_live_classes()[c] == (n > 0 and covered(intervals) == set(range(n)))

    cx = doc["debugContexts"]
    assert ctx_ids == [c["id"] for c in cx]
    parents = p.contexts.parent.tolist()
    assert [ctx_ids[j] if j >= 0 else None for j in parents] == [c["parent"] for c in cx]
    assert p.contexts.layer == tuple(c["layer"] for c in cx)
    assert p.contexts.name == tuple(c["name"] for c in cx)

    tm = doc.get("tileMemory")
    if tm is None:
        assert p.tile_memory is None
    else:
        assert p.tile_memory is not None
        expected = {k: expand(tm[k], tiles) for k in ("alwaysLive", "notAlwaysLivePeak") if k in tm}
        expected |= {f"category.{k}": expand(vec, tiles) for k, vec in tm["categories"].items()}
        assert {k: a.tolist() for k, a in p.tile_memory.items()} == expected


@pytest.mark.parametrize("count", examples(20, 120))
def test_random_valid_documents_load_exactly(count: int) -> None:
    @settings(SETTINGS, max_examples=count)
    @given(doc=documents(), ascii_only=st.booleans(), packed=st.booleans())
    def run(doc: Doc, ascii_only: bool, packed: bool) -> None:
        # The loader refuses a model whose byte or cycle sums reach 2**60 (int64 with room to add): a document
        # the bound below keeps under that must load; the others are the checked-arithmetic tests' business.
        assume(_sum_bound(doc) < 2**60)
        raw = encode(doc, ascii_only)
        path = "random.json"
        if packed:
            raw, path = gzip.compress(raw, mtime=0), "random.json.gz"
        profile = parse_profile_bytes(raw, path)
        assert profile.path == path
        assert (profile.programs.count, profile.variables.count, profile.contexts.count, profile.num_steps) == (
            len(doc["programs"]), len(doc["variables"]["id"]), len(doc["debugContexts"]), len(doc["steps"]))
        assert_matches(doc, profile)
        assert list(VALIDATOR.iter_errors(doc)) == []

    run()


def _tile_sum(vector: Any) -> int:
    """A TileVector's sum over tiles, in any of its encodings (a run counts once per tile it covers)."""
    if vector is None:
        return 0
    if isinstance(vector, list):
        return sum(int(v) for v in vector)
    if "runs" in vector:
        return sum((int(stop) - int(first)) * int(v) for first, stop, v in vector["runs"])
    return sum(int(v) for _, v in vector["sparse"])


def _sum_bound(doc: Doc) -> int:
    """An upper bound of the model's byte and cycle sums, from the document alone (as the loader adds them)."""
    sizes = [int(t.get("size", 0)) for t in doc.get("vertexTypes", [])]
    total = sum(_tile_sum(t.get("codeBytes")) for t in doc.get("vertexTypes", []))
    total += sum(int(b) for b in doc.get("variables", {}).get("bytes", []))
    for program in doc.get("programs", []):
        total += sum(_tile_sum(program.get(key)) for key in ("controlCode", "exchangeCode", "cycles"))
        total += sum(_tile_sum(vector) * sizes[vt] for vt, vector in program.get("vertices", []))
    return total


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents())
@pytest.mark.slow  # a long case (about 2.5 s)
def test_fallback_json_parser_gives_the_same_arrays(doc: Doc) -> None:
    assume(_sum_bound(doc) < 2**60)  # as above: past that the loader refuses the sums
    with mock.patch.dict(sys.modules, {"orjson": None}):  # `import orjson` fails inside the loader
        profile = parse_profile_bytes(encode(doc, ascii_only=False), "fallback.json")
    assert_matches(doc, profile)


# -- the mutation catalogue ---------------------------------------------------------


@dataclass
class Broken:
    """A mutated input: its bytes, its file name, and what we know of the error."""

    raw: bytes
    path: str = "mutant.json"
    doc: Doc | None = None  # the mutated document when it is still JSON
    structural: bool = False  # the schema alone must reject it too
    where: str | None = None  # the exact place the loader must name, when known
    problem: str | None = None  # a prefix of the problem, when known


Site = tuple[Any, Any, str]  # (container, key, place as the loader writes it)


def required_sites(doc: Doc) -> list[Site]:
    """Every required key of every object, as (object, key, the object's place)."""
    sites: list[Site] = [(doc, k, "") for k in ("format", "version", "target", "vertexTypes", "programs",
                                                   "controlPrograms", "steps", "variables", "livenessClasses",
                                                   "debugContexts")]
    sites += [(doc["target"], k, "target") for k in ("tilesPerIpu", "numTiles", "numIpus", "bytesPerTile",
                                                    "clockFrequency")]
    sites += [(doc["variables"], k, "variables") for k in ("id", "bytes", "tile", "class")]
    for i, v in enumerate(doc["vertexTypes"]):
        sites += [(v, k, f"vertexTypes[{i}]") for k in ("name", "size")]  # codeBytes may be absent (zeros)
    for i, q in enumerate(doc["programs"]):
        sites += [(q, k, f"programs[{i}]") for k in ("id", "type")]
    for i, c in enumerate(doc["debugContexts"]):
        sites += [(c, k, f"debugContexts[{i}]") for k in ("id", "parent", "layer", "name")]
    return sites


def leaf_sites(doc: Doc) -> dict[str, list[Site]]:
    """Typed places in the document, grouped by what they must hold.

    Free-form places (``source``, ``debugContexts[].data`` contents) are left
    out: any value is valid there.
    """
    s: dict[str, list[Site]] = {"int": [], "nullable_int": [], "str": [], "list": [], "object": [],
                                "number": [], "tilevector": []}
    s["str"] += [(doc, "format", "format")]
    s["int"] += [(doc, "version", "version")]
    t = doc["target"]
    s["object"].append((doc, "target", "target"))
    s["int"] += [(t, k, f"target.{k}") for k in ("tilesPerIpu", "numTiles", "numIpus", "bytesPerTile")]
    s["number"].append((t, "clockFrequency", "target.clockFrequency"))
    for key in ("vertexTypes", "programs", "controlPrograms", "steps", "livenessClasses", "debugContexts"):
        s["list"].append((doc, key, key))
    s["int"] += [(doc["controlPrograms"], k, f"controlPrograms[{k}]") for k in range(len(doc["controlPrograms"]))]
    s["int"] += [(doc["steps"], k, f"steps[{k}]") for k in range(len(doc["steps"]))]

    def tilevector(container: Any, key: Any, where: str) -> None:
        tv = container[key]
        if isinstance(tv, list):
            s["list"].append((container, key, where))
            s["int"] += [(tv, k, where) for k in range(len(tv))]
        else:
            s["tilevector"].append((container, key, where))
            (enc, rows), = tv.items()
            s["int"] += [(row, j, f"{where}.{enc}") for row in rows for j in range(len(row))]

    for i, v in enumerate(doc["vertexTypes"]):
        at = f"vertexTypes[{i}]"
        s["object"].append((doc["vertexTypes"], i, at))
        s["str"].append((v, "name", f"{at}.name"))
        s["int"].append((v, "size", f"{at}.size"))
        if "codeBytes" in v:
            tilevector(v, "codeBytes", f"{at}.codeBytes")
    for i, q in enumerate(doc["programs"]):
        at = f"programs[{i}]"
        s["object"].append((doc["programs"], i, at))
        s["int"].append((q, "id", f"{at}.id"))
        s["str"].append((q, "type", f"{at}.type"))
        if "name" in q:
            s["str"].append((q, "name", f"{at}.name"))
        if "debugContext" in q:
            s["nullable_int"].append((q, "debugContext", f"{at}.debugContext"))
        if "repeatCount" in q:
            s["int"].append((q, "repeatCount", f"{at}.repeatCount"))
        for key in ("children", "vars"):
            if key in q:
                s["list"].append((q, key, f"{at}.{key}"))
                s["int"] += [(q[key], k, f"{at}.{key}[{k}]") for k in range(len(q[key]))]
        for key in ("controlCode", "exchangeCode", "cycles"):
            if key in q:
                tilevector(q, key, f"{at}.{key}")
        if "vertices" in q:
            s["list"].append((q, "vertices", f"{at}.vertices"))
            for k, entry in enumerate(q["vertices"]):
                s["int"].append((entry, 0, f"{at}.vertices[{k}][0]"))
                tilevector(entry, 1, f"{at}.vertices[{k}][1]")
    v = doc["variables"]
    s["object"].append((doc, "variables", "variables"))
    for key in ("id", "bytes", "tile", "class", "name"):
        if key in v:
            s["list"].append((v, key, f"variables.{key}"))
            kind = "str" if key == "name" else "int"
            s[kind] += [(v[key], k, f"variables.{key}[{k}]") for k in range(len(v[key]))]
    for c, intervals in enumerate(doc["livenessClasses"]):
        s["list"].append((doc["livenessClasses"], c, f"livenessClasses[{c}]"))
        for k, pair in enumerate(intervals):
            s["int"] += [(pair, 0, f"livenessClasses[{c}][{k}]"), (pair, 1, f"livenessClasses[{c}][{k}]")]
    for i, c in enumerate(doc["debugContexts"]):
        at = f"debugContexts[{i}]"
        s["object"].append((doc["debugContexts"], i, at))
        s["int"].append((c, "id", f"{at}.id"))
        s["nullable_int"].append((c, "parent", f"{at}.parent"))
        s["str"] += [(c, "layer", f"{at}.layer"), (c, "name", f"{at}.name")]
        if "data" in c:
            s["object"].append((c, "data", f"{at}.data"))
    if "tileMemory" in doc:
        s["object"].append((doc, "tileMemory", "tileMemory"))
    return s


# Wrong values for each kind of place. The integral float 2.0 is wrong for the
# loader but JSON Schema's "integer" accepts it, so it is not "structural".
WRONG: dict[str, list[Any]] = {
    "int": ["7", True, 1.5, 2.0, None, [], {}],
    "nullable_int": ["7", True, 1.5, 2.0, [], {}],
    "str": [7, True, None, [], {}],
    "number": ["1e9", True, None, []],
    "list": [{}, "x", 5, True],
    "object": [[], "x", 5],
    "tilevector": ["x", 5, True, {}],
}


def pick(data: st.DataObject, items: list[Any]) -> Any:
    return data.draw(st.randoms(use_true_random=False)).choice(items)


def pick_grouped(data: st.DataObject, items: list[Any], group: Callable[[Any], str]) -> Any:
    """Pick a kind of place first, then one place of that kind.

    Hypothesis favours early choices, and a document has many more places of
    some kinds (TileVector entries) than others (target keys); grouping keeps
    every kind of place in play.
    """
    groups: dict[str, list[Any]] = {}
    for item in items:
        groups.setdefault(group(item), []).append(item)
    return pick(data, groups[pick(data, sorted(groups))])


def kind_of_place(at: str) -> str:
    """``programs[3].children[1]`` -> ``programs.children``."""
    return re.sub(r"\[\d+\]", "", at)


def draw_site(data: st.DataObject, sites: list[Site]) -> Site:
    def group(site: Site) -> str:
        _, key, at = site
        return f"{kind_of_place(at)}.{key if isinstance(key, str) else ''}"

    chosen: Site = pick_grouped(data, sites, group)
    return chosen


def remove_required(doc: Doc, data: st.DataObject) -> Broken:
    obj, key, at = draw_site(data, required_sites(doc))
    del obj[key]
    problem = f'missing required key "{key}"'
    return Broken(encode(doc), doc=doc, structural=True, where=at, problem=problem)


def wrong_type(doc: Doc, data: st.DataObject) -> Broken:
    sites = leaf_sites(doc)
    kind = data.draw(st.sampled_from(sorted(k for k, v in sites.items() if v)))
    obj, key, _ = draw_site(data, sites[kind])
    value = data.draw(st.sampled_from(WRONG[kind]))
    obj[key] = value
    structural = not (type(value) is float and value.is_integer())
    return Broken(encode(doc), doc=doc, structural=structural)


def fresh(used: list[int]) -> int:
    """The smallest non-negative integer not in ``used`` (a valid id that names nothing)."""
    return min(set(range(len(used) + 1)) - set(used))


def id_nowhere(doc: Doc, data: st.DataObject) -> Broken:
    progs, ctxs, v = doc["programs"], doc["debugContexts"], doc["variables"]
    prog_id, ctx_id, var_id = fresh([q["id"] for q in progs]), fresh([c["id"] for c in ctxs]), fresh(v["id"])
    n_types, n_classes = len(doc["vertexTypes"]), len(doc["livenessClasses"])
    choices: list[tuple[Any, Any, str, int, str]] = []  # container, key, place, new value, problem
    for i, q in enumerate(progs):
        # Any program may gain a debugContext that names no context.
        choices.append((q, "debugContext", f"programs[{i}].debugContext", ctx_id,
                        f"no debug context has id {ctx_id}"))
        for k in range(len(q.get("children", []))):
            choices.append((q["children"], k, f"programs[{i}].children[{k}]", prog_id, f"no program has id {prog_id}"))
        for k in range(len(q.get("vars", []))):
            choices.append((q["vars"], k, f"programs[{i}].vars[{k}]", var_id, f"no variable has id {var_id}"))
        for k, entry in enumerate(q.get("vertices", [])):
            choices.append((entry, 0, f"programs[{i}].vertices[{k}][0]", n_types,
                            f"no vertex type {n_types} (there are {n_types})"))
    for key in ("steps", "controlPrograms"):
        for k in range(len(doc[key])):
            choices.append((doc[key], k, f"{key}[{k}]", prog_id, f"no program has id {prog_id}"))
    for k in range(len(v["class"])):
        choices.append((v["class"], k, f"variables.class[{k}]", n_classes,
                        f"no such liveness class (there are {n_classes})"))
    for i, c in enumerate(ctxs):
        choices.append((c, "parent", f"debugContexts[{i}].parent", ctx_id, f"no debug context has id {ctx_id}"))
    obj, key, at, value, problem = pick_grouped(data, choices, lambda c: kind_of_place(c[2]))
    obj[key] = value
    return Broken(encode(doc), doc=doc, where=at, problem=problem)


def duplicate_id(doc: Doc, data: st.DataObject) -> Broken:
    options = ["programs"]
    if doc["debugContexts"]:
        options.append("debugContexts")
    if doc["variables"]["id"]:
        options.append("variables")
    section = data.draw(st.sampled_from(options))
    if section == "variables":
        v = doc["variables"]
        k = data.draw(st.integers(0, len(v["id"]) - 1))
        for col in v.values():
            col.append(col[k])
        return Broken(encode(doc), where=f"variables.id[{len(v['id']) - 1}]", problem="variable id ")
    items = doc[section]
    k = data.draw(st.integers(0, len(items) - 1))
    items.append(copy.deepcopy(items[k]))
    return Broken(encode(doc), where=f"{section}[{len(items) - 1}].id")


def negative_size(doc: Doc, data: st.DataObject) -> Broken:
    tiles = doc["target"]["tilesPerIpu"]
    options = ["tilevector"]
    if doc["vertexTypes"]:
        options.append("vertexSize")
    if doc["variables"]["bytes"]:
        options.append("variableBytes")
    what = pick(data, options)
    minus = -data.draw(st.integers(1, 10**6))
    if what == "vertexSize":
        i = data.draw(st.integers(0, len(doc["vertexTypes"]) - 1))
        doc["vertexTypes"][i]["size"] = minus
        return Broken(encode(doc), doc=doc, structural=True, where=f"vertexTypes[{i}].size")
    if what == "variableBytes":
        k = data.draw(st.integers(0, len(doc["variables"]["bytes"]) - 1))
        doc["variables"]["bytes"][k] = minus
        return Broken(encode(doc), doc=doc, structural=True, where=f"variables.bytes[{k}]", problem="negative size")
    i = data.draw(st.integers(0, len(doc["programs"]) - 1))
    key = data.draw(st.sampled_from(["controlCode", "exchangeCode", "cycles"]))
    values = expand(doc["programs"][i].get(key), tiles)
    values[data.draw(st.integers(0, tiles - 1))] = minus
    doc["programs"][i][key] = values
    return Broken(encode(doc), doc=doc, structural=True, where=f"programs[{i}].{key}", problem="negative value")


def interval_outside(doc: Doc, data: st.DataObject) -> Broken:
    n = len(doc["steps"])
    classes = doc["livenessClasses"]
    sites = [(c, k) for c in range(len(classes)) for k in range(len(classes[c]))]
    if not sites or data.draw(st.booleans()):
        classes.append([])
        sites = [(len(classes) - 1, 0)]
        classes[-1].append([0, 0])
    c, k = pick(data, sites)
    how = data.draw(st.sampled_from(["past-end", "negative", "reversed"]))
    if how == "past-end":
        classes[c][k] = [data.draw(st.integers(0, n)), n + data.draw(st.integers(1, 100))]
        problem = "interval "
    elif how == "negative":
        classes[c][k] = [-data.draw(st.integers(1, 100)), data.draw(st.integers(0, n))]
        problem = "interval "
    else:
        end = data.draw(st.integers(0, n))
        classes[c][k] = [end + data.draw(st.integers(1, 100)), end]
        problem = "interval "
    return Broken(encode(doc), where=f"livenessClasses[{c}][{k}]", problem=problem)


def make_cycle(doc: Doc, data: st.DataObject) -> Broken:
    if doc["debugContexts"] and data.draw(st.booleans()):
        ctxs = doc["debugContexts"]
        by_id = {c["id"]: c for c in ctxs}
        c = ctxs[data.draw(st.integers(0, len(ctxs) - 1))]

        def under(d: Doc) -> bool:  # d is c or one of its descendants
            while d is not None:
                if d is c:
                    return True
                d = by_id.get(d["parent"])  # type: ignore[assignment]
            return False

        below = [d for d in ctxs if under(d)]
        c["parent"] = below[data.draw(st.integers(0, len(below) - 1))]["id"]
        return Broken(encode(doc), problem="the parent links form a cycle")
    progs = doc["programs"]
    by_id = {q["id"]: q for q in progs}
    p = progs[data.draw(st.integers(0, len(progs) - 1))]
    below, todo = [], [p]
    while todo:  # p and every program reachable from it
        q = todo.pop()
        if all(q is not b for b in below):
            below.append(q)
            todo += [by_id[c] for c in q.get("children", [])]
    q = below[data.draw(st.integers(0, len(below) - 1))]
    children = q.setdefault("children", [])
    children.insert(data.draw(st.integers(0, len(children))), p["id"])
    return Broken(encode(doc), problem="program ")


def truncate_json(doc: Doc, data: st.DataObject) -> Broken:
    raw = encode(doc, data.draw(st.booleans()))
    # Cutting to nothing is the empty-file case; keep at least one byte.
    return Broken(raw[: pick(data, list(range(1, len(raw))))])


def corrupt_gzip(doc: Doc, data: st.DataObject) -> Broken:
    packed = bytearray(gzip.compress(encode(doc), mtime=0))
    how = data.draw(st.sampled_from(["truncate", "header", "trailer"]))
    if how == "truncate":
        return Broken(bytes(packed[: data.draw(st.integers(0, len(packed) - 1))]), "mutant.json.gz")
    # The magic and method bytes, the CRC32 and the length are always checked;
    # other header bytes (mtime, OS) and the deflate body are not safe to flip.
    k = data.draw(st.sampled_from([0, 1, 2]) if how == "header" else st.integers(len(packed) - 8, len(packed) - 1))
    packed[k] ^= data.draw(st.integers(1, 255))
    return Broken(bytes(packed), "mutant.json.gz", problem="corrupt gzip stream")


def is_id_or_reference(at: str) -> bool:
    """Places holding an id or naming one: any integer may be a valid id there."""
    return (at.endswith((".id", ".debugContext", ".parent")) or ".children[" in at or ".vars[" in at
            or at.startswith(("steps[", "controlPrograms[", "variables.id[")))


def huge_number(doc: Doc, data: st.DataObject) -> Broken:
    sites = leaf_sites(doc)
    capped = [s for s in sites["int"] if not is_id_or_reference(s[2])]
    if len(capped) > 0 and data.draw(st.booleans()):
        # Sizes, counts, tiles, classes, steps: 2**41 is beyond every limit there
        # (a 2 TiB variable, a 2**41-tile IPU, a class or step that cannot exist).
        obj, key, _ = draw_site(data, capped)
        obj[key] = data.draw(st.sampled_from([2**41, MAX_VALUE + 1]))
    else:
        # Beyond int64 is wrong at every integer place; orjson reads 10**30 as a float.
        obj, key, _ = draw_site(data, sites["int"] + sites["nullable_int"])
        obj[key] = data.draw(st.sampled_from([10**30, 2**63, 2**64 - 1, 2**80]))
    return Broken(encode(doc))


def non_utf8(doc: Doc, data: st.DataObject) -> Broken:
    raw = encode(doc)  # pure ASCII, so any of these bytes breaks UTF-8 or the JSON
    k = data.draw(st.integers(0, len(raw)))
    bad = data.draw(st.sampled_from([b"\xff", b"\xfe", b"\xc0", b"\x80", b"\xf5", b"\xe9"]))
    return Broken(raw[:k] + bad + raw[k:])


def wrong_format_or_version(doc: Doc, data: st.DataObject) -> Broken:
    if data.draw(st.booleans()):
        doc["version"] = data.draw(st.one_of(st.integers().filter(lambda n: n != 1), st.just(True), st.just(1.0)))
        return Broken(encode(doc), where="version", problem="unsupported version ")
    doc["format"] = data.draw(st.text(max_size=20).filter(lambda s: s != "popliner-profile"))
    return Broken(encode(doc), doc=doc, structural=True, where="format")


MUTATIONS: dict[str, Callable[[Doc, st.DataObject], Broken]] = {
    "remove_required": remove_required,
    "wrong_type": wrong_type,
    "id_nowhere": id_nowhere,
    "duplicate_id": duplicate_id,
    "negative_size": negative_size,
    "interval_outside": interval_outside,
    "cycle": make_cycle,
    "truncate_json": truncate_json,
    "corrupt_gzip": corrupt_gzip,
    "huge_number": huge_number,
    "non_utf8": non_utf8,
    "wrong_format_or_version": wrong_format_or_version,
}


def check_broken(broken: Broken) -> ProfileFormatError:
    # pytest.raises lets any other exception type through: that fails the property.
    with pytest.raises(ProfileFormatError) as info:
        parse_profile_bytes(broken.raw, broken.path)
    err = info.value
    assert err.path == broken.path
    assert str(err).startswith(broken.path)
    assert "\n" not in str(err) and err.problem
    if broken.where is not None:
        assert err.where == broken.where, str(err)
    if broken.problem is not None:
        assert err.problem.startswith(broken.problem), str(err)
    if broken.structural:
        assert broken.doc is not None
        assert not VALIDATOR.is_valid(broken.doc), f"schema accepted: {err!s}"
    return err


@pytest.mark.parametrize("count", examples(30, 200))
def test_any_single_mutation_raises_profile_format_error(count: int) -> None:
    @sized(count)
    @given(doc=documents(), kind=st.sampled_from(sorted(MUTATIONS)), data=st.data())
    def run(doc: Doc, kind: str, data: st.DataObject) -> None:
        check_broken(MUTATIONS[kind](doc, data))

    run()


@pytest.mark.parametrize("count", examples(8, 25))
@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_each_mutation_kind_on_its_own(kind: str, count: int) -> None:
    # Every kind gets examples of its own, whatever the mixed run above happened to draw.
    @sized(count)
    @given(doc=documents(), data=st.data())
    def run(doc: Doc, data: st.DataObject) -> None:
        check_broken(MUTATIONS[kind](doc, data))

    run()


def test_oracle_expand_on_hand_examples() -> None:
    # The oracle itself, on values worked out by hand.
    assert expand(None, 3) == [0, 0, 0]
    assert expand([1, 0, 2], 3) == [1, 0, 2]
    assert expand({"runs": [[2, 4, 5], [0, 1, 7]]}, 4) == [7, 0, 5, 5]
    assert expand({"sparse": [[3, 1], [0, 9]]}, 4) == [9, 0, 0, 1]
