"""Issue 12 point 5: every key the format lets a writer leave out may be left out.

The cases are generated from the JSON Schema (popliner/profile/profile-v1.schema.json),
not listed by hand: every property that is not ``required``, and every
property whose value is a TileVector (absent = all zeros, whatever ``required``
says), of every object the schema describes. For each case the test writes
two documents from the same base profile: one with the key removed from every
object that has it, one with the key set to what the spec says absence means
(:data:`ABSENT_MEANS`), and checks that popliner's figures are equal.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from popliner.analysis import analyse_profile
from popliner.breakdown import build_breakdown
from popliner.profile.loader import load_profile
from popliner.writers import tables
from tests.helpers import FIXTURES

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "popliner" / "profile" / "profile-v1.schema.json").read_text(encoding="utf-8"))
BASES = [FIXTURES / "tiny.json", FIXTURES / "bert-tiny-training.json"]
#: Every case on the small base (14 programs) in the main suite; on bert-tiny (1,463 programs, about 20 times
#: the time) in the slow step (suite time).
BASE_PARAMS = [b if i == 0 else pytest.param(b, marks=pytest.mark.slow) for i, b in enumerate(BASES)]
TILEVECTOR = "#/$defs/TileVector"

#: What the spec says an absent key means, as an explicit value. ``ZEROS`` is a
#: dense TileVector of zeros; ``KEEP`` means the key carries no figure (names,
#: metadata): absence is compared against the base document's own value.
ZEROS = object()
KEEP = object()
ABSENT_MEANS: dict[tuple[str, str], Any] = {
    ("", "source"): KEEP,
    ("", "tileMemory"): KEEP,
    ("Source", "tool"): KEEP,
    ("Source", "model"): KEEP,
    ("Source", "framework"): KEEP,
    ("Source", "sdkVersion"): KEEP,
    ("Source", "created"): KEEP,
    ("Target", "arch"): None,
    ("VertexType", "codeBytes"): ZEROS,
    ("Program", "name"): KEEP,
    ("Program", "children"): [],
    ("Program", "debugContext"): None,
    ("Program", "controlCode"): ZEROS,
    ("Program", "exchangeCode"): ZEROS,
    ("Program", "vertices"): [],
    ("Program", "vars"): [],
    ("Program", "cycles"): ZEROS,
    ("Program", "repeatCount"): 1,
    ("Variables", "name"): None,
    ("DebugContext", "data"): None,
    ("TileMemory", "alwaysLive"): ZEROS,
    ("TileMemory", "notAlwaysLivePeak"): ZEROS,
    ("TileMemory", "categories"): {},
}


def _ref_name(node: dict[str, Any]) -> str | None:
    ref = node.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) and ref.startswith("#/$defs/") else None


def omission_cases() -> list[tuple[str, str]]:
    """(object, key) for every optional or TileVector property in the schema."""
    cases = []
    objects = {"": SCHEMA, **SCHEMA["$defs"]}
    for name, node in objects.items():
        required = set(node.get("required", ()))
        for key, prop in node.get("properties", {}).items():
            if key not in required or prop.get("$ref") == TILEVECTOR:
                cases.append((name, key))
    return cases


def instances(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Every object of schema type ``name`` in ``doc`` (found through the schema's top-level properties)."""
    if name == "":
        return [doc]
    found: list[dict[str, Any]] = []
    for key, prop in SCHEMA["properties"].items():
        if key not in doc:
            continue
        if _ref_name(prop) == name and isinstance(doc[key], dict):
            found.append(doc[key])
        elif prop.get("type") == "array" and _ref_name(prop.get("items", {})) == name:
            found.extend(x for x in doc[key] if isinstance(x, dict))
        # one level deeper: Source/Target/... have no nested object types but TileMemory's parent
    return found


#: Deliberate difference from "absent TileVector = zeros": tileMemory holds the compiler's own
#: totals (ground truth for checking popliner's model). Absent, they are "not reported", and the
#: totals table leaves its ground-truth columns blank instead of comparing with zeros.
GROUND_TRUTH = {("", "tileMemory"), ("TileMemory", "alwaysLive"), ("TileMemory", "notAlwaysLivePeak"),
                ("TileMemory", "categories")}


def model_only(figs: dict[str, Any]) -> dict[str, Any]:
    """The figures without the totals table's ground-truth and difference columns."""
    rows = [line.split(",")[:2] for line in figs["write_totals"].splitlines()]
    return {**figs, "write_totals": rows}


def figures(path: Path) -> dict[str, Any]:
    """popliner's figures: the layer, operation and totals tables and each layer's per-tile memory."""
    profile = load_profile(path)
    analysis = analyse_profile(profile)
    breakdown = build_breakdown(analysis, with_operations=True, with_totals=True)
    out: dict[str, Any] = {}
    for table in ("write_layers", "write_operations", "write_totals"):
        stream = io.StringIO()
        getattr(tables, table)(breakdown, stream)
        out[table] = stream.getvalue()
    for name in analysis.layer_names:
        out[f"layer {name}"] = analysis.stage_memory([name]).per_tile.tolist()
    out["steps"] = profile.num_steps if hasattr(profile, "num_steps") else None
    return out


def _explicit(value: Any, tiles: int) -> Any:
    return [0] * tiles if value is ZEROS else copy.deepcopy(value)


