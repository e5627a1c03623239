#!/usr/bin/env python
"""Solve speed on training profiles unlike the presets (issue 24 point 3).

    python scripts/bench_robust.py [--repeat 3] [--ipus 16] [--work DIR] [--out DIR] [--only NAME,...]

Each profile below is a 1x-sized training profile (about BERT-Large's size)
that differs from the bundled presets in one or more of: sequence length,
micro-batch, hidden size, seed, granularity (how finely tensors are mapped
onto tiles), tiles per IPU and bytes per tile, optimizer, model family and
naming (PopART, PopTorch or TensorFlow operation names). Each is generated
once into ``--work`` (reused while its spec does not change) and loaded once
to fill the cache. Then every measurement is the whole command in a fresh
process,

    popliner P --solve --num-ipus 16 --solver greedy|ilp --recompute every-layer --optimizer-state off-chip -q

timed from outside: wall seconds, CPU seconds (user + system of the child,
from ``os.wait4``) and peak resident memory. The medians of ``--repeat``
runs go to ``OUT/robust.md`` (a markdown table) and every run to
``OUT/robust.csv``. Progress goes to stderr.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: name -> (synth preset, overrides). All training; the names say what differs from the preset.
PROFILES: dict[str, tuple[str, dict[str, Any]]] = {
    "bl-seq384-mb2": ("bert-large", {"seq": 384, "batch": 2}),
    "bl-seq128-mb8-seed3": ("bert-large", {"seq": 128, "batch": 8, "seed": 3}),
    "bl-seq512-mb1-sgd": ("bert-large", {"seq": 512, "batch": 1, "optimizer": "sgd"}),
    "enc-h768-l24-seq256-mb4": ("bert-large", {"hidden": 768, "seq": 256, "batch": 4, "seed": 1}),
    "enc-h1280-l20-seq128-mb4": ("bert-large", {"hidden": 1280, "layers": 20, "seq": 128, "batch": 4, "seed": 2}),
    "bl-poptorch-seq384-mb2": ("bert-large", {"seq": 384, "batch": 2, "naming": "poptorch",
                                              "framework": "poptorch", "seed": 4}),
    "bl-tensorflow-seq256-mb2": ("bert-large", {"seq": 256, "batch": 2, "naming": "tensorflow",
                                                "framework": "tensorflow", "seed": 5}),
    "bl-granularity1.4-seq128-mb16": ("bert-large", {"scale": 1.4, "seed": 6}),
    "bl-1216tiles-seq128-mb4": ("bert-large", {"tiles": 1216, "bytes_per_tile": 638976 * 2 // 3, "batch": 4,
                                               "seed": 7}),
    "gpt-h1024-l24-seq512-mb1": ("gpt2-small", {"hidden": 1024, "layers": 24, "seq": 512, "seed": 8}),
}
FLAGS = ("--recompute", "every-layer", "--optimizer-state", "off-chip")
SOLVERS = ("greedy", "ilp")


def log(msg: str) -> None:
    print(f"bench_robust: {msg}", file=sys.stderr, flush=True)


def make(name: str, work: Path) -> dict[str, Any]:
    """Generate (or reuse) one profile; returns its metadata."""
    from popliner.synth import preset_spec, write_profile

    preset, overrides = PROFILES[name]
    spec = preset_spec(preset, "training", **overrides)
    path = work / f"{name}.json.gz"
    meta_path = work / f"{name}.meta.json"
    if path.is_file() and meta_path.is_file():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if meta.get("spec") == repr(spec):
            return meta
    log(f"generating {path.name}")
    s = write_profile(spec, path, force=True)
    meta = {"spec": repr(spec), "path": str(path), "variables": s.variables, "steps": s.steps,
            "layers": s.layers, "operations": s.operations, "bytes": s.bytes_written}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, int]:
    """One fresh process: (wall s, CPU s, peak MiB, exit code)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ipus", type=int, default=16)
    ap.add_argument("--work", default="bench-out/robust-work")
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--only", default=None, help="comma-separated profile names (default: all)")
    ap.add_argument("--popliner", default=None, help="the popliner command (default: this Python's -m popliner)")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(PROFILES)
    unknown = [n for n in names if n not in PROFILES]
    if unknown:
        ap.error(f"unknown profile(s) {', '.join(unknown)}; choose from {', '.join(PROFILES)}")
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    base = args.popliner.split() if args.popliner else [sys.executable, "-m", "popliner"]
    env = dict(os.environ, POPLINER_CACHE_DIR=str((work / "cache").resolve()))
    rows, runs = [], []
    for name in names:
        meta = make(name, work)
        path = str(work / f"{name}.json.gz")
        run([*base, path, "-q"], env)  # fill the cache: every measurement below is a cached load
        row: dict[str, Any] = {"profile": name, **{k: meta[k] for k in ("layers", "variables", "steps")}}
        for solver in SOLVERS:
            cmd = [*base, path, "--solve", "--num-ipus", str(args.ipus), "--solver", solver, *FLAGS, "-q"]
            got = [run(cmd, env) for _ in range(args.repeat)]
            runs += [(name, solver, *g) for g in got]
            row[solver] = {"wall": statistics.median(g[0] for g in got), "cpu": statistics.median(g[1] for g in got),
                           "peak": statistics.median(g[2] for g in got), "exit": sorted({g[3] for g in got})}
            log(f"{name} {solver}: wall {row[solver]['wall']:.2f} s, CPU {row[solver]['cpu']:.2f} s, "
                f"exit {row[solver]['exit']}")
        rows.append(row)
    write(out, rows, runs, args)
    return 0


def write(out: Path, rows: list[dict[str, Any]], runs: list[tuple[Any, ...]], args: Any) -> None:
    with open(out / "robust.csv", "w") as fh:
        fh.write("profile,solver,wall_s,cpu_s,peak_mib,exit\n")
        for r in runs:
            fh.write(f"{r[0]},{r[1]},{r[2]:.3f},{r[3]:.3f},{r[4]:.0f},{r[5]}\n")
    lines = [f"Whole command, cached profile, {args.ipus} IPUs, `{' '.join(FLAGS)}`; medians of {args.repeat} fresh "
             f"processes; load average at the end {os.getloadavg()[0]:.1f}.", "",
             "| profile | layers | variables | steps | greedy wall s | greedy CPU s | ILP wall s | ILP CPU s "
             "| peak MiB (ILP) | exit (greedy / ILP) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        g, i = row["greedy"], row["ilp"]
        lines.append(f"| {row['profile']} | {row['layers']} | {row['variables']:,} | {row['steps']:,} | "
                     f"{g['wall']:.2f} | {g['cpu']:.2f} | {i['wall']:.2f} | {i['cpu']:.2f} | {i['peak']:,.0f} | "
                     f"{'/'.join(map(str, g['exit']))} / {'/'.join(map(str, i['exit']))} |")
    (out / "robust.md").write_text("\n".join(lines) + "\n")
    log(f"results in {out}/robust.md and robust.csv")


if __name__ == "__main__":
    sys.exit(main())
