"""Fuzz popliner's inputs: mutated profiles and pipeline configs through the real CLI.

Each case takes a valid input, applies ONE mutation of a given kind, and runs
the CLI on it (in a worker process, through click's test runner, with a time
limit per case). A case is a problem when

* it ends in a traceback or an internal error (exit 70),
* it hangs (takes longer than ``--timeout`` seconds),
* it exits with a code the command never should for bad input (a profile:
  0 or 2, or 3 with ``--solve``; ``check``: 0, 1 or 2; ``simulate``: 0 or 2),
* or it fails without the one-line ``popliner: error: ...`` message (or
  prints one and still exits 0).

    python scripts/fuzz.py                          # 1000 profiles + 300 configs
    python scripts/fuzz.py --profiles 60 --configs 40 --seed 3 --json report.json
    python scripts/fuzz.py --structural 1500        # cases built from the schema (scripts/fuzz_schema.py) and
                                                    # review workbooks (scripts/fuzz_workbook.py)

Exit status: 0 when no case is a problem, 1 otherwise. The summary table
(counts per mutation kind and outcome) goes to stdout.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))  # fuzz_schema

PROFILE_BASES = [REPO / "fixtures" / "profiles" / name for name in ("tiny.json", "bert-tiny-inference.json")]
PROFILE_KINDS = ("key_removal", "type_swap", "out_of_range_id", "huge_number", "cycle", "truncation", "encoding_error")
CONFIG_KINDS = ("key_removal", "type_swap", "out_of_range_id", "huge_number", "cycle", "truncation", "encoding_error")
HANG = 124  # exit code recorded for a case that ran out of time


@dataclass
class Case:
    target: str  # "profile" or "config"
    kind: str
    seed: int
    argv: list[str]
    data: bytes
    name: str
    allowed: tuple[int, ...]
    label: str = ""  # what a structural case changed
    output: str = ""  # the case's output file ("{out}" in argv): it must not exist after a failure


@dataclass
class Outcome:
    target: str
    kind: str
    seed: int
    argv: list[str]
    exit_code: int
    seconds: float
    problem: str | None
    message: str
    label: str = ""


# -- walking JSON-like documents -------------------------------------------------------


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out = [(path, doc)]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_nodes(v, (*path, k)))
    elif isinstance(doc, list):
        # Long lists (per-tile vectors, variable columns) are sampled, not walked whole.
        idx = range(len(doc)) if len(doc) <= 64 else sorted(random.Random(len(doc)).sample(range(len(doc)), 64))
        for i in idx:
            out.extend(_nodes(doc[i], (*path, i)))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(doc, path[:-1])[path[-1]] = value


SWAPS: list[Any] = ["x", True, False, 1.5, None, [], {}, 7, -1, [1, 2], {"a": 1}, ""]
HUGE: list[Any] = [10**30, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 2**41, 2**53 + 1, 1e308, -1e308, 2**31]


def _key_removal(doc: Any, rng: random.Random) -> Any:
    dicts = [(p, n) for p, n in _nodes(doc) if isinstance(n, dict) and n]
    path, node = rng.choice(dicts)
    del node[rng.choice(sorted(node, key=str))]
    return doc


def _type_swap(doc: Any, rng: random.Random) -> Any:
    paths = [p for p, _ in _nodes(doc) if p]
    path = rng.choice(paths)
    old = _get(doc, path)
    choices = [v for v in SWAPS if type(v) is not type(old)]
    _set(doc, path, copy.deepcopy(rng.choice(choices)))
    return doc


def _huge_number(doc: Any, rng: random.Random) -> Any:
    paths = [p for p, n in _nodes(doc) if p and isinstance(n, (int, float)) and not isinstance(n, bool)]
    if not paths:
        return _type_swap(doc, rng)
    _set(doc, rng.choice(paths), rng.choice(HUGE))
    return doc


# -- profile-specific mutations --------------------------------------------------------


def _profile_id_places(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    places: list[tuple[Any, ...]] = []
    for i, p in enumerate(doc.get("programs", [])):
        if not isinstance(p, dict):
            continue
        for key in ("children", "vars"):
            for j in range(len(p.get(key) or [])):
                places.append(("programs", i, key, j))
        if "debugContext" in p:
            places.append(("programs", i, "debugContext"))
        for j in range(len(p.get("vertices") or [])):
            places.append(("programs", i, "vertices", j, 0))
    for key in ("steps", "controlPrograms"):
        places.extend((key, j) for j in range(len(doc.get(key, []))))
    for col in ("class", "tile", "id"):
        places.extend(("variables", col, j) for j in range(min(8, len(doc.get("variables", {}).get(col, [])))))
    for i, c in enumerate(doc.get("debugContexts", [])):
        if isinstance(c, dict) and c.get("parent") is not None:
            places.append(("debugContexts", i, "parent"))
    return places


def _profile_out_of_range(doc: Any, rng: random.Random) -> Any:
    places = _profile_id_places(doc)
    tiles = doc["target"]["tilesPerIpu"]
    value = rng.choice([-1, -2, tiles, tiles + 1, 10**6, 2**31, 2**63 - 1, 99999])
    _set(doc, rng.choice(places), value)
    return doc


def _profile_cycle(doc: Any, rng: random.Random) -> Any:
    if rng.random() < 0.5:
        ctxs = [c for c in doc["debugContexts"] if c.get("parent") is not None]
        child = rng.choice(ctxs)
        chain = [child["id"]]
        by_id = {c["id"]: c for c in doc["debugContexts"]}
        node = child
        while node.get("parent") is not None and node["parent"] in by_id and len(chain) < 50:
            node = by_id[node["parent"]]
            chain.append(node["id"])
        by_id[chain[-1]]["parent"] = rng.choice(chain)  # the root's parent: something below it
        return doc
    progs = {p["id"]: p for p in doc["programs"]}
    parents = [p for p in doc["programs"] if p.get("children")]
    parent = rng.choice(parents)
    path = [parent["id"]]
    node = parent
    while node.get("children") and len(path) < 50:
        nxt = progs.get(rng.choice(node["children"]))
        if nxt is None:
            break
        path.append(nxt["id"])
        node = nxt
    node.setdefault("children", []).append(rng.choice(path))
    return doc


# -- config-specific mutations ---------------------------------------------------------


def _config_out_of_range(doc: Any, rng: random.Random) -> Any:
    places: list[tuple[Any, ...]] = []
    for i, s in enumerate(doc.get("stages", [])):
        for key in ("ipu", "index"):
            if isinstance(s, dict) and key in s:
                places.append(("stages", i, key))
    for i, row in enumerate(doc.get("layers", [])):
        if isinstance(row, dict):
            for key in row:
                places.append(("layers", i, key))
    for key in ("num_ipus", "gradient_accumulation"):
        if key in doc:
            places.append((key,))
    if not places:
        return _type_swap(doc, rng)
    path = rng.choice(places)
    old = _get(doc, path)
    value = rng.choice([-1, 0, 99, 2**31, "no-such-layer", 10**9]) if not isinstance(old, str) else rng.choice(
        ["no-such-layer", "", "x" * 300])
    _set(doc, path, value)
    return doc


def _config_cycle_text(text: str, rng: random.Random) -> str:
    """YAML aliases: a self-referencing node, or an alias bomb."""
    if rng.random() < 0.5:
        return text.replace("stages:", "stages: &loop [*loop]\nunused_stages:", 1)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    return bomb + text


# -- byte-level mutations ----------------------------------------------------------------


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(0, max(1, len(data)))]


def _encoding(data: bytes, rng: random.Random) -> bytes:
    how = rng.randrange(5)
    if how == 0:
        at = rng.randrange(len(data))
        return data[:at] + rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xfe\xff", b"\x80"]) + data[at:]
    if how == 1:
        return data.decode("utf-8", "replace").encode("utf-16")
    if how == 2:
        return b"\xef\xbb\xbf" + data  # a UTF-8 byte order mark
    if how == 3:
        return data.decode("utf-8", "replace").encode("latin-1", "replace").replace(b"e", b"\xe9", 3)
    return data.replace(b"\n", b"\x00\n", 1) if b"\n" in data else data + b"\x00"


# -- building cases ----------------------------------------------------------------------


def _profile_case(base: dict[str, Any], base_name: str, kind: str, seed: int) -> Case:
    rng = random.Random(seed)
    doc = copy.deepcopy(base)
    data: bytes
    if kind in ("truncation", "encoding_error"):
        raw = json.dumps(doc).encode("utf-8")
        data = _truncate(raw, rng) if kind == "truncation" else _encoding(raw, rng)
    else:
        mutate: dict[str, Callable[[Any, random.Random], Any]] = {
            "key_removal": _key_removal, "type_swap": _type_swap, "out_of_range_id": _profile_out_of_range,
            "huge_number": _huge_number, "cycle": _profile_cycle,
        }
        data = json.dumps(mutate[kind](doc, rng)).encode("utf-8")
    name = f"p{seed}.json"
    if rng.random() < 0.15:
        data, name = gzip.compress(data, mtime=0), name + ".gz"
    solve = base_name == "tiny.json" and rng.random() < 0.3
    argv = ["-q", "{file}", "--no-cache"] + (["--solve", "--num-ipus", "2", "--time-limit", "5"] if solve else [])
    return Case("profile", kind, seed, argv, data, name, (0, 2, 3) if solve else (0, 2))


def _config_case(base_text: str, kind: str, seed: int, profile: str) -> Case:
    import yaml

    rng = random.Random(seed)
    if kind in ("truncation", "encoding_error"):
        raw = base_text.encode("utf-8")
        data = _truncate(raw, rng) if kind == "truncation" else _encoding(raw, rng)
    elif kind == "cycle":
        data = _config_cycle_text(base_text, rng).encode("utf-8")
    else:
        doc = yaml.safe_load(base_text)
        mutate: dict[str, Callable[[Any, random.Random], Any]] = {
            "key_removal": _key_removal, "type_swap": _type_swap, "out_of_range_id": _config_out_of_range,
            "huge_number": _huge_number,
        }
        data = yaml.safe_dump(mutate[kind](doc, rng), sort_keys=False).encode("utf-8")
    if rng.random() < 0.5:
        return Case("config", kind, seed, ["-q", "check", "{file}", "--profile", profile, "--no-cache"], data,
                    f"c{seed}.yaml", (0, 1, 2))
    return Case("config", kind, seed, ["-q", "simulate", "{file}"], data, f"c{seed}.yaml", (0, 2))


# -- running -------------------------------------------------------------------------------


class _Hang(SystemExit):
    """Raised by SIGALRM; a SystemExit so that the CLI passes it through untouched."""


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang(HANG)


def run_case(args: tuple[Case, str, float]) -> Outcome:
    case, folder, timeout = args
    from click.testing import CliRunner

    from popliner.cli import cli

    # A folder of its own, so that anything the case leaves behind (a partial output, a temporary file) shows.
    own = Path(folder) / f"{case.name}.d"
    own.mkdir()
    path = own / case.name
    path.write_bytes(case.data)
    out = own / case.output if case.output else None
    argv = [a.replace("{file}", str(path)).replace("{out}", str(out)) for a in case.argv]
    signal.signal(signal.SIGALRM, _alarm)
    started = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        result = CliRunner().invoke(cli, argv, catch_exceptions=True)
        code = result.exit_code
        stderr = result.stderr
        exc = result.exception
    except _Hang:
        code, stderr, exc = HANG, "", None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - started
    left = sorted(p.name for p in own.iterdir() if p != path and not (code == 0 and p == out))
    shutil.rmtree(own, ignore_errors=True)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("popliner: error: ")]
    problem = None
    if code == HANG or isinstance(exc, _Hang):
        problem, code = "hang", HANG
    elif "Traceback" in stderr or (exc is not None and not isinstance(exc, SystemExit)):
        problem = "traceback"
    elif code == 70:
        problem = "internal error"
    elif code not in case.allowed:
        problem = "wrong exit code"
    elif code == 2 and len(errors) != 1:
        problem = "missing message"
    elif code == 0 and errors:
        problem = "message with exit 0"
    elif any("out of memory" in e for e in errors):
        problem = "out of memory"  # a bound on the work should have refused it first
    elif left:
        problem = "leftover file"
        errors.append(f"left {', '.join(left)}")
    message = errors[-1] if errors else (repr(exc) if exc is not None and not isinstance(exc, SystemExit) else "")
    return Outcome(case.target, case.kind, case.seed, case.argv, code, round(seconds, 3), problem, message[:300],
                   case.label)


def build_cases(n_profiles: int, n_configs: int, seed: int, folder: Path) -> list[Case]:
    rng = random.Random(seed)
    bases = [(json.loads(p.read_text(encoding="utf-8")), p.name) for p in PROFILE_BASES]
    cases = []
    for k in range(n_profiles):
        base, name = bases[0] if rng.random() < 0.7 else bases[1]
        cases.append(_profile_case(base, name, PROFILE_KINDS[k % len(PROFILE_KINDS)], rng.randrange(2**31)))
    config_text, profile = _base_config(folder)
    for k in range(n_configs):
        cases.append(_config_case(config_text, CONFIG_KINDS[k % len(CONFIG_KINDS)], rng.randrange(2**31), profile))
    return cases


def _base_config(folder: Path) -> tuple[str, str]:
    from click.testing import CliRunner

    from popliner.cli import cli

    profile = str(PROFILE_BASES[0])
    out = folder / "base.yaml"
    r = CliRunner().invoke(cli, ["-q", profile, "--solve", "--num-ipus", "2", "--config-out", str(out), "--force",
                                 "--no-cache"])
    if r.exit_code != 0:
        raise SystemExit(f"could not make the base config: {r.stderr}")
    return out.read_text(encoding="utf-8"), profile


def summarise(outcomes: list[Outcome]) -> str:
    table: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        table[(o.target, o.kind)][o.problem or f"exit {o.exit_code}"] += 1
    columns = sorted({c for counts in table.values() for c in counts})
    lines = ["| input | mutation | cases | " + " | ".join(columns) + " |", "|---|---|---|" + "---|" * len(columns)]
    for (target, kind), counts in sorted(table.items()):
        cells = " | ".join(str(counts.get(c, 0)) for c in columns)
        lines.append(f"| {target} | {kind} | {sum(counts.values())} | {cells} |")
    problems = [o for o in outcomes if o.problem]
    totals = Counter(o.problem or "ok" for o in outcomes)
    lines.append("")
    lines.append(f"{len(outcomes)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    slowest = max(outcomes, key=lambda o: o.seconds)
    lines.append(f"slowest case {slowest.seconds:.2f} s ({slowest.target} {slowest.kind} seed {slowest.seed})")
    for o in problems[:30]:
        lines.append(f"PROBLEM {o.problem}: {o.target} {o.kind} seed {o.seed} {o.label} exit {o.exit_code}: "
                     f"{o.message}")
    return "\n".join(lines)


def build_structural_cases(n: int, seed: int, folder: Path) -> list[Case]:
    """About ``n`` cases: 3/5 profiles and 1/5 configs (scripts/fuzz_schema.py), 1/5 workbooks (fuzz_workbook.py)."""
    import fuzz_schema

    rng = random.Random(seed)
    cases: list[Case] = []
    per_base = max(n * 3 // 5 // len(PROFILE_BASES), 1)
    for base_path in PROFILE_BASES:
        base = json.loads(base_path.read_text(encoding="utf-8"))
        for k, (kind, label, data) in enumerate(fuzz_schema.profile_cases(base, base_path.name, per_base, rng)):
            solve = base_path.name == "tiny.json" and k % 4 == 0
            argv = ["-q", "{file}", "--no-cache"] + (["--solve", "--num-ipus", "2", "--time-limit", "5"]
                                                     if solve else [])
            cases.append(Case("profile", kind, k, argv, data, f"s{len(cases)}.json", (0, 2, 3) if solve else (0, 2),
                              label))
    config_text, profile = _base_config(folder)
    for k, (kind, label, data) in enumerate(fuzz_schema.config_cases(config_text, max(n // 5, 20), rng)):
        if k % 2:
            argv, allowed = ["-q", "check", "{file}", "--profile", profile, "--no-cache"], (0, 1, 2)
        else:
            argv, allowed = ["-q", "simulate", "{file}"], (0, 2)
        cases.append(Case("config", kind, k, argv, data, f"s{len(cases)}.yaml", allowed, label))
    cases.extend(workbook_structural_cases(max(n - len(cases), 20), rng, folder))
    return cases


def workbook_structural_cases(n: int, rng: random.Random, folder: Path) -> list[Case]:
    """About ``n`` review-workbook cases, given in turn to ``check`` and to ``config-from -o``."""
    import fuzz_workbook

    base, profile = _base_workbook(folder)
    cases: list[Case] = []
    for k, (kind, label, data) in enumerate(fuzz_workbook.workbook_cases(base, n, rng)):
        name = f"w{k}.xlsx"
        if k % 2:
            cases.append(Case("workbook", kind, k, ["-q", "check", "{file}", "--profile", profile, "--no-cache"],
                              data, name, (0, 1, 2), label))
        else:
            cases.append(Case("workbook", kind, k, ["-q", "config-from", "{file}", "--profile", profile,
                                                    "--no-cache", "-o", "{out}"], data, name, (0, 2), label,
                              output="pipeline.yaml"))
    return cases


def _base_workbook(folder: Path) -> tuple[bytes, str]:
    """A review workbook of a training profile split over 2 IPUs (training options in its planner)."""
    from click.testing import CliRunner

    from popliner.cli import cli

    profile = str(REPO / "fixtures" / "profiles" / "tiny-training.json")
    out = folder / "base.xlsx"
    r = CliRunner().invoke(cli, ["-q", profile, "--num-ipus", "2", "-o", str(out), "--force", "--no-cache"])
    if r.exit_code != 0:
        raise SystemExit(f"could not make the base workbook: {r.stderr}")
    return out.read_bytes(), profile


def _limit_memory(gigabytes: float) -> None:
    """Pool initializer: a case that allocates past this fails with MemoryError (reported as a problem)."""
    import resource

    limit = int(gigabytes * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def fuzz(n_profiles: int, n_configs: int, seed: int, timeout: float, jobs: int, structural: int = 0,
         memory_gb: float | None = None) -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="popliner-fuzz-") as tmp:
        folder = Path(tmp)
        os.environ.setdefault("POPLINER_CACHE_DIR", str(folder / "cache"))
        os.environ.setdefault("MPLBACKEND", "Agg")
        cases = build_structural_cases(structural, seed, folder) if structural else build_cases(
            n_profiles, n_configs, seed, folder)
        work = [(c, tmp, timeout) for c in cases]
        if jobs <= 1 and memory_gb is None:
            return [run_case(w) for w in work]
        ctx = multiprocessing.get_context("fork")
        init, initargs = (_limit_memory, (memory_gb,)) if memory_gb is not None else (None, ())
        with ctx.Pool(max(jobs, 1), initializer=init, initargs=initargs, maxtasksperchild=200) as pool:
            return pool.map(run_case, work, chunksize=1 if structural else 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", type=int, default=1000, help="mutated profiles (default 1000)")
    parser.add_argument("--configs", type=int, default=300, help="mutated pipeline configs (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--json", type=Path, default=None, help="write every outcome here")
    parser.add_argument("--structural", type=int, default=0, metavar="N",
                        help="run about N cases built from the schema instead of mutations (scripts/fuzz_schema.py)")
    parser.add_argument("--memory-gb", type=float, default=None,
                        help="address-space limit per worker; a case that needs more is a problem (default: "
                             "3 with --structural, none otherwise)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    memory = args.memory_gb if args.memory_gb is not None else (3.0 if args.structural else None)
    outcomes = fuzz(args.profiles, args.configs, args.seed, args.timeout, args.jobs, args.structural, memory)
    print(summarise(outcomes))
    print(f"wall time {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1), encoding="utf-8")
    return 1 if any(o.problem for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
