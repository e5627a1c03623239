"""Structural fuzz cases for scripts/fuzz.py (``--structural N``): built from the JSON Schema, not by mutation.

Mutation fuzzing changes one field of a valid document at a time; these
cases change its *shape*, as a hand-crafted input would:

==================  ==============================================================
empty_array         every array of the document emptied in turn
optional_absent     every key the schema does not require, removed everywhere
number_bounds       every number at its schema type's bounds and one past them
                    (and at the int64 and float limits)
one_tile            a one-tile target, the document's tile data folded onto it
                    (valid) or left as it was (invalid)
deep_nesting        thousands of nested objects or arrays in free-form data,
                    in a list the schema types, a long program-tree or
                    debug-context chain
huge_counts         huge counts with tiny content: repeat counts, tile counts,
                    many empty programs, contexts, variables or intervals
==================  ==============================================================

Pipeline configs get the same case types from their own document. Every
case must end in exit 0 or a one-line exit 2 (3 for solves, 1 for ``check``)
within the time bound.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "popliner" / "profile" / "profile-v1.schema.json").read_text(encoding="utf-8"))
STRUCTURAL_KINDS = ("empty_array", "optional_absent", "number_bounds", "one_tile", "deep_nesting", "huge_counts")
INT64 = 2**63 - 1


# -- the schema beside the document -------------------------------------------------------


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _branch(node: dict[str, Any], value: Any) -> dict[str, Any]:
    """The oneOf/anyOf branch that describes ``value`` (by its JSON type)."""
    node = _resolve(node)
    for key in ("oneOf", "anyOf"):
        if key in node:
            for option in node[key]:
                option = _resolve(option)
                kind = option.get("type")
                kinds = kind if isinstance(kind, list) else [kind]
                if (isinstance(value, dict) and "object" in kinds) or (isinstance(value, list) and "array" in kinds) \
                        or (value is None and "null" in kinds) or (isinstance(value, int) and "integer" in kinds):
                    if isinstance(value, dict) and option.get("required") and not set(option["required"]) <= set(value):
                        continue
                    return option
            return {}
    return node


def walk(doc: Any, node: dict[str, Any] | None = None,
         path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any, dict[str, Any]]]:
    """(path, value, schema node) of every value of ``doc``; long lists are sampled."""
    node = _branch(SCHEMA if node is None else node, doc)
    yield path, doc, node
    if isinstance(doc, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        for k, v in doc.items():
            sub = props.get(k, extra if isinstance(extra, dict) else {})
            yield from walk(v, sub, (*path, k))
    elif isinstance(doc, list):
        prefix = node.get("prefixItems")
        items = node.get("items", {})
        idx = range(len(doc)) if len(doc) <= 24 else sorted(random.Random(len(doc)).sample(range(len(doc)), 24))
        for i in idx:
            sub = prefix[i] if prefix and i < len(prefix) else (items if isinstance(items, dict) else {})
            yield from walk(doc[i], sub, (*path, i))


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


def _label(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path) or "(document)"


# -- profile cases -------------------------------------------------------------------------


def empty_arrays(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for path, value, _ in walk(doc):
        if isinstance(value, list) and value and path:
            out = copy.deepcopy(doc)
            _set(out, path, [])
            yield _label(path), out


def optional_absent(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each optional key removed from every object that has it (one case per schema object and key)."""
    found: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for path, value, node in walk(doc):
        if isinstance(value, dict):
            required = set(node.get("required", ()))
            for k in value:
                if k not in required and k in node.get("properties", {}):
                    where = _label(tuple("[]" if isinstance(p, int) else p for p in path))
                    found.setdefault((where, k), []).append((*path, k))
    for (where, key), paths in sorted(found.items()):
        out = copy.deepcopy(doc)
        for p in sorted(paths, key=len, reverse=True):
            parent = out
            for q in p[:-1]:
                parent = parent[q]
            parent.pop(p[-1], None)
        yield f"{where}.{key}", out


def _bounds(node: dict[str, Any], value: Any) -> list[Any]:
    """Values at and past the bounds of a number's schema, and the int64 and float limits."""
    out: list[Any] = []
    lo, hi = node.get("minimum"), node.get("maximum")
    if node.get("exclusiveMinimum") is not None:
        out += [node["exclusiveMinimum"], node["exclusiveMinimum"] + 1e-300]
    if lo is not None:
        out += [lo, lo - 1]
    if hi is not None:
        out += [hi, hi + 1]
    if isinstance(value, int):
        out += [INT64, INT64 + 1, -INT64 - 2, 0, -1]
    out += [1e308, -1e308, 5e-324]
    return list(dict.fromkeys(out))


def number_bounds(doc: dict[str, Any], rng: random.Random, limit: int) -> Iterator[tuple[str, Any]]:
    cases: list[tuple[tuple[Any, ...], Any]] = []
    for path, value, node in walk(doc):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and path:
            cases += [(path, b) for b in _bounds(node, value)]
    for path, b in rng.sample(cases, min(limit, len(cases))):
        out = copy.deepcopy(doc)
        _set(out, path, b)
        yield f"{_label(path)}={b!r}"[:120], out


