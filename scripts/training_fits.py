"""Benchmark for issue 10, point 5: BERT-Large trains on the IPU counts engineers use.

Generates two synthetic BERT-Large training profiles (Adam) and solves them
with every-layer recomputation and off-chip optimizer state:

- SQuAD, sequence 384, micro-batch 2: must fit on 8 IPUs;
- pretraining-sized, sequence 128 (the preset's micro-batch): must fit on 4.

Each takes a few minutes on a busy 2-core machine, so this is a script, not
a test. Exit 0 when both fit, 1 otherwise; one line per case on stdout.

    python scripts/training_fits.py [--work DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CASES = (
    ("bert-large SQuAD seq 384, micro-batch 2", {"seq": 384, "batch": 2}, 8),
    ("bert-large seq 128 (preset micro-batch)", {"seq": 128}, 4),
)


def main(argv: list[str] | None = None) -> int:
    from popliner.analysis import AnalysisOptions, load_analysis, solve_split
    from popliner.memory.training import TrainingOptions
    from popliner.solvers.problem import SplitProblem
    from popliner.synth import preset_spec, write_profile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="training-fits", help="where the profiles go (default %(default)s/)")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    options = AnalysisOptions(training=TrainingOptions(recompute="every-layer", optimizer_state="off-chip"))
    ok = True
    for k, (title, shape, ipus) in enumerate(CASES):
        path = work / f"case{k}.json.gz"
        if not path.is_file():
            write_profile(preset_spec("bert-large", "training", optimizer="adam", **shape), path, force=True)
        t0 = time.perf_counter()
        analysis = load_analysis(str(path), options)
        split = solve_split(analysis, SplitProblem(ipus, analysis.profile.target.bytes_per_tile, training=True),
                            solver="greedy")
        worst = [s.worst_tile_bytes for s in split.stages]
        print(f"{title}: {'fits' if split.fits else 'does NOT fit'} on {len(split.stages)} of {ipus} IPUs, "
              f"worst tile per IPU {worst}, {time.perf_counter() - t0:.0f} s")
        ok &= split.fits
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
