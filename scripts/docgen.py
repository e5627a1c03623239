"""What the pages' cog blocks call: run a documented command for real and print it as Markdown.

The pages (README.md, docs/*.md) hold their examples as cog blocks (cogapp): the Python between
``[[[cog`` and ``]]]`` names the commands, and what lies between ``]]]`` and ``[[[end]]]`` is what
they printed the last time ``python scripts/docs.py`` ran. ``python scripts/docs.py --check`` runs
them again and fails when a page would change.

Every example runs in a fresh empty directory of its own (its commands in order, one after the
other): ``fixtures`` there is the repository's fixtures folder, the cache starts empty, ``popliner``
is this checkout's, and ``$HOME`` is that directory, so no example sees what another one left. Three
things that change from run to run are masked: elapsed times print as ``…`` (``in … s``), dates and
times of day as ``YYYY-MM-DD hh:mm``, and the directory's own path as ``~``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
#: An elapsed time in a log line ("in 0.38 s", "0.2 s"): never the same twice.
_SECONDS = re.compile(r"\b\d+\.\d+ s\b")
#: A date and time of day (a cache entry's, a file's): never the same twice.
_WHEN = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d\b")
#: Width of --help and of anything else that asks the terminal (there is none: output goes to a pipe).
COLUMNS = "80"
#: One example's commands may take this long in all (seconds) before the page's generation fails.
TIMEOUT = 600


@contextmanager
def fresh_directory(*, model: bool = False) -> Iterator[Path]:
    """An empty directory with ``fixtures`` (a link to the repository's) and, with ``model``, a copy of
    the bundled BERT training profile named ``model.json.gz`` (the README's placeholder name)."""
    with tempfile.TemporaryDirectory(prefix="popliner-docs-") as name:
        where = Path(name)
        (where / "fixtures").symlink_to(FIXTURES, target_is_directory=True)
        if model:
            shutil.copyfile(FIXTURES / "profiles" / "bert-base-training.json.gz", where / "model.json.gz")
        yield where


#: Held while a launcher is written and while a command is started. scripts/docs.py runs pages and images in
#: threads: a command forked by one thread while another has its launcher open for writing holds that file open
#: until it execs, and the other's launcher then fails to start ("Text file busy"). Popen returns once its child
#: has exec'd, so under this lock no child holds a launcher open.
_SPAWNING = threading.Lock()


def completed(args: list[str], cwd: Path, stderr: int, env: dict[str, str] | None = None,
              timeout: float | None = TIMEOUT) -> subprocess.CompletedProcess[bytes]:
    """``args`` run to their end in ``cwd``, stdout captured: as ``subprocess.run``, started under
    :data:`_SPAWNING` (every command the docs run is started here)."""
    with _SPAWNING:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr)
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _environment(where: Path) -> dict[str, str]:
    """The commands' environment in ``where``; its ``popliner`` launcher is written once, under :data:`_SPAWNING`."""
    shim = where / ".bin"
    launcher = shim / "popliner"
    with _SPAWNING:
        if not launcher.exists():
            shim.mkdir(exist_ok=True)
            launcher.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m popliner "$@"\n',
                                encoding="utf-8")
            launcher.chmod(0o755)
    return {
        "PATH": f"{shim}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "PYTHONPATH": str(ROOT), "HOME": str(where), "POPLINER_CACHE_DIR": str(where / ".cache" / "popliner"),
        "COLUMNS": COLUMNS, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "MPLBACKEND": "Agg",
        "SOURCE_DATE_EPOCH": "1767225600", "TERM": "dumb", "PYTHONHASHSEED": "0",
    }


def _masked(text: str, where: Path) -> str:
    text = text.replace(str(where.resolve()), "~").replace(str(where), "~")
    return _WHEN.sub("YYYY-MM-DD hh:mm", _SECONDS.sub("… s", text))


def _shell(command: str, where: Path, stderr: int) -> subprocess.CompletedProcess[bytes]:
    """``bash -c command`` in ``where`` with the docs' environment, its stdout captured."""
    return completed(["bash", "-c", command], where, stderr, _environment(where))


