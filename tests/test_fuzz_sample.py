"""A small sample of scripts/fuzz.py in every test run (the full run is 1,000 profiles + 300 configs)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fuzz.py"


def _fuzz_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("popliner_fuzz", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["popliner_fuzz"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_fuzz_sample_has_no_problem() -> None:
    fuzz = _fuzz_module()
    outcomes = fuzz.fuzz(n_profiles=70, n_configs=30, seed=20261124, timeout=20.0, jobs=1)
    assert len(outcomes) == 100
    kinds = {(o.target, o.kind) for o in outcomes}
    assert {k for _, k in kinds} == set(fuzz.PROFILE_KINDS)  # every kind of mutation ran
    problems = [o for o in outcomes if o.problem]
    assert problems == [], fuzz.summarise(outcomes)
    # Most mutations must be refused with a message, not silently accepted.
    assert sum(o.exit_code == 2 for o in outcomes) >= 60