def _fold_vector(tv: Any) -> Any:
    if isinstance(tv, list):
        return [sum(v for v in tv if isinstance(v, int))]
    if isinstance(tv, dict) and "runs" in tv:
        return {"runs": [[0, 1, max((r[2] for r in tv["runs"]), default=0)]]} if tv["runs"] else {"runs": []}
    if isinstance(tv, dict) and "sparse" in tv:
        return {"sparse": [[0, sum(s[1] for s in tv["sparse"])]]} if tv["sparse"] else {"sparse": []}
    return tv


def one_tile(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    out = copy.deepcopy(doc)
    out["target"]["tilesPerIpu"] = out["target"]["numTiles"] = 1
    yield "unfolded", copy.deepcopy(out)  # tile data for more tiles: refused
    for path, value, node in list(walk(out)):
        if node.get("oneOf") is not None or (isinstance(value, (list, dict)) and path and path[-1] in (
                "codeBytes", "controlCode", "exchangeCode", "cycles", "alwaysLive", "notAlwaysLivePeak")):
            _set(out, path, _fold_vector(value))
    for p in out["programs"]:
        for pair in p.get("vertices", []):
            pair[1] = _fold_vector(pair[1])
    cats = out.get("tileMemory", {}).get("categories", {})
    for k in cats:
        cats[k] = _fold_vector(cats[k])
    out["variables"]["tile"] = [0] * len(out["variables"]["tile"])
    yield "folded", out


def _nested(depth: int, kind: str) -> str:
    return ('{"x":' * depth + "{}" + "}" * depth) if kind == "object" else ("[" * depth + "]" * depth)


def deep_nesting(doc: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """Documents as text: Python's encoder cannot write these nestings."""
    for depth in (990, 5_000, 100_000):
        for kind in ("object", "array"):
            d = copy.deepcopy(doc)
            d["source"] = "@@"
            yield f"source {kind} x{depth}", json.dumps(d).replace('"@@"', _nested(depth, kind)).encode()
            d = copy.deepcopy(doc)
            d["debugContexts"][0]["data"] = {"opName": "deep", "x": "@@"}
            yield f"context data {kind} x{depth}", json.dumps(d).replace('"@@"', _nested(depth, kind)).encode()
    d = copy.deepcopy(doc)
    d["steps"] = "@@"
    yield "steps nested", json.dumps(d).replace('"@@"', _nested(20_000, "array")).encode()
    for depth in (10_000, 60_000):
        d = copy.deepcopy(doc)
        first = max(p["id"] for p in d["programs"]) + 1
        chain = [{"id": first + i, "type": "Sequence", "children": [first + i + 1]} for i in range(depth)]
        chain[-1]["children"] = []
        d["programs"] += chain
        d["programs"][0].setdefault("children", []).append(first)
        yield f"program chain x{depth}", json.dumps(d).encode()
        d = copy.deepcopy(doc)
        base = max(c["id"] for c in d["debugContexts"]) + 1
        d["debugContexts"] += [{"id": base + i, "parent": base + i - 1 if i else None, "layer": "popart",
                                "name": f"c{i}"} for i in range(depth)]
        d["programs"][1]["debugContext"] = base + depth - 1
        yield f"context chain x{depth}", json.dumps(d).encode()


def huge_counts(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    def variant(label: str, edit: Any) -> tuple[str, Any]:
        d = copy.deepcopy(doc)
        edit(d)
        return label, d

    leaf = next(p for p in doc["programs"] if p["type"] == "OnTileExecute")
    yield variant("repeatCount 2^40", lambda d: [p.update(type="Repeat", repeatCount=2**40)
                                                 for p in d["programs"] if p.get("children")][:1])
    yield variant("65536 tiles, sparse data", lambda d: d["target"].update(tilesPerIpu=65_536, numTiles=65_536))
    yield variant("numIpus 2^40", lambda d: d["target"].update(numIpus=2**40))
    yield variant("200k empty programs", lambda d: d["programs"].extend(
        {"id": 10**7 + i, "type": "Sync"} for i in range(200_000)))
    yield variant("200k steps of one program", lambda d: d.update(steps=[leaf["id"]] * 200_000))
    yield variant("100k contexts", lambda d: d["debugContexts"].extend(
        {"id": 10**7 + i, "parent": None, "layer": "popart", "name": ""} for i in range(100_000)))
    yield variant("100k vertex types", lambda d: d["vertexTypes"].extend(
        {"name": f"v{i}", "size": 0} for i in range(100_000)))

    def many_vars(d: dict[str, Any]) -> None:
        n = 200_000
        v = d["variables"]
        start = max(v["id"]) + 1
        v["id"] += list(range(start, start + n))
        v["bytes"] += [1] * n
        v["tile"] += [0] * n
        v["class"] += [0] * n
        if "name" in v:
            v["name"] += [""] * n
    yield variant("200k variables", many_vars)

    def many_intervals(d: dict[str, Any]) -> None:
        steps = len(d["steps"])
        d["livenessClasses"][0] = [[i % steps, i % steps + 1] for i in range(300_000)]
    yield variant("300k intervals in one class", many_intervals)

    def vars_everywhere(d: dict[str, Any]) -> None:
        ids = d["variables"]["id"]
        for p in d["programs"]:
            p["vars"] = ids * 2_000 if p is d["programs"][1] else p.get("vars", [])
    yield variant("one program lists every variable 2,000 times", vars_everywhere)


def profile_cases(base: dict[str, Any], base_name: str, n: int, rng: random.Random) -> list[tuple[str, str, bytes]]:
    """(kind, label, document bytes) for about ``n`` cases, every kind represented."""
    out: list[tuple[str, str, bytes]] = []

    def add(kind: str, items: Iterator[tuple[str, Any]]) -> None:
        for label, doc in items:
            data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
            out.append((kind, f"{base_name}: {label}", data))

    add("empty_array", empty_arrays(base))
    add("optional_absent", optional_absent(base))
    add("one_tile", one_tile(base))
    add("deep_nesting", deep_nesting(base))
    add("huge_counts", huge_counts(base))
    add("number_bounds", number_bounds(base, rng, max(n - len(out), 20)))
    return out


# -- config cases ------------------------------------------------------------------------------


def _config_walk(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _config_walk(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:24]):
            yield from _config_walk(v, (*path, i))


def config_cases(text: str, n: int, rng: random.Random) -> list[tuple[str, str, bytes]]:
    import yaml

    base = yaml.safe_load(text)
    out: list[tuple[str, str, bytes]] = []

    def dump(doc: Any) -> bytes:
        return yaml.safe_dump(doc, sort_keys=False).encode()

    nodes = list(_config_walk(base))
    for path, value in nodes:
        if isinstance(value, list) and value and path:
            d = copy.deepcopy(base)
            _set(d, path, [])
            out.append(("empty_array", _label(path), dump(d)))
        if isinstance(value, dict) and path:
            for k in value:
                d = copy.deepcopy(base)
                parent = d
                for q in path:
                    parent = parent[q]
                del parent[k]
                out.append(("optional_absent", _label((*path, k)), dump(d)))
    for k in list(base):
        d = copy.deepcopy(base)
        del d[k]
        out.append(("optional_absent", k, dump(d)))
    numbers = [(p, v) for p, v in nodes if isinstance(v, (int, float)) and not isinstance(v, bool) and p]
    bounds: list[Any] = [0, -1, 1, 2**31, INT64, INT64 + 1, -INT64 - 2, 10**30, 1e308, -1e308, 5e-324,
                         float("inf"), float("-inf"), float("nan")]
    picks = [(p, b) for p, _ in numbers for b in bounds]
    for path, b in rng.sample(picks, min(max(n - len(out) - 14, 20), len(picks))):  # 14 cases follow
        d = copy.deepcopy(base)
        _set(d, path, b)
        out.append(("number_bounds", f"{_label(path)}={b!r}", dump(d)))
    t = text
    out.append(("number_bounds", "int of 5,000 digits", t.replace("num_ipus: 2", "num_ipus: 1" + "0" * 5000)))
    one = copy.deepcopy(base)
    one["target"]["tiles_per_ipu"] = 1
    out.append(("one_tile", "tiles_per_ipu 1", dump(one)))
    for depth in (1_000, 50_000):
        out.append(("deep_nesting", f"flow list x{depth}", (t + "extra: " + "[" * depth + "]" * depth + "\n").encode()))
        out.append(("deep_nesting", f"flow map x{depth}", (t + "extra: " + "{a: " * depth + "1" + "}" * depth
                                                            + "\n").encode()))
    out.append(("deep_nesting", "block maps x3000", (t + "extra:\n" + "".join(" " * i + "a:\n" for i in range(3000))
                                                     ).encode()))
    for label, edit in (
        ("num_ipus 10^9", lambda d: d.update(num_ipus=10**9)),
        ("gradient_accumulation 2^62", lambda d: d.update(gradient_accumulation=2**62)),
        ("10k empty stages", lambda d: d.update(stages=[{} for _ in range(10_000)])),
        ("10k copies of stage 0", lambda d: d.update(stages=[copy.deepcopy(d["stages"][0]) for _ in range(10_000)])),
        ("100k layers in stage 0", lambda d: d["stages"][0].update(layers=[str(i) for i in range(100_000)])),
        ("pipeline_stages 10^6", lambda d: d.update(pipeline_stages=10**6)),
    ):
        d = copy.deepcopy(base)
        edit(d)
        out.append(("huge_counts", label, dump(d)))
    return [(k, label, data if isinstance(data, bytes) else data.encode()) for k, label, data in out]
