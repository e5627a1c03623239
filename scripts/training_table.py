"""Issue 10's closing figures, from real runs on generated profiles (markdown tables on stdout).

Three parts, each a few minutes on a busy 2-core machine (full-size
profiles, generated once into ``--work`` and reused):

- ``fits``: one row per model and training options: the fewest IPUs (up to
  16) on which the model fits at the full tile, and the ILP's split over
  the model's usual pipeline depth (4 IPUs; 8 for SQuAD-384) with the
  worst tile of each IPU;
- ``whatif``: popliner's what-if (``--recompute every-layer``, and
  separately ``--optimizer-state off-chip``, applied to a profile generated
  without them) against its plain figure on the profile generated with the
  option, per stage's worst tile, over splits of equal layer counts on 2,
  4 and 8 IPUs (bert-base and bert-large training);
- ``calibration``: the bert-large preset (inference, sequence 128) against
  the real BERT-Large SQuAD figures of Graphcore's PopLiner test suite.

    python scripts/training_table.py fits|whatif|calibration [--work DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

#: (title, preset, generator overrides) of the training models of the ``fits`` table.
MODELS = (
    ("bert-base, seq 128, micro-batch 8", "bert-base", {}, 4),
    ("bert-large, seq 128, micro-batch 16", "bert-large", {}, 4),
    ("bert-large SQuAD, seq 384, micro-batch 2", "bert-large", {"seq": 384, "batch": 2}, 8),
    ("gpt2-small, seq 1024, micro-batch 1", "gpt2-small", {}, 4),
)
#: (label, training options) of the ``fits`` table, as engineers add them.
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("none", {}),
    ("every-layer", {"recompute": "every-layer"}),
    ("every-layer + off-chip", {"recompute": "every-layer", "optimizer_state": "off-chip"}),
    ("every-layer + off-chip + head last", {"recompute": "every-layer", "optimizer_state": "off-chip",
                                            "head_placement": "last"}),
    ("every-layer + off-chip + head wrap", {"recompute": "every-layer", "optimizer_state": "off-chip",
                                            "head_placement": "wrap"}),
)
MAX_IPUS = 16


def profile(work: Path, preset: str, mode: str = "training", **fields: Any) -> Path:
    """The generated profile of ``preset`` with ``fields`` (made once, then reused)."""
    from popliner.synth import preset_spec, write_profile

    tag = "-".join(f"{k}{v}" for k, v in sorted(fields.items()))
    path = work / f"{preset}-{mode}{'-' + tag if tag else ''}.json.gz"
    if not path.is_file():
        t0 = time.perf_counter()
        write_profile(preset_spec(preset, mode, **fields), path, force=True)
        print(f"generated {path.name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def analysed(path: Path, mode: str = "training", **training: Any) -> Any:
    from popliner.analysis import AnalysisOptions, load_analysis
    from popliner.memory.training import TrainingOptions

    options = AnalysisOptions(mode=mode, training=TrainingOptions(**training))  # type: ignore[arg-type]
    return load_analysis(str(path), options, cache_dir=str(path.parent / "cache"))


def picture(stages: Any) -> str:
    """``emb..5 | 6..11 | ...``: each IPU's first and last layer (``+head`` for a wrapped head)."""
    parts = []
    for s in stages:
        layers = [name for name in s.layers if not (name == "head" and s.ipu == 0 and len(stages) > 1)]
        wrapped = len(layers) < len(s.layers)
        span = layers[0] if len(layers) == 1 else f"{layers[0]}..{layers[-1]}"
        parts.append(span.replace("embedding", "emb") + (" +head" if wrapped else ""))
    return " \\| ".join(parts)


