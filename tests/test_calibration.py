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

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "calibration_presets.py"
_spec = importlib.util.spec_from_file_location("calibration_presets", SCRIPT)
assert _spec is not None and _spec.loader is not None
cal = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cal)

_BLOCKS_0_10 = [str(b) for b in range(11)]
#: (row, component) pairs outside 25%, per preset.
MISSES: dict[str, dict[str, list[str]]] = {
    # Real blocks count exchange programs they share with other blocks (they sum to 117 MB against 43 MB for
    # the whole model); the generator's programs belong to one operation each, so its exchange is set by the
    # whole model. Block variables follow a ResNet-like spread of activations, not the real one.
    "efficientnet-edgetpu-l": {
        "vertex_state": ["no layer", "19", "20", "21", "22", "23", "25", "26"],
        "vertex_code": ["no layer"],
        "exchange_code": ["no layer", *_BLOCKS_0_10, "12", "13", "14", "15", "16", "17", "18", "19", "20", "21",
                          "22", "23", "25"],
        "control_code": ["no layer", "3", "4", "5", "19", "20", "21", "22", "23", "25"],
        "variables": ["0", "1", "2", "5", "6", "7", "8", "9", "10", "11", "18", "19", "20", "21", "22", "23", "24",
                      "25", "26"],
    },
    # The real layers' exchange code differs 2.1x between layers 0 and 1 while the generator's layers are
    # alike; PopTorch's 1,025 operations put far more without a layer than the generator's 367.
    "poptorch-bert-tiny": {
        "vertex_state": ["no layer"],
        "vertex_code": ["no layer"],
        "exchange_code": ["no layer", "bert.encoder.layer.0", "bert.encoder.layer.1"],
        "control_code": ["no layer"],
    },
    "bert-large-sdk-old": {"vertex_state": ["no layer"]},
}
#: The one-IPU worst tile (five components) against the real one: the bound each preset meets.
WORST_TILE_BOUND = {"efficientnet-edgetpu-l": 0.15, "poptorch-bert-tiny": 0.25}  # tiny BERT: -21%, target 15%


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
