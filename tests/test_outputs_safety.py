"""Issue 12: output errors, non-regular files, signals, exit codes and one-line messages.

Every OS error here is produced for real (a read-only mount, an immutable
folder, /sys, /dev/full, RLIMIT_FSIZE, a folder that is not writable for an
unprivileged user), not by mocking. We run as root in CI, where permission
bits are ignored, so each cause uses a mechanism that also holds for root;
the ones that need a privilege the machine lacks are skipped, saying why.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_INTERNAL, EXIT_NO_SPLIT
from tests.helpers import FIXTURES

REPO = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
BERT_TRAIN = FIXTURES / "bert-tiny-training.json"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("MPLBACKEND", "Agg")
    return e


def popliner(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess (signals, rlimits, stdout that is a device)."""
    return subprocess.run([sys.executable, "-m", "popliner", "-q", *args], capture_output=True, text=True,
                          env=env(), timeout=120, **kw)


def one_error_line(stderr: str, *needles: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("popliner: error: "), stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp") or p.name.startswith("."))


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cfg")
    cfg = folder / "pipeline.yaml"
    r = popliner(str(TINY), "--solve", "--num-ipus", "2", "--config-out", str(cfg))
    assert r.returncode == 0, r.stderr
    return cfg


@pytest.fixture(scope="module")
def review(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A review workbook with a split, for ``config-from``."""
    book = tmp_path_factory.mktemp("review") / "review.xlsx"
    r = popliner(str(TINY), "--solve", "--num-ipus", "2", "-o", str(book))
    assert r.returncode == 0, r.stderr
    return book


# Every output option of every command, as (suffix it wants, argv builder for an output path, given the
# pipeline config and the review workbook). `export -o` needs the pva double: its writes go through the
# same fileio calls, and the signal test below runs it for real.
OUTPUTS: dict[str, tuple[str, Callable[[str, Path, Path], list[str]]]] = {
    "-o csv": (".csv", lambda p, cfg, book: [str(TINY), "-o", p]),
    "-o xlsx": (".xlsx", lambda p, cfg, book: [str(TINY), "-o", p]),
    "--plot": (".png", lambda p, cfg, book: [str(TINY), "--plot", p]),
    "--config-out": (".yaml", lambda p, cfg, book: [str(TINY), "--solve", "--num-ipus", "2", "--config-out", p]),
    "--junit": (".xml", lambda p, cfg, book: ["check", str(cfg), "--profile", str(TINY), "--junit", p]),
    "--trace": (".json", lambda p, cfg, book: ["simulate", str(cfg), "--trace", p]),
    "simulate --plot": (".png", lambda p, cfg, book: ["simulate", str(cfg), "--plot", p]),
    "synth -o": (".json", lambda p, cfg, book: ["synth", "--layers", "2", "--tiles", "8", "-o", p]),
    "--ipu-config-out": (".json", lambda p, cfg, book: [str(TINY), "--solve", "--num-ipus", "2",
                                                        "--head-placement", "last", "--ipu-config-out", p]),
    "--report": (".html", lambda p, cfg, book: [str(TINY), "--solve", "--num-ipus", "2", "--report", p]),
    "report -o": (".html", lambda p, cfg, book: ["report", str(cfg), "--profile", str(TINY), "-o", p]),
    "check -o": (".txt", lambda p, cfg, book: ["check", str(cfg), "--profile", str(TINY), "-o", p]),
    "simulate -o": (".txt", lambda p, cfg, book: ["simulate", str(cfg), "-o", p]),
    "config-from -o": (".yaml", lambda p, cfg, book: ["config-from", str(book), "-o", p]),
}


def _halves(first: int) -> list[Any]:
    """Every output option, every other one (from index ``first``) in the main suite and the rest in the slow
    step (suite time: a process or two each). The tests below start at 0 or 1 in turn, so that each option
    meets each kind of refusal in CI and every option runs in the main suite."""
    return [name if k % 2 == first else pytest.param(name, marks=pytest.mark.slow) for k, name in enumerate(OUTPUTS)]


def _can_unshare_mount() -> bool:
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return r.returncode == 0


def _readonly_mount_run(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run popliner in a private mount namespace where ``folder`` is a read-only tmpfs (root or not)."""
    inner = " ".join([f"mount -t tmpfs -o ro tmpfs {folder} &&", "exec", sys.executable, "-m", "popliner", "-q",
                      *(f"'{a}'" for a in argv)])
    return subprocess.run(["unshare", "-rm", "sh", "-c", inner], capture_output=True, text=True, env=env(),
                          timeout=120)


@pytest.mark.skipif(not _can_unshare_mount(), reason="needs unshare -rm (user+mount namespaces)")
@pytest.mark.parametrize("option", _halves(1))
def test_read_only_file_system(option: str, tmp_path: Path, config: Path, review: Path) -> None:
    suffix, argv = OUTPUTS[option]
    ro = tmp_path / "ro"
    ro.mkdir()
    out = ro / f"out{suffix}"
    r = _readonly_mount_run(ro, argv(str(out), config, review))
    assert r.returncode == EXIT_BAD_INPUT, r.stderr
    one_error_line(r.stderr, str(out), "read-only file system", "write somewhere else")
    assert r.stdout == ""  # checked before any output


@pytest.mark.parametrize("option", _halves(0))
def test_permission_denied_under_sys(option: str, config: Path, review: Path) -> None:
    """/sys refuses new files to everyone, root included."""
    suffix, argv = OUTPUTS[option]
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no /sys")
    out = f"/sys/kernel/popliner-out{suffix}"
    r = popliner(*argv(out, config, review))
    assert r.returncode == EXIT_BAD_INPUT, r.stderr
    one_error_line(r.stderr, out, "permission denied")
    assert r.stdout == ""


def _as_nobody() -> list[str]:
    """A command prefix that runs as user nobody (uid 65534), or nothing when we are not root.

    Root ignores permission bits, so the child drops to nobody. The Python of
    this machine may live under a private home (/root is 0700): the child keeps
    CAP_DAC_READ_SEARCH, which lets it read and traverse anything but grants no
    write access, so the folder below still refuses it as it would any user.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root needs setpriv (util-linux) to test a folder without write permission")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search", "--"]


def test_permission_denied_for_an_unprivileged_user(tmp_path: Path) -> None:
    """A folder without write permission (0555), as a user who does not own it; runs as root too."""
    # pytest's tmp_path sits under a 0700 folder, and click checks the profile with access(), which
    # ignores capabilities: the files nobody reads live in a folder of /tmp open to all.
    shared = Path(tempfile.mkdtemp(prefix="popliner-perm-"))
    try:
        shared.chmod(0o755)
        locked = shared / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        readable = shared / "tiny.json"
        shutil.copy(TINY, readable)
        readable.chmod(0o644)
        out = locked / "x.csv"
        e = env()
        e["POPLINER_CACHE_DIR"] = str(tmp_path / "no-cache")
        argv = [*_as_nobody(), sys.executable, "-m", "popliner", "-q"]
        # First show that this user can run popliner at all, so the refusal below is about the folder.
        ok = subprocess.run([*argv, str(readable), "-o", "-", "--no-cache"], capture_output=True, text=True,
                            env=e, timeout=120)
        assert ok.returncode == 0 and ok.stdout.startswith("Layer,"), ok.stderr
        r = subprocess.run([*argv, str(readable), "-o", str(out), "--no-cache"], capture_output=True, text=True,
                           env=e, timeout=120)
        assert r.returncode == EXIT_BAD_INPUT, r.stderr
        one_error_line(r.stderr, str(out), "permission denied", "write somewhere else")
        assert r.stdout == ""
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(shared)


def test_immutable_folder(tmp_path: Path) -> None:
    """chattr +i stops root too (EPERM)."""
    folder = tmp_path / "imm"
    folder.mkdir()
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
        pytest.skip("chattr +i not possible here")
    try:
        r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", str(folder / "x.csv")])
        assert r.exit_code == EXIT_BAD_INPUT
        one_error_line(r.stderr, "x.csv", "not permitted")
        assert r.stdout == ""
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("option", _halves(1))
def test_dev_full_and_force_keeps_the_device(option: str, config: Path, review: Path) -> None:
    suffix, argv = OUTPUTS[option]
    before = os.stat("/dev/full")
    for extra in ([], ["--force"]):
        r = popliner(*argv("/dev/full", config, review), *extra)
        assert r.returncode == EXIT_BAD_INPUT, r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert "Traceback" not in r.stderr
        assert lines[-1] == ("popliner: error: /dev/full: no space left on device; "
                             "free some space or write somewhere else")
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_stdout_on_dev_full() -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "popliner", "-q", str(TINY)], stdout=full, stderr=subprocess.PIPE,
                           text=True, env=env(), timeout=120)
    assert r.returncode == EXIT_BAD_INPUT
    one_error_line(r.stderr, "stdout: no space left on device")


def test_stdout_closed() -> None:
    r = subprocess.run([sys.executable, "-m", "popliner", "-q", str(TINY)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, env=env(), timeout=120,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == EXIT_BAD_INPUT
    one_error_line(r.stderr, "stdout: closed")


def test_reader_of_stdout_goes_away_quietly() -> None:
    """`popliner ... | head -1`: no traceback, no message, exit 141 (as if killed by SIGPIPE)."""
    # The table (about 28 kB) would fit in a default 64 kB pipe, so the writer could finish before the
    # reader closes and exit 0; a one-page pipe makes it block, so the reader really goes away first.
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    p = subprocess.Popen([sys.executable, "-m", "popliner", "-q", str(BERT_TRAIN), "--operation-breakdown"],
                         stdout=write_end, stderr=subprocess.PIPE, env=env())
    os.close(write_end)
    assert p.stderr is not None
    with os.fdopen(read_end, "rb", buffering=0) as out:
        assert out.read(1)  # the first byte of the table, then the reader goes away
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141
    assert err == ""


def _limit_file_size(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so write() fails with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("option", ["-o csv", "-o xlsx", "--plot", "synth -o", "--trace"])
def test_disk_full_via_file_size_limit(option: str, tmp_path: Path, config: Path, review: Path) -> None:
    suffix, argv = OUTPUTS[option]
    out = tmp_path / f"out{suffix}"
    r = subprocess.run([sys.executable, "-m", "popliner", "-q", *argv(str(out), config, review)], capture_output=True,
                       text=True, env=env(), preexec_fn=_limit_file_size(100), timeout=120)
    assert r.returncode == EXIT_BAD_INPUT, r.stderr
    line = one_error_line(r.stderr, "file too large")
    # A workbook may be built in temporary files first: when those hit the limit, the message says so.
    assert str(out) in line or (option == "-o xlsx" and "temporary file" in line), line
    assert list(tmp_path.iterdir()) == []


def test_an_os_error_names_a_path_holding_a_colon_once(tmp_path: Path) -> None:
    # The message was once split at the first ": " to find the cause, which a name like this one also holds.
    out = tmp_path / "run: 1.csv"
    r = subprocess.run([sys.executable, "-m", "popliner", "-q", str(TINY), "-o", str(out)], capture_output=True,
                       text=True, env=env(), preexec_fn=_limit_file_size(100), timeout=120)
    assert r.returncode == EXIT_BAD_INPUT, r.stderr
    line = one_error_line(r.stderr, "file too large")
    assert line == f"popliner: error: {out}: file too large for the file system or the file size limit (ulimit -f); " \
                   "raise the limit or write somewhere else", line


def test_is_a_directory_and_name_too_long(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["-q", "synth", "-o", str(tmp_path)])
    assert r.exit_code == EXIT_BAD_INPUT
    one_error_line(r.stderr, str(tmp_path), "is a directory")
    long_name = str(tmp_path / ("x" * 300 + ".csv"))
    r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", long_name])
    assert r.exit_code == EXIT_BAD_INPUT
    one_error_line(r.stderr, "file name too long")
    assert r.stdout == ""
    # A long name that the file system takes must not fail because of the temporary name.
    ok = tmp_path / ("y" * 250 + ".csv")
    r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", str(ok)])
    assert r.exit_code == 0, r.stderr
    assert ok.read_text().startswith("Layer,")


# -- never replace anything but a regular file ------------------------------------


def test_fifo_is_written_into(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "popliner", "-q", str(TINY), "-o", str(fifo), "--force"],
                         stderr=subprocess.PIPE, env=env())
    with open(fifo) as f:
        text = f.read()
    assert p.wait(timeout=120) == 0
    assert text.startswith("Layer,")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


def test_block_device_socket_and_directory_are_refused(tmp_path: Path) -> None:
    block = next((str(p) for p in Path("/dev").iterdir() if p.is_block_device()), None)
    cases = [str(tmp_path)] + ([block] if block else [])
    for target in cases:
        r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", target, "--force"])
        assert r.exit_code == EXIT_BAD_INPUT
        one_error_line(r.stderr, target)
    if block:
        assert Path(block).is_block_device()


# Every output to "-" or "/dev/stdout" in turn in the main suite, to the other name in the slow step (suite time).
@pytest.mark.parametrize(("option", "name"), [
    pytest.param(option, name, id=f"{option}-{name}", marks=[] if (k + j) % 2 == 0 else [pytest.mark.slow])
    for k, option in enumerate(OUTPUTS) for j, name in enumerate(["-", "/dev/stdout"])])
def test_stdout_names_work_for_every_output(name: str, option: str, config: Path, review: Path) -> None:
    suffix, argv = OUTPUTS[option]
    args = argv(name, config, review)
    if option in ("--config-out", "--ipu-config-out", "--report"):  # the split JSON has stdout already
        r = popliner(*args)
        assert r.returncode == EXIT_BAD_INPUT
        one_error_line(r.stderr, "would both go to stdout")
        assert r.stdout == ""
        return
    r = subprocess.run([sys.executable, "-m", "popliner", "-q", *args], capture_output=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr
    head = r.stdout[:16]
    # The format comes from the name; "-" has none, so -o - gives CSV (--format picks TSV).
    expected = {".csv": b"Layer,", ".xlsx": b"Layer,", ".png": b"\x89PNG", ".yaml": b"",
                ".xml": b"<?xml", ".json": b"{", ".html": b"<!DOCTYPE", ".txt": b""}[suffix]
    assert head.startswith(expected), head


@pytest.mark.parametrize(("argv", "names"), [
    (["simulate", "CFG", "-o", "-", "--trace", "-"], "-o - and --trace -"),
    (["simulate", "CFG", "-o", "/dev/stdout", "--plot", "-"], "-o - and --plot -"),
    (["check", "CFG", "--profile", "TINY", "-o", "-", "--junit", "/dev/stdout"], "-o - and --junit -"),
    (["TINY", "--solve", "--num-ipus", "2", "--config-out", "-"],
     "the split JSON (--solve) and --config-out -"),
    # With --solve, -o names where the layer table goes (issue 22): not stdout, which the JSON takes.
    (["TINY", "--solve", "--num-ipus", "2", "-o", "-"], "-o - and the split JSON (--solve)"),
    (["TINY", "--solve", "--num-ipus", "2", "--report", "-"], "the split JSON (--solve) and --report -"),
    (["TINY", "--solve", "--num-ipus", "2", "--ipu-config-out", "-"],
     "the split JSON (--solve) and --ipu-config-out -"),
    (["TINY", "-o", "-", "--plot", "-"], "-o - and --plot -"),
    (["TINY", "--layer-breakdown", "--plot", "/dev/stdout"], "the tables and --plot -"),
])
def test_two_outputs_on_stdout_are_refused_before_any_output(argv: list[str], names: str, config: Path) -> None:
    subs = {"TINY": str(TINY), "CFG": str(config)}
    r = popliner(*[subs.get(a, a) for a in argv])
    assert r.returncode == EXIT_BAD_INPUT, r.stderr
    one_error_line(r.stderr, f"{names} would both go to stdout; give all but one of them a file name")
    assert r.stdout == ""


@pytest.mark.parametrize("argv", [["simulate", "CFG", "--trace", "-"], ["check", "CFG", "--profile", "TINY",
                                                                         "--junit", "-"]])
def test_one_file_on_stdout_moves_the_summary_to_stderr(argv: list[str], config: Path) -> None:
    subs = {"TINY": str(TINY), "CFG": str(config)}
    r = popliner(*[subs.get(a, a) for a in argv])
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith(("{", "<?xml")), r.stdout[:40]


# -- signals -----------------------------------------------------------------------


def _signal_run(argv: list[str], folder: Path, sig: int, rng: random.Random, finish_s: float) -> int:
    """Start the CLI, wait for its first log line (it is running), signal it at a random later moment."""
    p = subprocess.Popen([sys.executable, "-m", "popliner", "-vv", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env(), cwd=folder)
    assert p.stderr is not None
    first = p.stderr.readline().decode()
    assert "pid" in first, first
    time.sleep(rng.uniform(0.0, 0.8 * finish_s))  # mostly before the end, at a random point
    p.send_signal(sig)
    code, text = _finish(p, 120)
    text = first + text
    assert "Traceback" not in text, text
    assert code in (0, 128 + sig), (code, text)
    if code:
        errors = [ln for ln in text.splitlines() if ln.startswith("popliner: error: ")]
        assert errors == [f"popliner: error: interrupted; no partial output file was left behind "
                          f"({'Ctrl-C' if sig == signal.SIGINT else signal.Signals(sig).name})"], text
    return code


def _timed(argv: list[str], folder: Path) -> float:
    """Seconds from the first log line to the end of a run."""
    p = subprocess.Popen([sys.executable, "-m", "popliner", "-vv", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env(), cwd=folder)
    assert p.stderr is not None
    p.stderr.readline()
    started = time.perf_counter()
    code, err = _finish(p, 300)
    assert code == 0, err
    return time.perf_counter() - started


def _finish(p: subprocess.Popen[bytes], seconds: float) -> tuple[int, str]:
    """The run's exit code and the rest of its stderr; a run still going after ``seconds`` is killed and fails
    the test (a hang must not hold the suite)."""
    try:
        _, err = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"popliner {p.args[3:]} still running after {seconds} s: {err.decode(errors='replace')[-2000:]}")
    return p.returncode, err.decode(errors="replace")


SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


@pytest.mark.parametrize("what", ["synth", *(pytest.param(w, marks=pytest.mark.slow) for w in ("workbook", "export"))])
def test_signals_at_random_points_leave_nothing(what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(f"signals-{what}")
    folder = tmp_path / "run"
    folder.mkdir()
    out = {"synth": "out.json.gz", "workbook": "out.xlsx", "export": "out.json"}[what]
    if what == "synth":
        argv = ["synth", "--preset", "bert-base", "-o", out, "--force"]
    elif what == "workbook":
        argv = [str(BERT_TRAIN), "-o", out, "--force", "--no-cache"]
    else:
        argv = _export_argv(tmp_path, out, monkeypatch)
    elapsed = _timed(argv, folder)
    (folder / out).unlink()
    interrupted = 0
    for k in range(4):
        sig = SIGNALS[k % len(SIGNALS)]
        code = _signal_run(argv, folder, sig, rng, elapsed)
        names = sorted(os.listdir(folder))
        if code:
            interrupted += 1
            # A signal that lands while the finished file is renamed into place is raised just after it:
            # the run then exits 128+n with the complete file (never a partial or temporary one).
            assert names in ([], [out]), names
        else:
            assert names == [out]
        if names:
            _assert_complete(folder / out)
            (folder / out).unlink()
    assert interrupted >= 2


def _assert_complete(path: Path) -> None:
    """The output reads back whole: a gzip stream of one JSON document, a workbook, or a JSON document."""
    if path.name.endswith(".gz"):
        import gzip
        json.loads(gzip.decompress(path.read_bytes()))
    elif path.suffix == ".xlsx":
        import openpyxl
        openpyxl.load_workbook(path, read_only=True).close()
    else:
        json.loads(path.read_bytes())


def _export_argv(tmp_path: Path, out: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A `pva` module on the path that is the in-test double of a mid-sized synthetic profile."""
    doc = tmp_path / "doc.json"
    r = popliner("synth", "--preset", "bert-base", "--scale", "0.25", "-o", str(doc))
    assert r.returncode == 0, r.stderr
    mod = tmp_path / "pvamod"
    mod.mkdir()
    (mod / "pva.py").write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(REPO / 'tests')!r})\n"
        "from pva_double import make_pva\n"
        f"_double = make_pva(json.load(open({str(doc)!r})))\n"
        "globals().update({k: v for k, v in vars(_double).items() if not k.startswith('__')})\n")
    pop, cbor = tmp_path / "profile.pop", tmp_path / "debug.cbor"
    pop.write_bytes(b"SQLite format 3\x00")
    cbor.write_bytes(b"\xa0")
    monkeypatch.setenv("PYTHONPATH", str(mod) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return ["export", str(pop), str(cbor), "-o", out, "--force"]


# -- exit codes --------------------------------------------------------------------


def test_check_over_budget_is_1_and_a_crash_is_70(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = CliRunner().invoke(cli, ["-q", "check", str(config), "--profile", str(TINY), "--budget", "0.1"])
    assert r.exit_code == EXIT_DOES_NOT_FIT
    import popliner.checkreport

    def crash(*a: Any, **k: Any) -> None:
        raise ZeroDivisionError("division by zero")

    # The command's one door to the check (popliner.checkreport.check_report) calls check_config.
    monkeypatch.setattr(popliner.checkreport, "check_config", crash)
    r = CliRunner().invoke(cli, ["-q", "check", str(config), "--profile", str(TINY)])
    assert r.exit_code == EXIT_INTERNAL
    line = one_error_line(r.stderr, "internal error (a bug in popliner", "ZeroDivisionError", "-v")
    assert "report" in line
    r = CliRunner().invoke(cli, ["-v", "check", str(config), "--profile", str(TINY)])
    assert r.exit_code == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in r.stderr and 'raise ZeroDivisionError("division by zero")' in r.stderr


def test_no_fitting_split_is_3() -> None:
    r = CliRunner().invoke(cli, ["-q", str(TINY), "--solve", "--num-ipus", "1", "--mem-per-tile", "10"])
    assert r.exit_code == EXIT_NO_SPLIT
    assert json.loads(r.stdout)


@pytest.mark.parametrize(("argv", "needle"), [
    (["TINY", "--num-ipus", "0"], "--num-ipus"),
    (["simulate", "CFG", "-G", "0"], "-G"),
    (["DIR"], "is a directory"),
    (["TINY", "--no-such-option"], "--no-such-option"),
    (["TINY", "--plot", "out.jpg"], "out.jpg: plot file names end in .png or .svg"),
    (["TINY", "--solve", "--ipu-config-out", "ipu.txt"], "ipu.txt: IPU config file names end in .json"),
    (["TINY", "--solve", "--config-out", "p.json"], "p.json: pipeline config file names end in .yaml or .yml"),
])
def test_usage_errors_are_one_line_and_2(argv: list[str], needle: str, config: Path, tmp_path: Path) -> None:
    subs = {"TINY": str(TINY), "CFG": str(config), "DIR": str(tmp_path)}
    r = CliRunner().invoke(cli, [subs.get(a, a) for a in argv])
    assert r.exit_code == EXIT_BAD_INPUT
    one_error_line(r.stderr, needle)
    assert r.stdout == ""  # nothing written before the failure


def test_readme_exit_code_table_matches_the_constants() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text.split("<!-- exit-codes:start -->")[1].split("<!-- exit-codes:end -->")[0]
    codes = [row.split("|")[1].strip() for row in table.strip().splitlines()[2:]]
    from popliner.cli import EXIT_BROKEN_PIPE

    expected = [str(c) for c in (0, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT, EXIT_NO_SPLIT, EXIT_INTERNAL)]
    expected += [f"{128 + signal.SIGINT} / {128 + signal.SIGTERM} / {128 + signal.SIGHUP}", str(EXIT_BROKEN_PIPE)]
    assert codes == expected


@pytest.mark.parametrize(("line", "tag"), [
    ('profile: !!python/object/apply:os.system ["echo hi"]', "!!python/object/apply:os.system"),
    ("profile: !!python/name:os.system", "!!python/name:os.system"),
    ("profile: !custom 3", "!custom"),
])
def test_yaml_tags_are_named(line: str, tag: str, tmp_path: Path) -> None:
    cfg = tmp_path / "tagged.yaml"
    cfg.write_text(f"version: 1\n{line}\n")
    r = CliRunner().invoke(cli, ["-q", "simulate", str(cfg)])
    assert r.exit_code == EXIT_BAD_INPUT
    one_error_line(r.stderr, f"{cfg}: unsupported YAML tag {tag} at line 2")


# -- issue 22, points 6, 7 and 12: symbolic links, outputs that clash with inputs or with each other -----------


def _listing(*folders: Path) -> dict[str, list[str]]:
    return {str(f): sorted(os.listdir(f)) for f in folders}


@pytest.mark.parametrize("option", list(OUTPUTS))
def test_a_symlink_is_never_written_through(option: str, tmp_path: Path, config: Path, review: Path) -> None:
    suffix, argv = OUTPUTS[option]
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    link = here / f"out{suffix}"
    target = elsewhere / f"target{suffix}"
    # A dangling link: without --force its target must not be created (before: it was, in another folder).
    link.symlink_to(target)
    r = CliRunner().invoke(cli, ["-q", *argv(str(link), config, review)])
    assert r.exit_code == EXIT_BAD_INPUT, r.stderr
    one_error_line(r.stderr, str(link), "symbolic link", "--force")
    assert not target.exists() and link.is_symlink()
    assert _listing(here, elsewhere) == {str(here): [link.name], str(elsewhere): []}
    # A link to a file: with --force the link itself is replaced by the output; the file is left alone.
    target.write_text("keep me")
    r = CliRunner().invoke(cli, ["-q", *argv(str(link), config, review), "--force"])
    assert r.exit_code == 0, r.stderr
    assert not link.is_symlink() and link.is_file() and link.stat().st_size > 0
    assert target.read_text() == "keep me"
    assert _listing(here, elsewhere) == {str(here): [link.name], str(elsewhere): [target.name]}  # no temp file


def test_a_link_to_dev_null_is_neither_written_through_nor_replaced(tmp_path: Path) -> None:
    # Since issue 39 a link to a device is not replaced with --force either (as root, -o /dev/stdin --force
    # replaced the system's link): the user names the device itself, or a file.
    to_null = tmp_path / "null"
    to_null.symlink_to("/dev/null")
    r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", str(to_null)])
    assert r.exit_code == EXIT_BAD_INPUT and "symbolic link" in r.stderr
    r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", str(to_null), "--force"])
    assert r.exit_code == EXIT_BAD_INPUT and "symbolic link to a character device" in r.stderr
    assert to_null.is_symlink() and os.readlink(to_null) == "/dev/null"
    assert Path("/dev/null").is_char_device()


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("old")
    real.chmod(0o640)
    r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", str(real), "--force"])
    assert r.exit_code == 0, r.stderr
    assert real.read_text().startswith("Layer,") and stat.S_IMODE(real.stat().st_mode) == 0o640


def _clash_cases(folder: Path, profile: Path, cfg: Path, book: Path) -> list[tuple[list[str], str]]:
    png, csv = str(folder / "x.png"), str(folder / "t.csv")
    hard = folder / "hard.json"
    if not hard.exists():
        os.link(profile, hard)
    return [
        ([str(profile), "-o", png, "--plot", png], "name the same file"),
        ([str(profile), "--solve", "--num-ipus", "2", "--plot", png, "-o", str(folder / "x-split.png")],
         "name the same file"),
        ([str(profile), "--solve", "--num-ipus", "2", "--config-out", str(folder / "r.yaml"), "--report",
          str(folder / "r.yaml")], "name the same file"),
        ([str(profile), "-o", str(profile)], "is the input PROFILE"),
        ([str(profile), "-o", str(folder / "." / profile.name)], "is the input PROFILE"),
        ([str(profile), "-o", str(hard)], "is the input PROFILE"),  # another name of the same file
        ([str(profile), "--solve", "--num-ipus", "2", "--config-out", str(profile)], "is the input PROFILE"),
        (["check", str(cfg), "--profile", str(profile), "-o", csv, "--junit", csv], "name the same file"),
        (["check", str(cfg), "--profile", str(profile), "-o", str(cfg)], "is the input CONFIG"),
        (["check", str(cfg), "--profile", str(profile), "--junit", str(profile)], "is the input --profile"),
        (["simulate", str(cfg), "-o", csv, "--trace", csv], "name the same file"),
        (["simulate", str(cfg), "--trace", str(cfg)], "is the input PIPELINE.yaml"),
        (["report", str(cfg), "--profile", str(profile), "-o", str(profile)], "is the input --profile"),
        (["config-from", str(book), "--profile", str(profile), "-o", str(book)], "is the input REVIEW.xlsx"),
    ]


def test_outputs_that_clash_are_refused_before_any_work(tmp_path: Path, config: Path, review: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    profile, cfg, book = folder / "in.json", folder / "p.yaml", folder / "r.xlsx"
    shutil.copy(TINY, profile)
    shutil.copy(config, cfg)
    shutil.copy(review, book)
    originals = {p: p.read_bytes() for p in (profile, cfg, book)}
    for argv, needle in _clash_cases(folder, profile, cfg, book):
        before = _listing(folder)
        for force in ([], ["--force"]):  # --force never lets an output replace an input or another output
            r = CliRunner().invoke(cli, ["-q", *argv, *force])
            assert r.exit_code == EXIT_BAD_INPUT, (argv, r.stderr)
            one_error_line(r.stderr, needle)
            assert _listing(folder) == before, argv
            assert all(p.read_bytes() == data for p, data in originals.items()), argv


def test_solve_with_o_writes_the_layer_table(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    r = CliRunner().invoke(cli, [str(TINY), "--solve", "--num-ipus", "2", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["stages"]  # the split JSON still on stdout
    assert out.read_text().startswith("Layer,") and f"wrote {out}" in r.stderr
    plain = CliRunner().invoke(cli, ["-q", str(TINY)])
    assert out.read_text().splitlines() == plain.stdout.splitlines()