def run(command: str, where: Path, *, stream: str = "both", expect: int | tuple[int, ...] = 0) -> str:
    """Run one shell command in ``where``; its output (``stream``: stdout, stderr or both as a terminal
    shows them), masked. A command whose exit status is not ``expect`` stops the generation."""
    done = _shell(command, where, subprocess.STDOUT if stream == "both" else subprocess.PIPE)
    if done.returncode not in ((expect,) if isinstance(expect, int) else expect):
        both = done.stdout.decode(errors="replace") + (done.stderr or b"").decode(errors="replace")
        raise SystemExit(f"docs: `{command}` exited {done.returncode}, the page expects {expect}:\n{both}")
    out = done.stdout if stream in ("both", "stdout") else done.stderr
    # CSV rows end in CRLF (the csv module's line end); a page shows them as the terminal does, one per line.
    return _masked(out.decode("utf-8").replace("\r\n", "\n"), where)


def _block(text: str, lang: str = "") -> None:
    print(f"```{lang}")
    print(text.rstrip("\n"))
    print("```")


def _trimmed(text: str, lines: slice | None) -> str:
    if lines is None:
        return text
    rows = text.rstrip("\n").split("\n")
    kept = rows[lines]
    start = rows.index(kept[0]) if kept else 0
    before, after = start, len(rows) - start - len(kept)
    return "\n".join(([f"[… {before} lines]"] if before else []) + kept
                     + ([f"[… {after} more lines]"] if after else []))


def console(*commands: str, show: Sequence[int] | None = None, stream: str = "both", expect: int | Sequence[int] = 0,
            model: bool = False, setup: Sequence[str] = (), lines: slice | None = None) -> None:
    """One example: its commands run in order in a fresh directory, shown as a ``console`` block of
    ``$ command`` lines, each followed by what it printed (``show``: the indexes of the commands whose
    output is shown, default all; ``stream``: which of the output; ``lines``: a slice of it, the rest
    counted). ``setup`` commands run first, unshown (they say what the example starts from)."""
    expects = [expect] * len(commands) if isinstance(expect, int) else list(expect)
    shown = range(len(commands)) if show is None else show
    parts: list[str] = []
    with fresh_directory(model=model) as where:
        for command in setup:
            run(command, where)
        for i, (command, code) in enumerate(zip(commands, expects, strict=True)):
            out = run(command, where, stream=stream, expect=code)
            parts.append(f"$ {command}")
            if i in shown and out.strip():
                parts.append(_trimmed(out, lines).rstrip("\n"))
            if code:
                parts.append(f"[exit status {code}]")
    _block("\n".join(parts), "console")


def output(command: str, *, stream: str = "both", expect: int = 0, model: bool = False, setup: Sequence[str] = (),
           lines: slice | None = None, lang: str = "") -> None:
    """What one command prints (the command itself shown elsewhere on the page), as a plain block."""
    with fresh_directory(model=model) as where:
        for step in setup:
            run(step, where)
        _block(_trimmed(run(command, where, stream=stream, expect=expect), lines), lang)


def command_block(command: str, *, prefix: str = "", lang: str = "sh") -> None:
    """The command as a block to copy (``prefix``: what the reader runs before it, e.g. the install)."""
    _block(f"{prefix}{command}", lang)


def file_text(commands: Sequence[str], name: str, *, model: bool = False, lang: str = "",
              lines: slice | None = None) -> None:
    """The file ``name`` that ``commands`` write, as a block."""
    with fresh_directory(model=model) as where:
        for command in commands:
            run(command, where)
        _block(_trimmed(_masked((where / name).read_text(encoding="utf-8"), where), lines), lang)


def python_output(code: str, *, model: bool = False) -> None:
    """What a Python example prints, run as a script in a fresh directory."""
    with fresh_directory(model=model) as where:
        (where / "example.py").write_text(code, encoding="utf-8")
        _block(run("python example.py", where, stream="stdout"))