def _write_pair(folder: Path, explicit: Any, omitted: Any) -> tuple[Path, Path]:
    """The two documents of an omission case as files: with the key written out, and without it."""
    a, b = folder / "explicit.json", folder / "omitted.json"
    a.write_text(json.dumps(explicit), encoding="utf-8")
    b.write_text(json.dumps(omitted), encoding="utf-8")
    return a, b


def test_every_schema_case_has_a_meaning() -> None:
    """A new optional key in the schema must say here what its absence means."""
    assert sorted(omission_cases()) == sorted(ABSENT_MEANS)


@pytest.mark.parametrize("base", BASE_PARAMS, ids=lambda p: p.stem)
@pytest.mark.parametrize("case", omission_cases(), ids=lambda c: f"{c[0] or 'top'}.{c[1]}")
def test_absent_key_means_what_the_spec_says(case: tuple[str, str], base: Path, tmp_path: Path) -> None:
    name, key = case
    doc = json.loads(base.read_text(encoding="utf-8"))
    tiles = doc["target"]["tilesPerIpu"]
    meaning = ABSENT_MEANS[case]
    targets = instances(doc, name)
    if not targets and name == "TileMemory":
        doc["tileMemory"] = {}
        targets = instances(doc, name)
    if not targets:
        pytest.skip(f"{base.name} has no {name} object")
    explicit = copy.deepcopy(doc)
    omitted = copy.deepcopy(doc)
    for obj in instances(explicit, name):
        if meaning is not KEEP:
            obj[key] = _explicit(meaning, tiles)
    for obj in instances(omitted, name):
        obj.pop(key, None)
    a, b = _write_pair(tmp_path, explicit, omitted)
    if case in GROUND_TRUTH:
        assert model_only(figures(b)) == model_only(figures(a))
    else:
        assert figures(b) == figures(a)


def _array_types() -> dict[str, str]:
    """Schema object type -> the top-level array that lists its instances (vertexTypes, programs ...)."""
    out = {}
    for key, prop in SCHEMA["properties"].items():
        item = _ref_name(prop.get("items", {})) if prop.get("type") == "array" else None
        if item and SCHEMA["$defs"][item].get("type") == "object":
            out[item] = key
    return out


def _fresh_id(items: list[dict[str, Any]]) -> int:
    return max((int(x["id"]) for x in items), default=-1) + 1


#: How to make an instance of a listed object type that nothing refers to: a vertex type no program
#: runs, a program that no step or parent reaches, a debug context no program names. The spec's
#: "absent means zeros" must hold for such instances too (the issue's independent writer leaves
#: codeBytes out exactly for the vertex types that no tile uses).
UNREFERENCED: dict[str, Any] = {
    "VertexType": lambda items: {**copy.deepcopy(items[0]), "name": "UnusedVertexType"},
    "Program": lambda items: {**{k: copy.deepcopy(v) for k, v in items[0].items() if k != "children"},
                              "id": _fresh_id(items)},
    "DebugContext": lambda items: {**copy.deepcopy(items[0]), "id": _fresh_id(items), "parent": None,
                                   "name": "unused"},
}


def unreferenced_cases() -> list[tuple[str, str]]:
    """The omission cases whose object is listed in an array (so an unreferenced instance can exist)."""
    return [case for case in omission_cases() if case[0] in _array_types()]


def test_every_listed_type_can_have_an_unreferenced_instance() -> None:
    assert sorted(UNREFERENCED) == sorted(_array_types())


@pytest.mark.parametrize("base", BASE_PARAMS, ids=lambda p: p.stem)
@pytest.mark.parametrize("case", unreferenced_cases(), ids=lambda c: f"{c[0]}.{c[1]}")
def test_absent_key_on_an_unreferenced_instance(case: tuple[str, str], base: Path, tmp_path: Path) -> None:
    """The key left out of only an instance nothing refers to; the others keep theirs."""
    name, key = case
    doc = json.loads(base.read_text(encoding="utf-8"))
    tiles = doc["target"]["tilesPerIpu"]
    items = doc[_array_types()[name]]
    if not items:
        pytest.skip(f"{base.name} lists no {name}")
    extra = UNREFERENCED[name](items)
    meaning = ABSENT_MEANS[case]
    explicit, omitted = copy.deepcopy(doc), copy.deepcopy(doc)
    with_key = {**extra, key: _explicit(meaning, tiles)} if meaning is not KEEP else dict(extra)
    explicit[_array_types()[name]].append(with_key)
    omitted[_array_types()[name]].append({k: v for k, v in extra.items() if k != key})
    a, b = _write_pair(tmp_path, explicit, omitted)
    assert figures(b) == figures(a)
    if name == "VertexType":  # a vertex type that no tile runs adds no memory at all
        assert figures(b) == figures(base)


def test_unused_vertex_type_without_code_bytes(tmp_path: Path) -> None:
    """The case from the issue: an independent writer leaves codeBytes out for types no tile uses."""
    doc = json.loads(BASES[0].read_text(encoding="utf-8"))
    doc["vertexTypes"].append({"name": "Unused", "size": 16})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with_zeros = copy.deepcopy(doc)
    with_zeros["vertexTypes"][-1]["codeBytes"] = {"sparse": []}
    other = tmp_path / "q.json"
    other.write_text(json.dumps(with_zeros), encoding="utf-8")
    assert figures(path) == figures(other) == figures(BASES[0])
