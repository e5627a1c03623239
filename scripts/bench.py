#!/usr/bin/env python
"""Benchmark popliner on synthetic BERT-large training profiles of several sizes.

    python scripts/bench.py [--sizes 0.25,0.5,1,2] [--repeat 3] [--out bench-out/] [--quick]

For each size the script generates a profile with ``popliner synth`` (kept in
``OUT/work/``, or ``--work``, and reused while its parameters do not change), then measures
each phase below ``--repeat`` times. Every run is a fresh Python process, so
no run inherits another's caches, imports or memory; its peak resident
memory is the child's ``ru_maxrss`` (from ``os.wait4``).

=================  ===========================================================
measurement        what the child times
=================  ===========================================================
cold_load          ``load_analysis(use_cache=True)`` on an emptied cache dir:
                   read, gunzip, parse, validate, derive operations, write cache
cached_load        ``load_analysis(use_cache=True)`` with the cache written
layer_breakdown    ``popliner P --layer-breakdown --format csv -o F.csv``
greedy_4/16        ``solve_split(..., solver="greedy")`` for 4 / 16 IPUs
ilp_4/16           ``solve_split(..., solver="ilp", time_limit=60)``
simulate           ``popliner simulate pipeline.yaml --profile P`` (the
                   pipeline is the ILP split for 16 IPUs, written once)
xlsx               ``popliner P -o review.xlsx`` (the review workbook)
=================  ===========================================================

The solver rows time the solve alone (after a cached load in the same
process); the CLI rows (layer_breakdown, simulate, xlsx) time the whole
command in-process, its cached load included. ``wall`` is the child's wall
time: interpreter start, imports and all. A solve that finds no split is
reported with its status (INFEASIBLE) and the time taken to find that out.

Results go to OUT: ``runs.csv`` (every run), ``summary.csv`` and
``summary.md`` (median, min and max per measurement and size), ``bench.png``
(median time against profile size, log-log, one line per measurement),
``profiles.json`` (what each size holds) and ``machine.json``. Progress goes
to stderr. ``--quick`` runs one tiny profile (bert-tiny training) once, for a
smoke test.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Scale of popliner synth that gives the "1x" profile: the brief asks for at
#: least 2 million lowered variables, about 30,000 steps and 20,000 programs;
#: at --scale 1 bert-large training (SGD, seq 128) has 17,654 programs and
#: 26,595 steps, at 1.15 it has 20,014 programs and 31,355 steps.
SCALE_1X = 1.15
MEASUREMENTS = ("cold_load", "cached_load", "layer_breakdown", "greedy_4", "greedy_16", "ilp_4", "ilp_16",
                "greedy_16_recompute", "ilp_16_recompute", "simulate", "xlsx")
#: ``*_recompute``: the training options engineers use (every-layer recomputation, off-chip optimizer state).
RECOMPUTE_OPTIONS = {"recompute": "every-layer", "optimizer_state": "off-chip"}
#: The pipeline config that ``simulate`` runs comes from this split.
SIM_IPUS = 16
CHILD_TIMEOUT = 3600.0


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# -- the child ------------------------------------------------------------------


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one measurement in this (fresh) process; return what was timed."""
    kind, profile = spec["measurement"], spec["profile"]
    out: dict[str, Any] = {"status": "OK"}
    if kind in ("cold_load", "cached_load"):
        from popliner.analysis import AnalysisOptions, load_analysis

        t0 = time.perf_counter()
        analysis = load_analysis(profile, AnalysisOptions(), use_cache=True)
        out["seconds"] = time.perf_counter() - t0
        out["from_cache"] = analysis.from_cache
        if analysis.from_cache != (kind == "cached_load"):
            out["status"] = "CACHE MISS" if kind == "cached_load" else "CACHE HIT"
        return out
    if kind.startswith(("greedy_", "ilp_")):
        from popliner.analysis import AnalysisOptions, load_analysis, solve_split
        from popliner.memory.training import TrainingOptions
        from popliner.solvers.problem import SplitProblem

        solver, ipus, *variant = kind.split("_")
        training = TrainingOptions(**RECOMPUTE_OPTIONS) if variant == ["recompute"] else TrainingOptions()  # type: ignore[arg-type]
        t0 = time.perf_counter()
        analysis = load_analysis(profile, AnalysisOptions(training=training), use_cache=True)
        out["load_seconds"] = time.perf_counter() - t0
        problem = SplitProblem(int(ipus), analysis.profile.target.bytes_per_tile,
                               training=analysis.mode == "training")
        t0 = time.perf_counter()
        split = solve_split(analysis, problem, solver=solver, time_limit=spec["time_limit"])  # type: ignore[arg-type]
        out["seconds"] = time.perf_counter() - t0
        out["status"] = split.status
        out["stages"] = len(split.stages)
        return out
    from popliner.cli import main

    args = {
        "layer_breakdown": [profile, "--layer-breakdown", "--format", "csv", "-o", spec["csv"], "--force", "-q"],
        "xlsx": [profile, "-o", spec["xlsx"], "--force", "-q"],
        "simulate": ["simulate", spec["pipeline"], "--profile", profile, "-q"],
        "config": [profile, "--solve", "--num-ipus", str(SIM_IPUS), "--config-out", spec["pipeline"], "--force",
                   "--time-limit", str(spec["time_limit"]), "-q"],
    }[kind]
    t0 = time.perf_counter()
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    out["seconds"] = time.perf_counter() - t0
    out["exit_code"] = code
    if code not in (0, 1) or (code == 1 and kind != "config"):
        out["status"] = f"EXIT {code}"
    elif code == 1:
        out["status"] = "INFEASIBLE"
    return out