@functools.cache
def split_of(command: str, model: bool = False) -> dict[str, Any]:
    """The split JSON (stdout) of a ``--solve`` command, for a figure the prose states."""
    with fresh_directory(model=model) as where:
        done = _shell(command, where, subprocess.DEVNULL)
    if done.returncode not in (0, 3):
        raise SystemExit(f"docs: `{command}` exited {done.returncode}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@functools.cache
def stdout_of(command: str, model: bool = False, expect: int = 0) -> str:
    """What a command prints on stdout, for a figure the prose states."""
    with fresh_directory(model=model) as where:
        return run(command, where, stream="stdout", expect=expect)


def worst(command: str, ipu: int, model: bool = False) -> str:
    """IPU ``ipu``'s worst-tile bytes in the split of ``command``, as the pages spell bytes (1,234)."""
    return f"{split_of(command, model)['stages'][ipu]['worst_tile_bytes']:,}"


def help_text(args: str) -> None:
    """``popliner ARGS --help`` as a block."""
    output(f"popliner {args} --help".replace("popliner  ", "popliner "))


#: The reference page's sections: (heading, arguments before --help, what the command is for).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("popliner", "", "The group: which commands there are."),
    ("popliner PROFILE (analyse)", "analyse",
     "The main command: tables, plots and the review workbook of a profile; `--solve` splits it."),
    ("simulate", "simulate", "One step of a pipeline config on the bundled simulator."),
    ("check", "check", "The CI gate: exit 1 when an IPU of a config (or a review workbook's split) is over budget."),
    ("report", "report", "The HTML review report of a split."),
    ("plan", "plan", "Every pod configuration, ranked by predicted throughput."),
    ("config-from", "config-from", "The split typed into a review workbook, as a pipeline config."),
    ("synth", "synth", "Synthetic profiles, from presets of real models."),
    ("export", "export", "Poplar's profile.pop and debug.cbor as a format-v1 profile (needs the Poplar SDK)."),
    ("cache", "cache", "The derived-data cache."),
    ("cache info", "cache info", "Where the cache is and what it holds."),
    ("cache clear", "cache clear", "Empty the cache."),
)


def readme_text() -> str:
    """The README as it stands (read when called: its notebook example is run as written)."""
    return (ROOT / "README.md").read_text(encoding="utf-8")


@functools.cache
def splits(setup: tuple[str, ...], commands: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """The split JSONs of several ``--solve`` commands run one after the other in one fresh directory
    after ``setup`` (a synthetic profile made once, its cache shared by the solves)."""
    out = []
    with fresh_directory() as where:
        for step in setup:
            run(step, where)
        for command in commands:
            out.append(json.loads(run(command, where, stream="stdout", expect=(0, 3))))  # 3: does not fit
    return tuple(out)


def picture(split: dict[str, Any]) -> str:
    """The split as the picture on stderr spells it: ``[ embedding 0 head | 1 ]``."""
    return "[ " + " | ".join(" ".join(s["layers"]) for s in split["stages"]) + " ]"


def split_rows(rows: Sequence[tuple[str, str]], *, setup: Sequence[str] = ()) -> None:
    """A table of splits: one row per (label, --solve command): the split and each IPU's worst tile
    (model, stash and copy buffers), stash entries and copy buffers per tile."""
    found = splits(tuple(setup), tuple(command for _, command in rows))
    print("| options | split | worst tile per IPU (bytes) | stash entries | copy buffers per tile |")
    print("|---|---|---|---|---|")
    for (label, _), split in zip(rows, found, strict=True):
        stages = split["stages"]
        cells = [", ".join(f"{s[key]:,}" for s in stages)
                 for key in ("worst_tile_bytes", "stash_entries", "copy_buffer_bytes_per_tile")]
        # A bar inside a table cell must be escaped, even in code.
        print(f"| {label} | `{picture(split).replace('|', chr(92) + '|')}` | " + " | ".join(cells) + " |")


def set_cells(workbook: str, sheet: str, **cells: object) -> str:
    """A shell command that types values into a workbook's cells, as a reader would by hand (None: clear)."""
    typed = "; ".join(f"ws[{cell!r}] = {value!r}" for cell, value in cells.items())
    code = (f"import openpyxl; wb = openpyxl.load_workbook({workbook!r}); ws = wb[{sheet!r}]; {typed}; "
            f"wb.save({workbook!r})")
    return f"python -c {shlex.quote(code)}"


def edit_yaml(path: str, change: str) -> str:
    """A shell command that edits a YAML file by hand, as a reader would: ``change`` is Python on ``d``,
    the document (PyYAML writes it back)."""
    code = (f"import yaml; d = yaml.safe_load(open({path!r})); {change}; "
            f"yaml.safe_dump(d, open({path!r}, 'w'), sort_keys=False)")
    return f"python -c {shlex.quote(code)}"


def in_order(commands: Sequence[str], *, model: bool = False) -> None:
    """Run a page's commands one after the other in ONE fresh directory, as a reader following the page
    would; stops the generation when one fails (a file an earlier one left, for instance). Prints nothing."""
    with fresh_directory(model=model) as where:
        for command in commands:
            run(command, where)


def error_line(command: str, *, setup: Sequence[str] = (), expect: int = 2, starts: str = "popliner: error:",
               model: bool = False) -> str:
    """The one line on stderr that starts with ``starts`` (the error line, by default) when ``command`` runs
    after ``setup`` in a fresh directory and exits ``expect``; stops the generation unless there is exactly one."""
    with fresh_directory(model=model) as where:
        for step in setup:
            run(step, where)
        text = run(command, where, stream="stderr", expect=expect)
    found = [line for line in text.splitlines() if line.startswith(starts)]
    if len(found) != 1:
        raise SystemExit(f"docs: `{command}` printed {len(found)} lines starting {starts!r}, the page shows one:\n"
                         + text)
    return found[0]


def _cell(text: str) -> str:
    """Text as one Markdown table cell in code: bars escaped, backticks kept by a longer fence."""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text.replace('|', chr(92) + '|')}{pad}{fence}"


