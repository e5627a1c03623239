"""Every bundled fixture exported through the libpva double gives back the same tables and split (issue 34.4).

Each fixture is built into the double (in one of the shapes public code
leaves open, in turn), exported, and loaded again. The profile must be the
same section by section (target, programs, contexts, variables, liveness,
tile memory; keyed by ids), popliner's own tables must be the same
(operations with their steps, layers, per-tile memory of each layer and of
the whole model), and the greedy split over 4 IPUs must put the same layers
on the same IPUs with the same worst tile.

The framework's provenance differs, and only it: the fixtures' source says
``framework: synthetic``, which names none, so the original's framework is
detected from its debug contexts; the export writes ``source.framework``
from the same contexts with the same rule (``framework_of_layers``), so the
exported profile's framework comes from its source. The name is the same.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from popliner.analysis import analyse_profile, solve_split
from popliner.export import export_report
from popliner.framework import detect_framework
from popliner.profile.files import read_profile_bytes
from popliner.profile.gunzip import decompress
from popliner.profile.loader import load_profile
from popliner.profile.model import Profile
from popliner.solvers.problem import SplitProblem
from tests.paths import FIXTURES
from tests.pva_double import make_pva
from tests.test_export import assert_same_profile, canonical, memory_figures

NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.name.endswith((".json", ".json.gz")))
#: The two largest take 10-30 s each on a loaded machine: they run with the slow tests (CI runs those too).
SLOW = {"bert-base-training.json.gz", "gpt2-small-inference.json.gz", "resnet-small-training.json.gz"}
SHAPES: list[dict[str, Any]] = [
    {},
    {"program_contexts": False},
    {"layer_shape": "text", "sequence": "vector"},
    {"program_contexts": False, "sequence": "vector", "control_programs": True},
    {"program_vars": False, "layer_shape": "text"},
]


def operation_vars(profile: Profile) -> dict[str, list[int]]:
    ops = analyse_profile(profile).ops
    ids = profile.variables.ids
    return {f"{ops.names[k]}#{k}": sorted(int(ids[v]) for v in ops.vars_of(k)) for k in range(ops.count)}


def split_of(profile: Profile) -> list[tuple[tuple[str, ...], int, bool]]:
    analysis = analyse_profile(profile)
    problem = SplitProblem(num_ipus=4, budget=profile.target.bytes_per_tile, training=analysis.mode == "training")
    result = solve_split(analysis, problem, solver="greedy", time_limit=60)
    return [(tuple(s.layers), s.worst_tile_bytes, s.fits) for s in result.stages]


def test_every_fixture_is_covered() -> None:
    assert len(NAMES) == 8


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES])
def test_fixture_round_trips_through_the_double(name: str, tmp_path: Path) -> None:
    doc = json.loads(decompress(read_profile_bytes(FIXTURES / name), name))
    shape = SHAPES[NAMES.index(name) % len(SHAPES)]
    pop, cbor = tmp_path / "profile.pop", tmp_path / "debug.cbor"
    pop.write_bytes(b"")
    cbor.write_bytes(b"")
    out = tmp_path / "out.json.gz"
    t0 = time.perf_counter()
    export_report(pop, cbor, out, pva_module=make_pva(doc, **shape))
    seconds = time.perf_counter() - t0
    original, exported = load_profile(FIXTURES / name), load_profile(out)
    if shape.get("program_vars", True):
        assert_same_profile(original, exported)  # every section, and popliner's operation and layer tables
    else:
        # Variables come from the operations: each operation's set is whole, on its first program.
        a, b = canonical(original), canonical(exported)
        for key in a:
            if key != "programs":
                assert b[key] == a[key], key
        strip = [{k: v for k, v in p.items() if k != "vars"} for p in a["programs"].values()]
        assert strip == [{k: v for k, v in p.items() if k != "vars"} for p in b["programs"].values()]
        assert operation_vars(exported) == operation_vars(original)
        assert memory_figures(exported) == memory_figures(original)
    assert exported.target.arch == original.target.arch
    assert split_of(exported) == split_of(original)
    before, after = detect_framework(original), detect_framework(exported)
    assert (before.origin, after.origin) == ("contexts", "source")
    assert after.name == before.name
    print(f"{name}: exported in {seconds:.2f} s with {shape or 'the default shapes'}")