def fits(work: Path) -> None:
    """Per model and options: the fewest IPUs that fit, and the ILP's split at the model's usual depth."""
    from popliner.analysis import solve_split
    from popliner.solvers.problem import SplitProblem
    from popliner.solvers.solve import minimum_ipus

    print("| model | options | fewest IPUs that fit | IPUs | fits | split | worst tile per IPU (bytes) |")
    print("|---|---|---|---|---|---|---|")
    for title, preset, fields, depth in MODELS:
        path = profile(work, preset, **fields)
        for label, training in OPTIONS:
            t0 = time.perf_counter()
            analysis = analysed(path, **training)
            budget = analysis.profile.target.bytes_per_tile
            need = minimum_ipus(analysis.range_table(budget), SplitProblem(MAX_IPUS, budget, training=True))
            split = solve_split(analysis, SplitProblem(depth, budget, exact_ipus=True, training=True),
                                solver="ilp", time_limit=30.0)
            worst = ", ".join(f"{s.worst_tile_bytes:,}" for s in split.stages)
            print(f"| {title} | {label} | {need if need is not None else f'none up to {MAX_IPUS}'} | "
                  f"{len(split.stages)} | {'yes' if split.fits else 'no'} | {picture(split.stages)} | {worst} |",
                  flush=True)
            print(f"  {title} / {label}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def even_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """``k`` contiguous ranges of ``n`` layers whose sizes differ by at most one (larger first)."""
    out, start = [], 0
    for i in range(k):
        size = n // k + (1 if i < n % k else 0)
        out.append((start, start + size - 1))
        start += size
    return out


def whatif(work: Path) -> None:
    from popliner.pipeline import range_figure

    print("| preset | option | IPUs | what-if worst tile per stage | compiled-with | error per stage | largest |")
    print("|---|---|---|---|---|---|---|")
    for preset in ("bert-base", "bert-large"):
        plain = profile(work, preset)
        for option, gen, training in (("--recompute every-layer", {"recompute": "every-layer"},
                                       {"recompute": "every-layer"}),
                                      ("--optimizer-state off-chip", {"optimizer_state": "off-chip"},
                                       {"optimizer_state": "off-chip"})):
            what = analysed(plain, **training).facts
            compiled = analysed(profile(work, preset, **gen)).facts
            assert what.layer_names == compiled.layer_names
            for k in (2, 4, 8):
                bounds = even_bounds(what.num_layers, k)
                a = [range_figure(what, i, j, p, k).worst_bytes for p, (i, j) in enumerate(bounds)]
                b = [range_figure(compiled, i, j, p, k).worst_bytes for p, (i, j) in enumerate(bounds)]
                err = [x / y - 1 for x, y in zip(a, b)]
                print(f"| {preset} | `{option}` | {k} | {', '.join(f'{x:,}' for x in a)} | "
                      f"{', '.join(f'{y:,}' for y in b)} | {', '.join(f'{e:+.1%}' for e in err)} | "
                      f"{max(err, key=abs):+.1%} |")


#: Per encoder layer of Graphcore's real BERT-Large SQuAD inference profile (sequence 128), summed over tiles.
REAL_LAYER = {"variables": 76.8e6, "vertex code": 7.88e6, "vertex state": 1.05e6, "exchange code": (1.0e6, 1.3e6),
              "control code": 1.35e6}
REAL_LAYER_0 = 147e6
REAL_UNLAYERED = 8e6
REAL_SPLIT = (336_670, 291_170)


def _error(got: float, real: float | tuple[float, float]) -> str:
    if isinstance(real, tuple):
        lo, hi = real
        return "within" if lo <= got <= hi else f"{got / (lo if got < lo else hi) - 1:+.0%} (outside)"
    return f"{got / real - 1:+.0%}"


def calibration(work: Path) -> None:
    import numpy as np

    from popliner.analysis import solve_split
    from popliner.memory.stages import stage_memory, stage_ops
    from popliner.solvers.problem import SplitProblem

    analysis = analysed(profile(work, "bert-large", "inference"), mode="inference")
    engine = analysis.facts
    names = ("variables", "vertex code", "vertex state", "exchange code", "control code")
    middle = np.array([stage_memory(engine, stage_ops(engine, [k], False)).per_tile.sum(axis=1)
                       for k in range(1, engine.num_layers - 1)]).mean(axis=0)
    layer0 = int(stage_memory(engine, stage_ops(engine, [0], False)).per_tile.sum())
    # As PopLiner's spreadsheet lists them: one row per operation, summed over the operations without
    # a layer (the previous calibration's convention); the figure of their union is shown beside it.
    ops = stage_ops(engine, [], True)
    unlayered = sum(int(stage_memory(engine, np.array([op])).per_tile.sum()) for op in ops.tolist())
    union = int(stage_memory(engine, ops).per_tile.sum())
    print("| component | real profile | generated | error |")
    print("|---|---|---|---|")
    for name, got in zip(names, middle):
        real = REAL_LAYER[name]
        shown = f"{real[0] / 1e6:.1f}-{real[1] / 1e6:.1f} MB" if isinstance(real, tuple) else f"{real / 1e6:.2f} MB"
        print(f"| {name} per layer | {shown} | {got / 1e6:.2f} MB | {_error(got, real)} |")
    print(f"| layer 0 (with the embedding) | about 147 MB | {layer0 / 1e6:.1f} MB | {_error(layer0, REAL_LAYER_0)} |")
    print(f"| operations without a layer ({len(ops)}, sum of each one's figure) | about 8 MB | "
          f"{unlayered / 1e6:.1f} MB | {_error(unlayered, REAL_UNLAYERED)} |")
    print(f"| same, as one set (code shared between them counted once) | - | {union / 1e6:.1f} MB | |")
    split = solve_split(analysis, SplitProblem(2, 350_000, exact_ipus=True), solver="ilp", time_limit=30.0)
    print(f"| 2 IPUs at 350,000 B/tile: split | [unlayered..11 \\| 12..23] | {picture(split.stages)} | |")
    for s, real in zip(split.stages, REAL_SPLIT):
        print(f"| same, worst tile of IPU {s.ipu} | {real:,} | {s.worst_tile_bytes:,} | "
              f"{s.worst_tile_bytes / real - 1:+.1%} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=("fits", "whatif", "calibration"))
    ap.add_argument("--work", default="training-table", help="where the profiles go (default %(default)s/)")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    {"fits": fits, "whatif": whatif, "calibration": calibration}[args.part](work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