def error_table(columns: Sequence[str],
                rows: Sequence[tuple[Sequence[str], str | Sequence[str], dict[str, Any]]]) -> None:
    """A table of bad inputs, its last column what each prints: ``rows`` are (the cells before it, the
    command or several (their lines joined by " / "), keywords for :func:`error_line`: ``setup``,
    ``expect``, ``starts``). The cells before it are the page's words (what the input is; what happened
    before, a record); the last one is run here, each command in a fresh directory after ``setup``."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for cells, commands, options in rows:
        lines = [error_line(c, **options) for c in ([commands] if isinstance(commands, str) else commands)]
        print("| " + " | ".join([*cells, " / ".join(_cell(line) for line in lines)]) + " |")


def error_text(command: str, **options: Any) -> None:
    """The line :func:`error_line` finds, as a paragraph in code."""
    print(f"`{error_line(command, **options)}`")


def make_file(call: str, name: str, *, gzipped: bool = False) -> str:
    """A shell command that writes the JSON document ``call`` returns (Python on the tests' generators of
    hostile inputs, ``tests/hostile.py``) to ``name``, compact, gzipped when asked."""
    opener = "gzip.open(n, 'wt')" if gzipped else "open(n, 'w')"
    code = (f"import gzip, json; from tests.hostile import *; n = {name!r}; "
            f"f = {opener}; json.dump({call}, f, separators=(',', ':')); f.close()")
    return f"python -c {shlex.quote(code)}"


def _tile_mean(vector: Any, tiles: int) -> float:
    """The mean over tiles of a ground-truth TileVector: a dense list or ``{"runs": [[first, stop, value]]}``."""
    if isinstance(vector, dict):
        return sum((stop - first) * value for first, stop, value in vector["runs"]) / tiles
    return float(sum(vector)) / tiles


def _preset_label(name: str, spec: Any) -> str:
    if spec.kind == "cnn":
        return (f"{name} ({spec.layers} blocks, w{spec.hidden}, {spec.seq}px, b{spec.batch}, "
                f"{spec.vocab} classes)")
    return f"{name} ({spec.layers} layers, h{spec.hidden}, s{spec.seq}, b{spec.batch}, V{spec.vocab})"


def preset_table(names: Sequence[str]) -> None:
    """The presets' sizes at scale 1, each generated here as ``popliner synth`` generates it (in memory)."""
    sys.path.insert(0, str(ROOT))
    from popliner.synth import preset_spec
    from popliner.synth.document import _build  # the document and its summary at once, as write_profile has them

    print("| preset | mode | tiles | ops | programs | steps | variables | classes | IPUs | mean tile KiB "
          "| worst tile KiB | code/state/control/exchange KiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for mode in ("inference", "training"):
            spec = preset_spec(name, mode)
            doc, summary = _build(spec)
            tiles = int(doc["target"]["tilesPerIpu"])
            truth = doc["tileMemory"]
            total = [a + b for a, b in zip(truth["alwaysLive"], truth["notAlwaysLivePeak"])]
            mean = sum(total) / tiles
            kinds = ("vertexCode", "vertexInstanceState", "controlCode", "internalExchangeCode")
            parts = " / ".join(f"{_tile_mean(truth['categories'][k], tiles) / 1024:.0f}" for k in kinds)
            label = f"| {_preset_label(name, spec)} |" if mode == "inference" else "| |"
            print(f"{label} {mode} | {tiles} | {summary.operations:,} | {summary.programs:,} | "
                  f"{summary.steps:,} | {summary.variables:,} | {summary.classes:,} | "
                  f"{mean / doc['target']['bytesPerTile']:.2f} | {mean / 1024:,.0f} | {max(total) / 1024:,.0f} | "
                  f"{parts} |")