# -- the parent -----------------------------------------------------------------


@dataclass
class Run:
    measurement: str
    size: float
    repeat: int
    status: str
    seconds: float | None
    wall: float
    peak_rss_mb: float
    extra: dict[str, Any] = field(default_factory=dict)


def run_child(spec: dict[str, Any], env: dict[str, str], log_path: Path) -> tuple[dict[str, Any], float, float]:
    """One measurement in a fresh interpreter: (its result, wall seconds, peak RSS in MB)."""
    with tempfile.NamedTemporaryFile("w+", suffix=".json", delete=False) as fh:
        result_path = fh.name
    spec = dict(spec, result=result_path)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    t0 = time.perf_counter()
    with open(log_path, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = t0 + CHILD_TIMEOUT
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    rss_mb = usage.ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
    try:
        result = json.loads(Path(result_path).read_text() or "{}")
    except (OSError, ValueError):
        result = {}
    finally:
        Path(result_path).unlink(missing_ok=True)
    if not result:
        result = {"status": f"CRASH (exit {proc.returncode}; see {log_path})"}
    return result, wall, rss_mb


def make_profile(preset: str, scale: float, path: Path) -> dict[str, Any]:
    """Generate (or reuse) the profile of one size; returns what it holds."""
    from popliner.synth import preset_spec, write_profile

    # batch 2: the micro-batch the measurements in docs/benchmarks.md were made with (the bert-large
    # preset's default became 16 when it was calibrated, which would change the profile's shape).
    spec = preset_spec(preset, "training", optimizer="sgd", seq=128, batch=2, scale=scale)
    meta_path = path.with_suffix(".meta.json")
    key = repr(spec)
    if path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("spec") == key:
            return meta
    log(f"generating {path.name} ({preset} training, sgd, seq 128, scale {scale:g})")
    summary = write_profile(spec, path, force=True)
    meta = {"spec": key, "scale": scale, "variables": summary.variables, "steps": summary.steps,
            "programs": summary.programs, "operations": summary.operations, "layers": summary.layers,
            "tiles": summary.tiles, "bytes": summary.bytes_written, "synth_seconds": round(summary.seconds, 2)}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"nproc": os.cpu_count(), "python": platform.python_version(),
                            "platform": platform.platform()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    for mod in ("numpy", "orjson", "ortools", "openpyxl", "matplotlib"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing optional module is just not listed
            info[mod] = None
    import popliner

    info["popliner"] = popliner.__version__
    return info


def summarise(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    keys = sorted({(r.measurement, r.size) for r in runs}, key=lambda k: (MEASUREMENTS.index(k[0]), k[1]))
    for m, size in keys:
        group = [r for r in runs if (r.measurement, r.size) == (m, size)]
        secs = [r.seconds for r in group if r.seconds is not None]
        walls = [r.wall for r in group]
        statuses = sorted({r.status for r in group})
        rows.append({
            "measurement": m, "size": size, "runs": len(group), "status": "/".join(statuses),
            "median_s": _round(statistics.median(secs)) if secs else None,
            "min_s": _round(min(secs)) if secs else None, "max_s": _round(max(secs)) if secs else None,
            "wall_median_s": _round(statistics.median(walls)),
            "peak_rss_mb_median": round(statistics.median(r.peak_rss_mb for r in group)),
            "peak_rss_mb_max": round(max(r.peak_rss_mb for r in group)),
        })
    return rows


def _round(x: float) -> float:
    return round(x, 3 if x < 10 else 2)


def write_outputs(out: Path, runs: list[Run], profiles: dict[float, dict[str, Any]], info: dict[str, Any],
                  sizes: list[float]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["measurement", "size", "repeat", "status", "seconds", "wall", "peak_rss_mb", "extra"])
        for r in runs:
            w.writerow([r.measurement, r.size, r.repeat, r.status,
                        "" if r.seconds is None else f"{r.seconds:.4f}", f"{r.wall:.4f}", f"{r.peak_rss_mb:.1f}",
                        json.dumps(r.extra, sort_keys=True)])
    rows = summarise(runs)
    with open(out / "summary.csv", "w", newline="") as fh:
        table = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["measurement"])
        table.writeheader()
        table.writerows(rows)
    (out / "profiles.json").write_text(json.dumps({str(k): v for k, v in profiles.items()}, indent=1))
    (out / "machine.json").write_text(json.dumps(info, indent=1))
    (out / "summary.md").write_text(markdown(rows, profiles, info, sizes))
    plot(out / "bench.png", rows, profiles, sizes)


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def markdown(rows: list[dict[str, Any]], profiles: dict[float, dict[str, Any]], info: dict[str, Any],
             sizes: list[float]) -> str:
    lines = ["# popliner benchmark", "",
             f"Machine: {info.get('nproc')} CPUs ({info.get('cpu', '?')}), {info.get('mem_gib', '?')} GiB; "
             f"Python {info['python']}, numpy {info.get('numpy')}, orjson {info.get('orjson')}, "
             f"ortools {info.get('ortools')}, popliner {info.get('popliner')}.", "",
             "## Profiles", "",
             "| size | synth scale | variables | steps | programs | operations | .json.gz MB | synth s |",
             "|---|---|---|---|---|---|---|---|"]
    for s in sizes:
        p = profiles[s]
        lines.append(f"| {s:g}x | {p['scale']:g} | {p['variables']:,} | {p['steps']:,} | {p['programs']:,} | "
                     f"{p['operations']:,} | {p['bytes'] / 1e6:.1f} | {p.get('synth_seconds', '-')} |")
    lines += ["", "## Median seconds by size", "",
              "| measurement | " + " | ".join(f"{s:g}x" for s in sizes)
              + (" | growth (last / previous) |" if len(sizes) > 1 else " |"),
              "|---|" + "---|" * len(sizes) + ("---|" if len(sizes) > 1 else "")]
    by = {(r["measurement"], r["size"]): r for r in rows}
    for m in MEASUREMENTS:
        if not any((m, s) in by for s in sizes):
            continue
        cells = [_fmt(by[(m, s)]["median_s"]) if (m, s) in by else "-" for s in sizes]
        line = f"| {m} | " + " | ".join(cells) + " |"
        if len(sizes) > 1:
            a, b = by.get((m, sizes[-2])), by.get((m, sizes[-1]))
            ratio = b["median_s"] / a["median_s"] if a and b and a["median_s"] and b["median_s"] else None
            line += f" {ratio:.2f} |" if ratio else " - |"
        lines.append(line)
    for s in sizes:
        lines += ["", f"## Size {s:g}x", "",
                  "| measurement | status | runs | median s | min s | max s | wall median s "
                  "| peak RSS MB (median / max) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if r["size"] != s:
                continue
            lines.append(f"| {r['measurement']} | {r['status']} | {r['runs']} | {_fmt(r['median_s'])} | "
                         f"{_fmt(r['min_s'])} | {_fmt(r['max_s'])} | {_fmt(r['wall_median_s'])} | "
                         f"{r['peak_rss_mb_median']:,} / {r['peak_rss_mb_max']:,} |")
    return "\n".join(lines) + "\n"


def plot(path: Path, rows: list[dict[str, Any]], profiles: dict[float, dict[str, Any]], sizes: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=90)
    xs = {s: profiles[s]["variables"] / 1e6 for s in sizes}
    for m in MEASUREMENTS:
        pts = [(xs[r["size"]], r["median_s"], r["min_s"], r["max_s"], r["peak_rss_mb_max"]) for r in rows
               if r["measurement"] == m and r["median_s"]]
        if not pts:
            continue
        pts.sort()
        x = [p[0] for p in pts]
        med = [p[1] for p in pts]
        err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
        ax.errorbar(x, med, yerr=err, marker="o", ms=4, capsize=2, label=m)
        ax2.plot(x, [p[4] / 1024 for p in pts], marker="o", ms=4, label=m)
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    # Minor ticks: label 2 and 5 of each decade only, so labels do not collide.
    some = FuncFormatter(lambda v, _pos: f"{v:g}" if v > 0 and round(v / 10 ** math.floor(math.log10(v))) in (2, 5)
                         else "")
    for a, title, unit in ((ax, "time (median, min-max)", "seconds"), (ax2, "peak resident memory", "GiB")):
        a.set_xscale("log")
        a.set_yscale("log")
        for axis in (a.xaxis, a.yaxis):
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(some)
        a.tick_params(which="minor", labelsize=7)
        a.set_xlabel("lowered variables (millions)")
        a.set_ylabel(unit)
        a.set_title(title, fontsize=10)
        a.grid(True, which="both", alpha=0.3)
    labels = ", ".join(f"{s:g}x" for s in sizes)
    model = str(profiles[sizes[0]].get("spec", "")).split("model='")[-1].split("'")[0] or "synthetic"
    fig.suptitle(f"popliner on synthetic {model} training profiles ({labels}); "
                 f"{profiles[sizes[-1]]['variables']:,} variables at {sizes[-1]:g}x", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0.25,0.5,1,2", help="profile sizes, multiples of 1x (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (default %(default)s)")
    ap.add_argument("--out", default="bench-out", help="output folder (default %(default)s/)")
    ap.add_argument("--quick", action="store_true", help="one tiny profile (bert-tiny), each measurement once")
    ap.add_argument("--only", default=None,
                    help=f"comma-separated subset of measurements ({','.join(MEASUREMENTS)})")
    ap.add_argument("--preset", default="bert-large", help="synth preset (default %(default)s)")
    ap.add_argument("--scale-1x", type=float, default=SCALE_1X,
                    help="synth --scale of the 1x profile (default %(default)s)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="ILP time limit in seconds (default 60)")
    ap.add_argument("--work", default=None, help="where profiles and caches go (default OUT/work/)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        spec = json.loads(args.worker)
        try:
            result = worker(spec)
        except Exception as exc:  # noqa: BLE001 - reported as the run's status
            result = {"status": f"ERROR {type(exc).__name__}: {exc}"[:200]}
        Path(spec["result"]).write_text(json.dumps(result))
        return 0

    if args.quick:
        preset, sizes, repeat, scale_1x = "bert-tiny", [1.0], 1, 1.0
    else:
        preset, repeat, scale_1x = args.preset, args.repeat, args.scale_1x
        sizes = sorted(float(s) for s in args.sizes.split(","))
    wanted = MEASUREMENTS if not args.only else tuple(m for m in MEASUREMENTS if m in args.only.split(","))
    if args.only and len(wanted) != len(set(args.only.split(","))):
        ap.error(f"--only: unknown measurement in {args.only!r}; choose from {', '.join(MEASUREMENTS)}")
    out = Path(args.out)
    work = Path(args.work) if args.work else out / "work"
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    info = machine()
    log(f"{info.get('nproc')} CPUs, {info.get('cpu', '?')}, Python {info['python']}, numpy {info.get('numpy')}")

    profiles: dict[float, dict[str, Any]] = {}
    runs: list[Run] = []
    t_start = time.perf_counter()
    for size in sizes:
        tag = f"{preset}-training-{size:g}x"
        profile = work / f"{tag}.json.gz"
        profiles[size] = make_profile(preset, round(size * scale_1x, 6), profile)
        p = profiles[size]
        log(f"[{size:g}x] {p['variables']:,} variables, {p['steps']:,} steps, {p['programs']:,} programs")
        cache = work / f"cache-{tag}"
        env = dict(os.environ, POPLINER_CACHE_DIR=str(cache.resolve()), MPLBACKEND="Agg")
        env.pop("PYTHONBREAKPOINT", None)
        log_path = out / f"children-{tag}.log"
        base = {"profile": str(profile.resolve()), "time_limit": args.time_limit,
                "csv": str((work / f"{tag}-layers.csv").resolve()),
                "xlsx": str((work / f"{tag}-review.xlsx").resolve()),
                "pipeline": str((work / f"{tag}-pipeline.yaml").resolve())}
        needs_cache = [m for m in wanted if m != "cold_load"]
        if "cold_load" not in wanted and needs_cache:
            shutil.rmtree(cache, ignore_errors=True)
            run_child(dict(base, measurement="cold_load"), env, log_path)  # warm the cache, not recorded
        # Otherwise the cold runs come first and leave the cache warm for the rest.
        for m in wanted:
            if m == "simulate":
                res, wall, rss = run_child(dict(base, measurement="config"), env, log_path)
                log(f"[{size:g}x] pipeline for simulate: ILP split over {SIM_IPUS} IPUs, {res.get('status')}, "
                    f"{wall:.1f} s")
            for k in range(repeat):
                if m == "cold_load":
                    shutil.rmtree(cache, ignore_errors=True)  # an empty cache dir, every time
                res, wall, rss = run_child(dict(base, measurement=m), env, log_path)
                secs = res.pop("seconds", None)
                status = res.pop("status", "?")
                runs.append(Run(m, size, k + 1, status, secs, wall, rss, res))
                shown = f"{secs:.2f} s" if secs is not None else "-"
                log(f"[{size:g}x] {m} {k + 1}/{repeat}: {shown} ({status}), wall {wall:.1f} s, "
                    f"peak {rss:,.0f} MB")
        write_outputs(out, runs, profiles, info, [s for s in sizes if s in profiles])
    log(f"done in {time.perf_counter() - t_start:.0f} s; results in {out}/summary.md, summary.csv, bench.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
