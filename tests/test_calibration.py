"""The presets calibrated to real profiles, against the real figures (tests/data/real_profiles.json).

The real figures are public (Graphcore's PopLiner tests, quoted in issue
23); the generated ones come from popliner's model on the preset's profile
(``scripts/calibration_presets.py`` prints the same tables). For each preset:
every (row, component) is within 25% of the real figure except the misses
listed here, each of which really is outside (so the list cannot go stale),
and the one-IPU worst tile is near the real one with the same "fits on one
IPU" answer. docs/synthetic-profiles.md explains each miss.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "calibration_presets.py"
_spec = importlib.util.spec_from_file_location("calibration_presets", SCRIPT)
assert _spec is not None and _spec.loader is not None
cal = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cal)

#: (row, component) pairs outside 25%, per preset. The rows are measured as PopLiner measured the real ones
#: (scripts/calibration_presets.py: a Call's body counted in every caller, "no layer" one stage, PopTorch's
#: unnamed calls as PopLiner's Anonymous operations).
MISSES: dict[str, dict[str, list[str]]] = {
    # Every row is within 25% in every component, by the mechanisms and fitted planner choices of
    # docs/synthetic-profiles.md ("Which rows a mechanism reproduces, which a fitted input").
    "efficientnet-edgetpu-l": {},
    "poptorch-bert-tiny": {},
    "bert-large-sdk-old": {},
    # The bert-large preset against the newer SDK's profile it was calibrated to: the real layer 0 has 2.4 MB more
    # exchange code than a middle layer (the generator's: 0.2 MB); the real embeddings and head (no layer) have
    # more distinct vertex code and exchange than the generator's.
    "bert-large": {"vertex_code": ["no layer"], "exchange_code": ["no layer", "0"]},
}
#: The one-IPU worst tile (five components) against the real one: both within the 15% the issue asks.
WORST_TILE_BOUND = {"efficientnet-edgetpu-l": 0.15, "poptorch-bert-tiny": 0.15}


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    return dict(cal.real_figures())


@pytest.mark.parametrize("preset", list(MISSES))
def test_preset_against_the_real_profile(preset: str, real: dict[str, Any], tmp_path: Path) -> None:
    want = real[preset]
    got = cal.measure(preset, tmp_path)
    for row, figures in want["rows"].items():
        for comp, r, g in zip(cal.COMPONENTS, figures, got["rows"][row]):
            if r == 0:
                assert g == 0, (row, comp)  # no variables counted for operations without a layer
                continue
            listed = row in MISSES[preset].get(comp, [])
            inside = abs(g / r - 1) <= 0.25
            assert inside != listed, f"{preset} {row} {comp}: real {r:,}, generated {g:,} ({g / r - 1:+.0%})"
    if "one_ipu_worst_tile" in want:
        w = want["one_ipu_worst_tile"]
        assert abs(got["worst_five"] / w - 1) <= WORST_TILE_BOUND[preset], (got["worst_five"], w)
        # popliner's own one-IPU figure, the other categories included: within 15% for both.
        assert abs(got["worst"] / w - 1) <= 0.15, (got["worst"], w)
        # The same answer: the real model fits on one IPU, and so does the preset, other categories included.
        assert got["worst"] <= got["bytes_per_tile"]


def test_bert_large_preset_against_the_older_sdk(real: dict[str, Any], tmp_path: Path) -> None:
    """The bert-large preset (calibrated to the newer SDK's profile) checked against the older SDK's figures.

    Code, state and variables of a layer agree within 25%; exchange and control code do not, because the
    two compilers differ there by more than that (exchange 1.0-1.3 MB against 3.09 MB per layer, control
    1.35 MB against 1.04 MB): bert-large-sdk-old is the preset for the older SDK.
    """
    want = real["bert-large-sdk-old"]["rows"]["layer"]
    got = cal.measure("bert-large", tmp_path, layers=3)["rows"]["layer"]
    errors = dict(zip(cal.COMPONENTS, cal.errors(want, got)))
    assert all(abs(errors[c]) <= 0.25 for c in ("vertex_state", "vertex_code", "variables")), errors
    assert errors["exchange_code"] < -0.5 and errors["control_code"] > 0.25, errors


def test_poplinerlike_rows_count_a_called_body_in_every_caller(tmp_path: Path) -> None:
    """PopLiner's rule (libpva's): an outlined Call's row holds its body, which popliner gives to the body's own op."""
    from popliner.analysis import load_analysis
    from popliner.profile.model import TYPE_CODE
    from popliner.synth import preset_spec, write_profile

    path = tmp_path / "tiny.json"
    write_profile(preset_spec("bert-tiny", var_names=False), path)
    a = load_analysis(str(path), use_cache=False)
    totals = a.model.per_operation_totals()
    progs, ops = a.profile.programs, a.ops
    calls = [i for i in range(ops.count) if ops.names[i].startswith("Call(")]
    assert calls
    for i in calls:
        own = ops.programs_of(i)
        called = [p for p in own.tolist() if int(progs.type[p]) == TYPE_CODE["Call"]]
        bodies = {int(c) for p in called for c in progs.children(p).tolist()}
        owners = {int(ops.op_of_program[b]) for b in bodies} - {i}
        assert len(owners) == 1, (ops.names[i], owners)  # one body, made by another operation
        (body_op,) = owners
        row = cal.poplinerlike_row(a, np.array([i]), a.layers.layer_of_op >= 0)
        # Disjoint programs: the Call's own (copies, the Call programs) plus everything of its body's operation.
        assert row[0] == totals[i].vertex_state + totals[body_op].vertex_state
        assert row[2] == totals[i].exchange_code + totals[body_op].exchange_code
        assert totals[i].vertex_state < row[0]


@pytest.mark.slow  # a long case (about 3 s)
def test_the_shape_cache_makes_the_whole_model_agree(real: dict[str, Any], tmp_path: Path) -> None:
    """The planner choices are fitted to the blocks' rows only; the one-stage whole model is not fitted.

    A real block's row counts every cached convolution it calls, so the blocks' exchange code sums to 2.7 times
    the whole model's. With TensorFlow's shape cache the generated whole model (each cached body once) agrees with
    the real one within 20% in every component; with the same fitted choices and no cache it is far over.
    """
    want = real["efficientnet-edgetpu-l"]["one_ipu_components"]
    cached = cal.errors(want, cal.measure("efficientnet-edgetpu-l", tmp_path)["whole"])
    assert all(e is not None and abs(e) <= 0.2 for e in cached), cached
    plain = cal.errors(want, cal.measure("efficientnet-edgetpu-l", tmp_path, shape_cache=False)["whole"])
    assert plain[2] is not None and plain[2] > 1.0, plain  # exchange code: more than twice the real


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["efficientnet-edgetpu-l", "poptorch-bert-tiny", "bert-large-sdk-old"])
def test_the_fitted_choices_are_what_the_fit_gives(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """plans.py's values are scripts/fit_plans.py's, to the three digits written (the documented procedure)."""
    from popliner.synth import plans

    spec = importlib.util.spec_from_file_location("fit_plans", SCRIPT.parent / "fit_plans.py")
    assert spec is not None and spec.loader is not None
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    committed = dict(plans.PRESET_PLANS[preset])
    monkeypatch.setitem(plans._TABLES, preset, plans.PRESET_PLANS[preset])  # restored after the fit's rounds
    fitted = fit.refit(preset)
    assert set(fitted) == set(committed)
    for group, plan in fitted.items():
        for name in ("exchange", "vertices", "programs", "split", "code", "spread"):
            assert float(f"{getattr(plan, name):.3g}") == getattr(committed[group], name), (group, name)
