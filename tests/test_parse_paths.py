"""Issue 26: every layout of the same document gives the same profile, or the same one-line error.

Layouts: compact (the column reader's shortcut), spaced (``json.dumps``'s
default), indented with newlines, every object's keys in reverse order, and
each of those gzip-compressed. Documents: every bundled fixture, every
schema-omission case of tests/test_spec_omissions.py, and a sample of the
mutation fuzz's cases. Compared: a digest of every array of the Profile and
the operations and layers derived from it, or the error's one line.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import hashlib
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from popliner.analysis import analyse_profile
from popliner.errors import PoplinerError
from popliner.profile.loader import parse_profile_bytes
from popliner.profile.model import NameTable
from tests.helpers import FIXTURES

REPO = Path(__file__).resolve().parent.parent
PROFILES = sorted(p for p in FIXTURES.iterdir() if p.name.endswith((".json", ".json.gz")))


def _reversed_keys(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _reversed_keys(doc[k]) for k in reversed(list(doc))}
    if isinstance(doc, list):
        return [_reversed_keys(x) for x in doc]
    return doc


LAYOUTS: dict[str, Callable[[Any], bytes]] = {
    "compact": lambda d: json.dumps(d, separators=(",", ":")).encode(),
    "spaced": lambda d: json.dumps(d).encode(),
    "indented": lambda d: json.dumps(d, indent=2).encode(),
    "reordered": lambda d: json.dumps(_reversed_keys(d), separators=(",", ":")).encode(),
    "reordered-spaced": lambda d: json.dumps(_reversed_keys(d)).encode(),
}


def _digest(value: Any, h: Any) -> None:
    if isinstance(value, np.ndarray):
        h.update(f"{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, NameTable):
        # Stored packed by the column reader and plain by the ordinary path: the names themselves are compared.
        h.update(b"names")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if f.name not in ("path", "sha256"):
                h.update(f.name.encode())
                _digest(getattr(value, f.name), h)
    elif isinstance(value, (list, tuple)):
        h.update(b"[%d" % len(value))
        for x in value:
            _digest(x, h)
    elif isinstance(value, dict):
        h.update(b"{%d" % len(value))
        for k in sorted(value, key=str):
            h.update(str(k).encode())
            _digest(value[k], h)
    else:
        h.update(repr(value).encode())


def outcome(text: bytes, compress: bool) -> dict[str, str] | str:
    """Digests of the profile's arrays, its operations and layers; or the one-line error."""
    raw = gzip.compress(text, mtime=0) if compress else text
    try:
        profile = parse_profile_bytes(raw, "p.json")
    except PoplinerError as exc:
        return str(exc)
    out: dict[str, str] = {}
    for f in dataclasses.fields(profile):
        if f.name in ("path", "sha256"):
            continue
        h = hashlib.sha256()
        _digest(getattr(profile, f.name), h)
        out[f.name] = h.hexdigest()
    names = [profile.variables.name(i) for i in range(profile.variables.count)]
    out["variable names"] = hashlib.sha256("\0".join(names).encode()).hexdigest()
    try:
        analysis = analyse_profile(profile)
    except PoplinerError as exc:
        out["analysis"] = str(exc)
        return out
    h = hashlib.sha256()
    _digest(analysis.ops, h)
    out["operations"] = h.hexdigest()
    out["layers"] = repr(analysis.layer_names)
    return out


def assert_same_everywhere(doc: Any, label: str) -> None:
    results = {(name, gz): outcome(write(doc), gz) for name, write in LAYOUTS.items() for gz in (False, True)}
    first = results[("compact", False)]
    for key, got in results.items():
        assert got == first, f"{label}: {key} differs from compact plain"


# The three largest fixtures (15-20 s each) in the slow step; the others in the main suite (suite time).
_LARGE = {"bert-base-training.json.gz", "gpt2-small-inference.json.gz", "resnet-small-training.json.gz",
          "efficientnet-small-inference.json.gz"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.name in _LARGE else p
                                  for p in PROFILES], ids=lambda p: p.name)
def test_fixtures_every_layout(path: Path) -> None:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    assert_same_everywhere(doc, path.name)
    assert isinstance(outcome(LAYOUTS["compact"](doc), False), dict)


def _omissions() -> Any:
    spec = importlib.util.spec_from_file_location("spec_omissions", REPO / "tests" / "test_spec_omissions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OMISSIONS = _omissions()


# Every omission on the smallest base in the main suite; on the larger bases in the slow step (suite time).
@pytest.mark.parametrize("base", [b if i == 0 else pytest.param(b, marks=pytest.mark.slow)
                                  for i, b in enumerate(sorted(OMISSIONS.BASES, key=lambda b: b.stat().st_size))],
                         ids=lambda p: p.stem)
@pytest.mark.parametrize("case", OMISSIONS.omission_cases(), ids=lambda c: f"{c[0] or 'top'}.{c[1]}")
def test_omission_cases_every_layout(case: tuple[str, str], base: Path) -> None:
    name, key = case
    doc = json.loads(base.read_text(encoding="utf-8"))
    if not OMISSIONS.instances(doc, name) and name == "TileMemory":
        doc["tileMemory"] = {}
    for obj in OMISSIONS.instances(doc, name):
        obj.pop(key, None)
    assert_same_everywhere(doc, f"{base.name} without {name}.{key}")


def test_compact_profile_without_vars_loads_like_the_spaced_one() -> None:
    """The case of the issue: programs with no ``vars`` key, written compact (it ended in exit 70)."""
    doc = json.loads((FIXTURES / "tiny.json").read_text(encoding="utf-8"))
    for p in doc["programs"]:
        p.pop("vars", None)
    compact = outcome(LAYOUTS["compact"](doc), False)
    assert isinstance(compact, dict) and compact == outcome(LAYOUTS["spaced"](doc), False)


def _fuzz_module() -> Any:
    spec = importlib.util.spec_from_file_location("popliner_fuzz", REPO / "scripts" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["popliner_fuzz"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _fuzz_documents(count: int, seed: int) -> list[tuple[str, Any]]:
    """Mutated documents of the fuzz's structural kinds (the byte-level kinds have no layout to vary)."""
    fuzz = _fuzz_module()
    bases = [(json.loads(p.read_text(encoding="utf-8")), p.name) for p in fuzz.PROFILE_BASES]
    kinds = [k for k in fuzz.PROFILE_KINDS if k not in ("truncation", "encoding_error")]
    out = []
    for k in range(count):
        base, name = bases[k % len(bases)]
        case = fuzz._profile_case(copy.deepcopy(base), name, kinds[k % len(kinds)], seed + k)
        data = gzip.decompress(case.data) if case.data[:2] == b"\x1f\x8b" else case.data
        out.append((f"{case.kind} seed {case.seed}", json.loads(data)))
    return out


# All sixty documents in the slow step (suite time): five take about 6 s.
@pytest.mark.parametrize("start", [pytest.param(s, marks=pytest.mark.slow) for s in range(0, 60, 5)])
def test_fuzz_sample_every_layout(start: int) -> None:
    for label, doc in _fuzz_documents(60, 20261126)[start : start + 5]:
        assert_same_everywhere(doc, label)
