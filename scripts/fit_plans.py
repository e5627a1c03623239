"""Fit EfficientNet-EdgeTPU-L's planner choices (popliner/synth/plans.py) to the real per-block figures.

    python scripts/fit_plans.py [--rounds N]

Each group of blocks of one shape (a stage's first block, its other blocks;
the stem and head for the operations without a layer) gets one
:class:`~popliner.synth.graph.Plan`. Starting from no plan (every factor 1),
each round generates the preset, measures its rows as PopLiner did
(``scripts/calibration_presets.py``) and multiplies each factor by the
geometric mean, over the group's rows, of real / generated of the component
it drives: ``exchange`` by exchange code, ``vertices`` by vertex state,
``programs`` by control code, ``split`` by variables. Shared (cached) bodies
couple the groups, hence the rounds. Prints the fitted table for plans.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import tempfile
from pathlib import Path

from popliner.synth import plans
from popliner.synth.effnet import STAGES, plan_group
from popliner.synth.graph import Plan

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("calibration_presets", _HERE / "calibration_presets.py")
assert _spec is not None and _spec.loader is not None
cal = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cal)

PRESET = "efficientnet-edgetpu-l"
#: Plan field -> the component (index in the real figures' order) it is fitted to.
DRIVES = {"vertices": 0, "exchange": 2, "programs": 3, "split": 4}


def groups(blocks: int = 27) -> dict[str, list[str]]:
    """Plan group -> the real rows it is fitted to."""
    out: dict[str, list[str]] = {"stem+head": ["no layer"]}
    edge = 0
    for s, stage in enumerate(STAGES):
        out[plan_group(s, True)] = [str(edge)]
        out[plan_group(s, False)] = [str(b) for b in range(edge + 1, edge + stage[0])]
        edge += stage[0]
    assert edge == blocks
    return {k: v for k, v in out.items() if v}


def fit(rounds: int) -> dict[str, Plan]:
    real = cal.real_figures()[PRESET]["rows"]
    table = {g: Plan() for g in groups()}
    for _ in range(rounds):
        plans._PLANS.clear()
        plans._PLANS.update(table)
        with tempfile.TemporaryDirectory() as tmp:
            got = cal.measure(PRESET, Path(tmp))["rows"]
        for g, rows in groups().items():
            new = {}
            for name, k in DRIVES.items():
                ratios = [real[r][k] / got[r][k] for r in rows if real[r][k] and got[r][k]]
                step = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0
                new[name] = min(16.0, max(1 / 16, getattr(table[g], name) * step))
            table[g] = Plan(**new)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    for g, p in fit(args.rounds).items():
        print(f'    "{g}": Plan(exchange={p.exchange:.3g}, vertices={p.vertices:.3g}, programs={p.programs:.3g}, '
              f'split={p.split:.3g}),')


if __name__ == "__main__":
    main()
