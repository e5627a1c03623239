#!/usr/bin/env python
"""Whole commands in fresh processes, alternated: A B A B ... (paired before/after on a machine whose speed drifts).

    python scripts/bench_pair.py [--repeat 3] 'COMMAND A' ['COMMAND B' ...]

Each command is run by the shell ``--repeat`` times, the commands taking
turns, stdout and stderr discarded. Per command it prints the medians of
the CPU seconds (user + system of the child and its children, from
``os.wait4``), the wall seconds and the peak resident memory, the CPU
seconds of every run, and the exit codes; then the load average. Put
``PYTHONPATH=DIR`` in front of a command to run popliner from another tree
(``git worktree add --detach DIR COMMIT`` gives the "before").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def run(command: str) -> tuple[float, float, float, int]:
    """(CPU s, wall s, peak MiB, exit code) of one fresh shell running ``command``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("commands", nargs="+")
    args = ap.parse_args(argv)
    got: dict[str, list[tuple[float, float, float, int]]] = {c: [] for c in args.commands}
    for _ in range(args.repeat):
        for c in args.commands:
            got[c].append(run(c))
    for c, runs in got.items():
        print(f"CPU {statistics.median(r[0] for r in runs):.3f} s [{' '.join(f'{r[0]:.2f}' for r in runs)}]  "
              f"wall {statistics.median(r[1] for r in runs):.3f} s  peak {statistics.median(r[2] for r in runs):,.0f} "
              f"MiB  exit {sorted({r[3] for r in runs})}  | {c}")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
