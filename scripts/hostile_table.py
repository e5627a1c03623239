#!/usr/bin/env python
"""Measure popliner on the hand-crafted hostile inputs of issue 22: exit code, time and peak memory per case.

    python scripts/hostile_table.py                       # this checkout
    python scripts/hostile_table.py --tree OLD --tree .   # before and after, side by side

Every case runs in a fresh process (``python -m popliner``) with the tree
given on PYTHONPATH, a private cache folder and a time limit; peak memory is
the child's ``ru_maxrss`` (``os.wait4``). Cases that plant something in the
cache first write the entry with a normal run. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import chain_document  # noqa: E402
from tests.hostile import (  # noqa: E402
    context_chain,
    deep_source,
    liveness_amplification,
    many_operations,
    many_vertex_types,
    no_contexts,
    write_json,
)

TINY = REPO / "fixtures" / "profiles" / "tiny.json"
TRAINING = REPO / "fixtures" / "profiles" / "tiny-training.json"


@dataclass
class Run:
    code: int
    seconds: float
    peak_mb: float
    first_error: str
    note: str = ""
    cpu: float = float("nan")  # user + system seconds of the child (the machine may be loaded)

    def cell(self) -> str:
        code = "hang (killed)" if self.code == -signal.SIGKILL else f"exit {self.code}"
        note = f"; {self.note}" if self.note else ""
        return f"{code}, {self.cpu:.1f} s CPU ({self.seconds:.1f} s wall), {self.peak_mb:.0f} MB{note}"


def run(tree: Path, argv: list[str], cache: Path, timeout: float, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> Run:
    environ = {**os.environ, "PYTHONPATH": str(tree), "POPLINER_CACHE_DIR": str(cache), "MPLBACKEND": "Agg",
               **(env or {})}
    started = time.perf_counter()
    command = [sys.executable, "-m", "popliner", *argv]
    # A forked child's peak RSS starts at this (large) process's: /usr/bin/time forks popliner from a small one.
    timer = shutil.which("time") if Path("/usr/bin/time").exists() else None
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as peak:
        if timer:
            command = ["/usr/bin/time", "-f", "%M %U %S", "-o", peak.name, *command]
        # A session of its own, so that a case that hangs is killed with everything it started.
        proc = subprocess.Popen(command, cwd=tree, env=environ, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True, preexec_fn=_cap_memory if MEMORY_CAP else None)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
        measured = peak.read().split()
    code = os.waitstatus_to_exitcode(status)
    peak_mb = usage.ru_maxrss / 1024
    cpu = usage.ru_utime + usage.ru_stime
    if timer:
        peak_mb = int(measured[-3]) / 1024 if len(measured) >= 3 and measured[-3].isdigit() else float("nan")
        cpu = float(measured[-2]) + float(measured[-1]) if len(measured) >= 3 else cpu
        text = "\n".join(ln for ln in text.splitlines() if not ln.startswith("Command "))
        if code and os.WIFEXITED(status) and "Command terminated by signal" in text:
            code = -int(text.rsplit(" ", 1)[-1])
    errors = [ln for ln in text.splitlines() if ln.startswith("popliner: error:")]
    first = errors[0] if errors else (text.strip().splitlines() or [""])[-1]
    lines = len(text.strip().splitlines())
    notes = [f"{lines} stderr lines"] if lines > 3 else []
    if "Traceback" in text:
        notes.append("TRACEBACK")
    if len(errors) > 1:
        notes.append(f"{len(errors)} ERROR LINES")
    # popliner's temporary files are hidden .*.tmp beside the output (fileio.py): none may be left.
    left = [p.name for p in Path(tree if cwd is None else cwd).glob(".*.tmp")]
    if cwd is not None:
        left += [p.name for p in cwd.rglob(".*.tmp")]
    if left:
        notes.append(f"LEFT {', '.join(sorted(set(left)))}")
    return Run(code, seconds, peak_mb, first[:160], "; ".join(notes), cpu)


#: Address-space limit of each child (bytes; 0: none), so that an old tree's runaway case cannot take the
#: memory of a shared machine: it fails at the cap instead (MemoryError, or killed).
MEMORY_CAP = 0


def _cap_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


Case = Callable[[Path, Path, Path], Run]  # (tree, work folder, cache folder) -> Run


def _plain(make: Callable[[Path], list[str]], timeout: float = 200, env: dict[str, str] | None = None) -> Case:
    def case(tree: Path, work: Path, cache: Path) -> Run:
        return run(tree, make(work), cache, timeout, env, cwd=work)
    return case


def _profile(doc_or_text: object, *extra: str) -> Callable[[Path], list[str]]:
    def make(work: Path) -> list[str]:
        path = write_json(doc_or_text, work / "case.json")  # type: ignore[arg-type]
        return ["--no-cache", str(path), *extra]
    return make


def _planted(plant: Callable[[Path, Path], str]) -> Case:
    """Write the entry with a normal run, plant something under its name, run again; ``plant`` tells the damage."""
    def case(tree: Path, work: Path, cache: Path) -> Run:
        profile = work / "model.json"
        shutil.copy(TINY, profile)
        out = work / "t.csv"
        run(tree, [str(profile), "-o", str(out), "-f"], cache, 60)
        entry = next(cache.glob("*.npz"))
        check = plant(entry, work)
        result = run(tree, [str(profile), "-o", str(out), "-f"], cache, 20)
        result.note = eval_check(check, entry, work)
        return result
    return case


def eval_check(check: str, entry: Path, work: Path) -> str:
    if check == "victim":
        victim = work / "victim.txt"
        return "target untouched" if victim.read_bytes() == b"precious\n" else "TARGET OVERWRITTEN"
    if check == "figures":
        return "figures as without cache" if (work / "t.csv").read_text() == (work / "clean.csv").read_text() \
            else "FIGURES CHANGED"
    return ""


def _symlink(entry: Path, work: Path) -> str:
    (work / "victim.txt").write_text("precious\n")
    entry.unlink()
    entry.symlink_to(work / "victim.txt")
    return "victim"


def _devnull(entry: Path, work: Path) -> str:
    entry.unlink()
    entry.symlink_to("/dev/null")
    return ""


def _fifo(entry: Path, work: Path) -> str:
    entry.unlink()
    os.mkfifo(entry)
    return ""


def _device(entry: Path, work: Path) -> str:
    entry.unlink()
    os.mknod(entry, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    return ""


def _rewrite(entry: Path, column: str, change: Callable[[object], object], redigest: bool) -> None:
    import json

    import numpy as np
    from isal import isal_zlib

    with np.load(entry, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(isal_zlib.decompress(arrays["__meta__"]).decode())
    arrays[column] = change(arrays[column].copy())  # type: ignore[assignment]
    if redigest and "digest" in meta:
        from popliner.profile import cache

        meta["digest"] = cache._digest(meta["sha256"], {k: v for k, v in arrays.items() if k != "__meta__"})
    arrays["__meta__"] = np.frombuffer(isal_zlib.compress(json.dumps(meta).encode(), 1), np.uint8)
    with open(entry, "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]


def _tampered_bytes(entry: Path, work: Path) -> str:
    shutil.copy(work / "t.csv", work / "clean.csv")
    _rewrite(entry, "p.variables.bytes.", lambda a: a // 10, redigest=False)  # type: ignore[operator]
    return "figures"


def _tampered_tiles(entry: Path, work: Path) -> str:
    def change(a: object) -> object:
        a[0] = 99  # type: ignore[index]
        return a
    _rewrite(entry, "p.variables.tile.", change, redigest=True)
    return ""


def _loose_folder(entry: Path, work: Path) -> str:
    os.chmod(entry.parent, 0o777)
    return ""


def _config(edit: Callable[[str], str], command: str) -> Case:
    def case(tree: Path, work: Path, cache: Path) -> Run:
        cfg = work / "pipeline.yaml"
        run(tree, [str(TRAINING), "--solve", "--num-ipus", "2", "--config-out", str(cfg), "-f"], cache, 60)
        cfg.write_text(edit(cfg.read_text()))
        argv = ["check", str(cfg), "--profile", str(TRAINING)] if command == "check" else ["simulate", str(cfg)]
        return run(tree, argv, cache, 120)
    return case


def _long_name() -> dict[str, object]:
    name = "a" * 40 + "!"
    doc = chain_document([{"name": name, "data": {"opName": name}}, {"name": "x"}])
    doc["variables"] = {"id": [7], "bytes": [8], "tile": [0], "class": [0]}
    doc["livenessClasses"] = [[[0, 2]]]
    doc["programs"][1]["vars"] = [7]
    return doc


def _deep_objects() -> str:
    return deep_source(100_000)


def _gzipped(doc: object, name: str, *extra: str) -> Callable[[Path], list[str]]:
    def make(work: Path) -> list[str]:
        import gzip
        import json

        path = work / name
        path.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 6, mtime=0))
        return ["--no-cache", str(path), *extra]
    return make


def _out(make: Callable[[Path], list[str]], name: str, *extra: str) -> Callable[[Path], list[str]]:
    def with_output(work: Path) -> list[str]:
        return [*make(work), "-o", str(work / name), *extra]
    return with_output


def _planner(edit: Callable[[object], None]) -> Case:
    """A review workbook of tiny-training over 2 IPUs, its planner sheet edited, given to ``check``."""
    def case(tree: Path, work: Path, cache: Path) -> Run:
        import openpyxl

        book_path = work / "review.xlsx"
        run(tree, [str(TRAINING), "--num-ipus", "2", "-o", str(book_path), "-f"], cache, 120)
        book = openpyxl.load_workbook(book_path)
        edit(book["Split planner"])
        book.save(book_path)
        return run(tree, ["check", str(book_path), "--profile", str(TRAINING)], cache, 200)
    return case


def _many_rows(sheet: object) -> None:
    for k in range(200_000):
        sheet.cell(row=19 + k, column=1, value=f"layer{k}")  # type: ignore[attr-defined]
        sheet.cell(row=19 + k, column=2, value=0)  # type: ignore[attr-defined]


def _deep_training(sheet: object) -> None:
    sheet["G4"] = "[" * 16_000 + "]" * 16_000  # type: ignore[index]


CASES: dict[str, Case] = {
    "cache: symlink planted at the entry's name": _planted(_symlink),
    "cache: FIFO at the entry's name": _planted(_fifo),
    "cache: symlink to /dev/null": _planted(_devnull),
    "cache: a device node (c 1 3)": _planted(_device),
    "cache: variables.bytes changed, metadata kept": _planted(_tampered_bytes),
    "cache: a tile id changed, digest rewritten": _planted(_tampered_tiles),
    "cache: folder mode 0777": _planted(_loose_folder),
    "liveness: 100k steps, 50k intervals x 500 variables (1 MB)": _plain(_profile(liveness_amplification())),
    "50k vertex types x 65,536 tiles (4.6 MB)": _plain(_profile(many_vertex_types())),
    "100k operations x 65,536 tiles, --operation-breakdown (2.8 MB gz)": _plain(_out(_gzipped(
        many_operations(100_000, layers=10), "ops.json.gz", "--operation-breakdown"), "ops.csv")),
    "100k operations x 1,472 tiles, review workbook (2.6 MB gz)": _plain(_out(_gzipped(
        many_operations(100_000, tiles=1472), "ops.json.gz"), "review.xlsx")),
    "planner sheet with 200,000 layer rows (check)": _planner(_many_rows),
    "planner training options nested 16,000 deep (check)": _planner(_deep_training),
    "150 layers x 65,536 tiles, --solve (30 KB)": _plain(_profile(many_operations(150, layers=150), "--solve")),
    "20k debug contexts in one chain": _plain(_profile(context_chain(20_000))),
    "60k debug contexts in one chain": _plain(_profile(context_chain(60_000))),
    "--layer-name-regex '(a|aa)+$', 41-character name": _plain(_profile(_long_name(), "--layer-name-regex",
                                                                         "(a|aa)+$"), timeout=120),
    "profile source nested 990 deep (cache on)": _plain(lambda w: [str(write_json(deep_source(990),
                                                                                  w / "deep.json"))]),
    "profile source nested 100k deep (objects)": _plain(_profile(_deep_objects())),
    "profile with no debug contexts": _plain(_profile(no_contexts(3))),
    "config: integer of 4,401 digits (check)": _config(
        lambda t: t.replace("gradient_accumulation: 16", "gradient_accumulation: 1" + "0" * 4400), "check"),
    "config: flow lists nested 50k deep (check)": _config(
        lambda t: t.replace("mode: training", "mode: training\nextra: " + "[" * 50_000 + "]" * 50_000), "check"),
    "config: clock_hz .inf (simulate)": _config(lambda t: t.replace("clock_hz: 1000000000.0", "clock_hz: .inf"),
                                                "simulate"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, help="a popliner checkout (repeatable; default: this one)")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this text")
    ap.add_argument("--memory-gb", type=float, default=0, help="address-space limit of each case (default: none)")
    args = ap.parse_args()
    global MEMORY_CAP
    MEMORY_CAP = int(args.memory_gb * (1 << 30))
    trees = [t.resolve() for t in (args.tree or [REPO])]
    print("| case | " + " | ".join(t.name for t in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for name, case in CASES.items():
        if args.only and args.only not in name:
            continue
        cells = []
        for tree in trees:
            with tempfile.TemporaryDirectory(prefix="popliner-hostile-") as tmp:
                work, cache = Path(tmp), Path(tmp) / "cache"
                try:
                    result = case(tree, work, cache)
                    shown = result.first_error if result.code else ""
                    cells.append(result.cell() + (f": `{shown}`" if shown else ""))
                except Exception as exc:  # noqa: BLE001 - a case that cannot be set up on this tree
                    cells.append(f"(not run: {type(exc).__name__}: {exc})")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
