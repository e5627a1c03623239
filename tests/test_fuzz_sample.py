"""A small sample of scripts/fuzz.py in the test runs (the structural samples in the slow step; the full run is
1,000 profiles + 300 configs)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.helpers import FIXTURES

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fuzz.py"


def _fuzz_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("popliner_fuzz", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["popliner_fuzz"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# The main suite runs half the sample (main suite time); the slow step the whole one.
@pytest.mark.parametrize(("profiles", "configs"), [(35, 15), pytest.param(70, 30, marks=pytest.mark.slow)])
def test_fuzz_sample_has_no_problem(profiles: int, configs: int) -> None:
    fuzz = _fuzz_module()
    outcomes = fuzz.fuzz(n_profiles=profiles, n_configs=configs, seed=20261124, timeout=20.0, jobs=1)
    assert len(outcomes) == profiles + configs
    kinds = {(o.target, o.kind) for o in outcomes}
    assert {k for _, k in kinds} == set(fuzz.PROFILE_KINDS)  # every kind of mutation ran
    problems = [o for o in outcomes if o.problem]
    assert problems == [], fuzz.summarise(outcomes)
    # Most mutations must be refused with a message, not silently accepted: at least 60 %.
    assert sum(o.exit_code == 2 for o in outcomes) * 10 >= 6 * len(outcomes)


@pytest.mark.slow  # about 17 s: the fuzz sample runs in the slow step
def test_structural_sample_has_no_problem(tmp_path: Path) -> None:
    """A few cases of every structural kind (scripts/fuzz_schema.py); the full run is ``--structural 1000``."""
    import json
    import random

    fuzz = _fuzz_module()
    import fuzz_schema

    rng = random.Random(7)
    base = json.loads((FIXTURES / "tiny.json").read_text(encoding="utf-8"))
    by_kind: dict[str, list[tuple[str, str, bytes]]] = {}
    for case in fuzz_schema.profile_cases(base, "tiny.json", 40, rng):
        by_kind.setdefault(case[0], []).append(case)
    assert set(by_kind) == set(fuzz_schema.STRUCTURAL_KINDS)
    heavy = ("x60000", "x5000", "200k", "300k", "2,000 times", "100k contexts", "100k vertex")
    picked = []
    for kind in fuzz_schema.STRUCTURAL_KINDS:
        light = [c for c in by_kind[kind] if not any(h in c[1] for h in heavy)]
        picked += rng.sample(light, min(3, len(light)))
    picked += [c for c in by_kind["deep_nesting"] if c[1].endswith("source object x100000")]
    cases = [fuzz.Case("profile", kind, i, ["-q", "{file}", "--no-cache"], data, f"s{i}.json", (0, 2), label)
             for i, (kind, label, data) in enumerate(picked)]
    config_text, profile = fuzz._base_config(tmp_path)
    configs = fuzz_schema.config_cases(config_text, 30, rng)
    for i, (kind, label, data) in enumerate(rng.sample(configs, 10)):
        cases.append(fuzz.Case("config", kind, i, ["-q", "simulate", "{file}"], data, f"c{i}.yaml", (0, 2), label))
    outcomes = [fuzz.run_case((c, str(tmp_path), 20.0)) for c in cases]
    problems = [o for o in outcomes if o.problem]
    assert problems == [], fuzz.summarise(outcomes)


@pytest.mark.slow  # about 13 s
def test_workbook_structural_sample_has_no_problem(tmp_path: Path) -> None:
    """Two cases of every review-workbook kind (scripts/fuzz_workbook.py), through check and config-from -o."""
    import itertools
    import random

    fuzz = _fuzz_module()
    import fuzz_workbook

    base, profile = fuzz._base_workbook(tmp_path)
    rng = random.Random(11)
    light = {  # the first cases of each kind, past the heavy ones (200,000 rows, 100,000-deep nesting)
        "cell_missing": itertools.islice(fuzz_workbook.cell_missing(base), 2, 4),
        "wrong_type": fuzz_workbook.wrong_type(base, rng, 2),
        "number_bounds": itertools.islice(fuzz_workbook.number_bounds(base), 14, 16),
        "formulas": itertools.islice(fuzz_workbook.formulas(base), 5, 7),
        "huge_counts": itertools.islice(fuzz_workbook.huge_counts(base), 2, 4),
        "deep_nesting": itertools.islice(fuzz_workbook.deep_nesting(base), 0, 1),
        "xml_structure": itertools.islice(fuzz_workbook.xml_structure(base), 9, 11),
    }
    picked = [case for items in light.values() for case in items]
    assert {kind for kind, _, _ in picked} == set(fuzz_workbook.WORKBOOK_KINDS)
    cases = []
    for i, (kind, label, data) in enumerate(picked):
        if i % 2:
            cases.append(fuzz.Case("workbook", kind, i, ["-q", "check", "{file}", "--profile", profile], data,
                                   f"w{i}.xlsx", (0, 1, 2), label))
        else:
            cases.append(fuzz.Case("workbook", kind, i, ["-q", "config-from", "{file}", "--profile", profile, "-o",
                                                         "{out}"], data, f"w{i}.xlsx", (0, 2), label,
                                   output="pipeline.yaml"))
    outcomes = [fuzz.run_case((c, str(tmp_path), 30.0)) for c in cases]
    problems = [o for o in outcomes if o.problem]
    assert problems == [], fuzz.summarise(outcomes)
    assert sum(o.exit_code == 2 for o in outcomes) >= len(outcomes) // 3  # most shapes are refused, one line each
