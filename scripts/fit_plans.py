"""Fit a calibrated preset's planner choices (popliner/synth/plans.py) to the real per-row figures.

    python scripts/fit_plans.py PRESET [--rounds N] [--rows ROW[:FIELD,...] ...] [--only-misses [--allowed ...]]
    python scripts/fit_plans.py PRESET --recipe    # plans.py's table, as it was fitted (RECIPES)

EfficientNet-EdgeTPU-L: each group of blocks of one shape (a stage's first
block, its other blocks) and the stem and head ("no layer") get one
:class:`~popliner.synth.choices.Plan`; other presets: each row named with
``--rows`` (e.g. "no layer"). Starting from no plan (every factor 1),
each round generates the preset, measures its rows as PopLiner did
(``scripts/calibration_presets.py``) and multiplies each factor by the
geometric mean, over the group's rows, of real / generated of the component
it drives: ``exchange`` by exchange code, ``vertices`` by vertex state,
``programs`` by control code, ``split`` by variables, ``code`` and
``spread`` by vertex code. Shared (cached) bodies couple the groups, hence
the rounds. Prints the fitted table for plans.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import tempfile
from pathlib import Path

from popliner.synth import plans
from popliner.synth.choices import Plan
from popliner.synth.effnet import STAGES
from popliner.synth.plans import plan_group

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("calibration_presets", _HERE / "calibration_presets.py")
assert _spec is not None and _spec.loader is not None
cal = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cal)

#: Plan field -> the component (index in the real figures' order) it is fitted to.
DRIVES = {"vertices": 0, "code": 1, "spread": 1, "exchange": 2, "programs": 3, "split": 4}
#: The fields fitted where a row does not name its own (vertex code only where asked: it is rarely off).
BY_DEFAULT = ["vertices", "exchange", "programs", "split"]


def groups(preset: str, rows: list[str], blocks: int = 27) -> dict[str, list[str]]:
    """Plan group -> the real rows it is fitted to (a layer number fits the real row named with it)."""
    if preset == "efficientnet-edgetpu-l":
        return _effnet_groups(blocks)
    names = list(cal.real_figures()[preset]["rows"])
    return {r: [r if r in names else next(n for n in names if re.search(rf"(^|\D){r}$", n))] for r in rows}


def _effnet_groups(blocks: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"no layer": ["no layer"]}
    edge = 0
    for s, stage in enumerate(STAGES):
        out[plan_group(s, True)] = [str(edge)]
        out[plan_group(s, False)] = [str(b) for b in range(edge + 1, edge + stage[0])]
        edge += stage[0]
    assert edge == blocks
    return {k: v for k, v in out.items() if v}


def fit(preset: str, rounds: int, rows: list[str], others: list[str] = BY_DEFAULT) -> dict[str, Plan]:
    """``rows``: plan groups, each optionally with the fields to fit (``1:exchange``), else BY_DEFAULT's.

    ``others``: the fields fitted on EfficientNet's groups that ``rows`` does not name.
    """
    real = cal.real_figures()[preset]["rows"]
    fields = {r.split(":")[0]: (r.split(":")[1].split(",") if ":" in r else BY_DEFAULT) for r in rows}
    table = {g: Plan() for g in groups(preset, list(fields))}
    rows_of = groups(preset, list(fields))
    for _ in range(rounds):
        plans._TABLES[preset] = table
        with tempfile.TemporaryDirectory() as tmp:
            got = cal.measure(preset, Path(tmp))["rows"]
        for g, fitted in rows_of.items():
            new = {}
            for name, k in DRIVES.items():
                if name not in fields.get(g, others):
                    new[name] = getattr(table[g], name)
                    continue
                ratios = [real[r][k] / got[r][k] for r in fitted if real[r][k] and got[r][k]]
                step = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0
                new[name] = min(16.0, max(1 / 16, getattr(table[g], name) * step))
            table[g] = Plan(**new)
    return table


def misses(preset: str, table: dict[str, Plan], rows_of: dict[str, list[str]]) -> set[tuple[str, str]]:
    """(group, field) pairs whose component is outside 25% on some row of the group, with ``table`` in force."""
    real = cal.real_figures()[preset]["rows"]
    plans._TABLES[preset] = table
    with tempfile.TemporaryDirectory() as tmp:
        got = cal.measure(preset, Path(tmp))["rows"]
    out = set()
    for g, fitted in rows_of.items():
        for name, k in DRIVES.items():
            if any(real[r][k] and abs(got[r][k] / real[r][k] - 1) > 0.25 for r in fitted):
                out.add((g, name))
    return out


def fit_misses(preset: str, rounds: int, rows: list[str], allowed: list[str]) -> dict[str, Plan]:
    """Fit only the (group, field) pairs that miss 25% without them, adding any that a fit pushes out, until none.

    ``allowed``: the fields that may be fitted (the vertex code through ``code`` or ``spread``, not both).
    """
    rows_of = groups(preset, rows)
    chosen: dict[str, set[str]] = {}
    table: dict[str, Plan] = {}
    for _ in range(4):
        new = {(g, f) for g, f in misses(preset, table, rows_of) if f in allowed and f not in chosen.get(g, set())}
        if not new:
            break
        for g, f in new:
            chosen.setdefault(g, set()).add(f)
        table = fit(preset, rounds, [f"{g}:{','.join(sorted(fs))}" for g, fs in chosen.items()], others=[])
    return table


#: How each preset's table in plans.py was fitted: (rows, fields allowed), all with ``--only-misses``.
RECIPES: dict[str, tuple[list[str], list[str]]] = {
    "efficientnet-edgetpu-l": (["no layer"], [*BY_DEFAULT, "code"]),
    "poptorch-bert-tiny": (["no layer", "0", "1", "2"], ["vertices", "exchange", "programs", "spread"]),
    "bert-large-sdk-old": (["no layer"], ["vertices", "exchange", "programs", "code"]),
}


def refit(preset: str, rounds: int = 5) -> dict[str, Plan]:
    """The preset's table as its recipe fits it (groups that need no plan left out)."""
    rows, allowed = RECIPES[preset]
    return {g: p for g, p in fit_misses(preset, rounds, rows, allowed).items() if p != Plan()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset")
    ap.add_argument("--recipe", action="store_true", help="fit as plans.py's table was (RECIPES)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", nargs="*", default=["no layer"],
                    help="plan groups of a transformer preset, each with the fields to fit: 'no layer:exchange'")
    ap.add_argument("--only-misses", action="store_true",
                    help="fit only the (group, component) pairs outside 25%% without a plan")
    ap.add_argument("--allowed", nargs="*", default=[*BY_DEFAULT, "code"], choices=list(DRIVES),
                    help="with --only-misses: the fields that may be fitted")
    args = ap.parse_args()
    if args.recipe:
        table = refit(args.preset, args.rounds)
    elif args.only_misses:
        table = fit_misses(args.preset, args.rounds, args.rows, args.allowed)
    else:
        table = fit(args.preset, args.rounds, args.rows)
    for g, p in table.items():
        fields = ", ".join(f"{name}={getattr(p, name):.3g}" for name in DRIVES if getattr(p, name) != 1.0)
        print(f'    "{g}": Plan({fields}),')


if __name__ == "__main__":
    main()
