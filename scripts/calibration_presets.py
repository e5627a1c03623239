"""The presets calibrated to real profiles against the real figures: per layer or block, and on one IPU.

    python scripts/calibration_presets.py [PRESET ...] [--work DIR]

For each preset, generates its profile (inference, or training for
poptorch-bert-tiny, as the real one was), measures it with popliner's model
and prints a Markdown table: real, generated and error per row and
component, then the one-IPU figures. The real figures are in
``tests/data/real_profiles.json`` (public, from Graphcore's PopLiner tests).

The rows are measured as PopLiner measured the real ones (its
``layers_as_csv``): one stage per layer holding the layer's operations, and
one stage holding every operation without a layer ("no layer"), in
PopLiner's five components (the real figures have no other categories).
PopLiner took an operation's programs from libpva, which counts under an
operation every program its own programs reach in the program tree: a
``Call``'s body is counted in every operation that calls it (the real
profiles show it: PopART's ``Call(1254)`` has its body's 221,312 bytes of
vertex state, as does the body's own operation). popliner attributes each
program to one operation, so the rows here take each operation's programs
with everything below them (:func:`called_closure`); variables are
popliner's. ``tests/test_calibration.py`` holds the same comparisons.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from popliner.analysis import Analysis, load_analysis
from popliner.arrays import gather_csr, union_of
from popliner.memory.liveness import window_peak
from popliner.memory.types import COMPONENTS as MODEL_COMPONENTS
from popliner.ops.layers import DEFAULT_INPUTS_REGEX_LAYER_0
from popliner.synth import preset_spec, write_profile

REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_profiles.json"
#: Column order of the real figures.
COMPONENTS = ("vertex_state", "vertex_code", "exchange_code", "control_code", "variables")
TITLES = ("vertex state", "vertex code", "exchange", "control", "variables")
#: The real profile's mode, and the spec changes each comparison makes (fewer layers where a middle one is as good).
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "efficientnet-edgetpu-l": ("inference", {}),
    "poptorch-bert-tiny": ("training", {}),
    "bert-large-sdk-old": ("inference", {"layers": 3}),
    "bert-large": ("inference", {"layers": 3}),
}


def real_figures() -> dict[str, Any]:
    return dict(json.loads(REAL.read_text()))


def measure(preset: str, work: Path, **changes: Any) -> dict[str, Any]:
    """Per-layer five components (and 'layer': the middle layer), 'no layer', and the one-IPU figures."""
    mode, fixed = RUNS.get(preset, ("inference", {}))
    spec = preset_spec(preset, mode, var_names=False, **{**fixed, **changes})
    path = work / f"{preset}-{mode}.json.gz"
    write_profile(spec, path, force=True)
    a = load_analysis(str(path), use_cache=False)
    layer_of_op = poplinerlike_layers(a, calls_named_call=spec.naming != "poptorch")
    counted = layer_of_op >= 0
    rows = {name: poplinerlike_row(a, np.flatnonzero(layer_of_op == k), counted)
            for k, name in enumerate(a.layer_names)}
    names = list(rows)
    if len(names) >= 3:
        rows["layer"] = rows[names[len(names) // 2]]
    rows["no layer"] = poplinerlike_row(a, np.flatnonzero(~counted), counted)
    whole = a.whole_memory
    five = whole.per_tile[:5].sum(axis=0)
    # The whole model in the real figures' order (state, code, exchange, control, variables).
    sums = dict(zip(MODEL_COMPONENTS, (int(x) for x in whole.per_tile[:5].sum(axis=1))))
    return {"rows": rows, "worst_five": int(five.max()), "worst": whole.worst_bytes,
            "whole": [sums[c] for c in COMPONENTS],
            "total_five": int(five.sum()), "bytes_per_tile": a.profile.target.bytes_per_tile,
            "operations": a.ops.count}


def called_closure(a: Analysis, programs: np.ndarray) -> np.ndarray:
    """``programs`` and every program below them in the program tree (a Call's body included), sorted."""
    progs = a.profile.programs
    seen = np.zeros(progs.count, bool)
    frontier = np.unique(programs)
    while frontier.size:
        seen[frontier] = True
        kids = gather_csr(progs.child_ptr, progs.child_idx, frontier)
        frontier = np.unique(kids[~seen[kids]])
    return np.flatnonzero(seen)


def poplinerlike_layers(a: Analysis, calls_named_call: bool) -> np.ndarray:
    """Each operation's layer (an index into ``a.layer_names``, -1 for none) as PopLiner named the operations.

    popliner's layers (popliner/ops/layers.py) follow PopLiner's rules, with one
    difference that matters here: PopLiner gives the following operation's
    layer only to an operation *named* ``Call``. PopART names its call
    contexts ``Call``; PopTorch leaves them empty, and PopLiner lists those as
    ``Anonymous(<n>)`` (the real tiny BERT's ``Anonymous(420)``), which take
    a layer from their inputs, or the first layer when an input is the
    embedding (``inputs_regex_layer_0``), or none. popliner calls both kinds
    ``Call(<n>)``. The generator writes empty call names for every framework
    (so the committed fixtures keep their bytes); ``calls_named_call`` says
    which framework the profile stands for.
    """
    layer_of_op = a.layers.layer_of_op.copy()
    if calls_named_call or not a.layer_names:
        return layer_of_op
    layer0 = re.compile(DEFAULT_INPUTS_REGEX_LAYER_0)
    for op, note in enumerate(a.layers.note):
        if note == "call":  # no layer in its name or inputs: it had the following operation's
            layer_of_op[op] = 0 if layer0.search("/".join(a.ops.inputs[op])) else -1
    return layer_of_op


def poplinerlike_row(a: Analysis, ops: np.ndarray, counted: np.ndarray) -> list[int]:
    """One stage of ``ops`` as PopLiner measured it: five components summed over tiles, in COMPONENTS order.

    ``counted`` marks the operations whose variables count (PopLiner's: those with a layer).
    """
    if len(ops) == 0:
        return [0] * len(COMPONENTS)
    code, state, exchange, control = a.model.program_code(called_closure(a, a.ops.programs_of_set(ops)))
    ops = np.asarray(ops, np.int64)
    lo, hi = a.model.window(ops)
    # libpva's operation variables are those of its programs, a called body's included (as for code).
    progs = a.profile.programs
    reached = called_closure(a, a.ops.programs_of_set(ops[counted[ops]]))
    used = union_of(gather_csr(progs.var_ptr, progs.var_idx, reached), a.profile.variables.count)
    variables = window_peak(a.profile, used, lo, hi)
    return [int(x.sum()) for x in (state, code, exchange, control, variables)]


def errors(real: list[int], got: list[int]) -> list[float | None]:
    return [None if r == 0 else g / r - 1 for r, g in zip(real, got)]


def table(preset: str, got: dict[str, Any], real: dict[str, Any]) -> str:
    head = "| row | " + " | ".join(f"{t}: real / generated / error" for t in TITLES) + " |"
    lines = [f"### {preset}: {real['source']}", "", head, "|---" * (len(TITLES) + 1) + "|"]
    for row, want in real["rows"].items():
        have = got["rows"][row]
        cells = [f"{w:,} / {h:,} / " + ("-" if e is None else f"{e:+.0%}")
                 for w, h, e in zip(want, have, errors(want, have))]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    if "one_ipu_components" in real:
        cells = [f"{w:,} / {h:,} / {h / w - 1:+.0%}" for w, h in zip(real["one_ipu_components"], got["whole"])]
        lines.append("| one IPU (whole model) | " + " | ".join(cells) + " |")
    if "one_ipu_worst_tile" in real:
        w = real["one_ipu_worst_tile"]
        lines += ["", f"One IPU: worst tile, five components, real {w:,} / generated {got['worst_five']:,} "
                      f"({got['worst_five'] / w - 1:+.1%}); with the other categories {got['worst']:,}; "
                      f"fits in {got['bytes_per_tile']:,}: real yes, generated "
                      f"{'yes' if got['worst'] <= got['bytes_per_tile'] else 'NO'}."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="*", default=list(RUNS))
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    real = real_figures()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for preset in args.presets:
            print(table(preset, measure(preset, work), real[preset]), end="\n\n")


if __name__ == "__main__":
    main()
