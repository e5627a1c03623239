"""What a person at a terminal sees: the split summary, progress, timings, the cache commands, conventions.

Figures of tiny.json come from fixtures/profiles/tiny.md (worked by hand):
layer 0 as the first stage has its worst tile at 422 bytes, layer 1 at 235,
and both layers as the first stage (the whole model on one IPU) are
452 + 8 (Tensor/w0 control) + 7 (loss control) + 5 (one VC state) = 472 bytes
on tile 0.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from tests.helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
BERT = FIXTURES / "bert-base-training.json.gz"


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    target = tmp_path / "tiny.json"
    shutil.copy(TINY, target)
    return target


def run(*args: object, ok: tuple[int, ...] = (0,)):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code in ok, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


# -- the summary after --solve --------------------------------------------------


def test_summary_says_the_model_fits_on_one_ipu(tiny: Path) -> None:
    result = run(tiny, "--solve", "--num-ipus", "2", "--mem-per-tile", "1000")
    err = result.stderr
    assert "[ (unlayered) 0 | 1 ]" in err and "None" not in err
    assert "the split uses 2 of the 2 IPUs asked for: 2 layers, inference, fits in 1,000 bytes per tile" in err
    # 472 / 1000 bytes, to one decimal.
    assert "fits on ONE IPU (worst tile 472 bytes, 47.2% of the budget)" in err
    assert "more IPUs only buy throughput" in err
    assert "--min-ipus (or --num-ipus 1) keeps it on one IPU" in err
    # stdout is the JSON document only
    doc = json.loads(result.stdout)
    assert doc["layers_per_ipu"] == [1, 1]


def test_summary_says_fewer_ipus_do_not_fit(tiny: Path) -> None:
    err = run(tiny, "--solve", "--num-ipus", "3", "--mem-per-tile", "450").stderr
    assert "the split uses 2 of the 3 IPUs asked for" in err
    assert "2 IPUs is the fewest that fit (no split fits on 1)" in err
    # 472 / 450 = 1.0489: over the budget, and the message says so (it read "1.0x the budget" before).
    assert "not on one: its worst tile would need 472 bytes, 104.9% of the budget" in err


def test_summary_next_steps_are_exact_commands(tiny: Path, tmp_path: Path) -> None:
    err = run(tiny, "--solve", "--num-ipus", "2", "--mem-per-tile", "1000").stderr
    assert f"popliner {tiny} --solve --num-ipus 2 --mem-per-tile 1000 --config-out pipeline.yaml" in err
    assert f"popliner simulate pipeline.yaml --profile {tiny}" in err
    assert f"popliner check pipeline.yaml --profile {tiny}" in err
    cfg = tmp_path / "p.yaml"
    err = run(tiny, "--solve", "--num-ipus", "2", "--config-out", cfg).stderr
    assert f"popliner: wrote {cfg}; next:" in err
    assert f"popliner check {cfg} --profile {tiny}" in err
    # The hinted commands work as printed.
    assert run("check", cfg, "--profile", tiny).exit_code == 0


def test_min_ipus_puts_the_model_on_the_fewest_ipus(tiny: Path) -> None:
    result = run(tiny, "--solve", "--num-ipus", "4", "--mem-per-tile", "1000", "--min-ipus")
    doc = json.loads(result.stdout)
    assert doc["num_ipus_requested"] == 4 and doc["num_ipus_used"] == 1
    assert doc["layers_per_ipu"] == [2]
    assert doc["stages"][0]["worst_tile_bytes"] == 472
    assert "the split uses 1 of the 4 IPUs asked for" in result.stderr
    two = json.loads(run(tiny, "--solve", "--num-ipus", "4", "--mem-per-tile", "450", "--min-ipus").stdout)
    assert [s["worst_tile_bytes"] for s in two["stages"]] == [430, 243]  # tiny.md, + 8 B/tile of copy buffers


def test_min_ipus_needs_solve_and_contradicts_exact(tiny: Path) -> None:
    assert "--min-ipus needs --solve" in run(tiny, "--min-ipus", ok=(2,)).stderr
    assert "contradict" in run(tiny, "--solve", "--min-ipus", "--exact-ipus", ok=(2,)).stderr


def test_quiet_keeps_stderr_empty_and_stdout_the_same(tiny: Path) -> None:
    loud = run(tiny, "--solve", "--num-ipus", "2")
    quiet = run("-q", tiny, "--solve", "--num-ipus", "2")
    assert quiet.stderr == ""
    assert quiet.stdout == loud.stdout


def test_verbose_adds_a_timing_breakdown(tiny: Path) -> None:
    plain = run(tiny, "--solve", "--num-ipus", "2", "--no-cache").stderr
    assert "time per step" not in plain
    err = run("-v", tiny, "--solve", "--num-ipus", "2", "--no-cache").stderr
    block = err.split("popliner: time per step:\n", 1)[1]
    steps = [line.split()[0] for line in block.splitlines()]
    for step in ("reading", "parsing", "deriving", "assigning", "building", "solving", "checking"):
        assert step in steps, (step, block)


# -- progress on a terminal only --------------------------------------------------


def _run_in_pty(args: list[str], env: dict[str, str], timeout: float = 120.0,
                size: tuple[int, int] = (30, 100)) -> tuple[int, str, str]:
    """Run popliner with stderr on a pseudo-terminal and stdout on a pipe; return (code, stdout, tty text).

    ``size`` is the terminal's (rows, columns); (0, 0) is a bare pty that reports no size.
    """
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "popliner", *args], stdout=subprocess.PIPE, stderr=follower,
                            stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    out = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=timeout), out, b"".join(chunks).decode(errors="replace")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TERM")}
    env.update(PYTHONPATH=str(ROOT), POPLINER_CACHE_DIR=str(tmp_path / "cache"), TERM="xterm", COLUMNS="100")
    return env


@pytest.mark.parametrize("size", [(30, 100), pytest.param((0, 0), marks=pytest.mark.slow)],
                         ids=["terminal", "bare-pty"])
def test_progress_shows_on_a_terminal_and_not_in_a_pipe(tmp_path: Path, size: tuple[int, int]) -> None:
    args = [str(BERT), "--solve", "--num-ipus", "4", "--no-cache"]
    code, out, tty = _run_in_pty(args, _env(tmp_path), size=size)
    assert code == 0, tty
    # tqdm redraws a line with carriage returns; one per long step.
    assert "\r" in tty
    for step in ("reading", "parsing", "deriving operations", "building range tables", "solving (exact DP)"):
        assert f"popliner: {step}..." in tty, step
    assert json.loads(out)["status"] == "OPTIMAL"  # stdout carries data only
    piped = subprocess.run([sys.executable, "-m", "popliner", *args], capture_output=True, text=True,
                           env=_env(tmp_path), cwd=ROOT, timeout=120)
    assert piped.returncode == 0
    assert "\r" not in piped.stderr and "parsing..." not in piped.stderr
    assert piped.stdout == out


def test_progress_stays_off_in_ci_even_on_a_terminal(tmp_path: Path) -> None:
    env = _env(tmp_path) | {"CI": "true"}
    code, _, tty = _run_in_pty([str(TINY), "--solve", "--num-ipus", "2"], env)
    assert code == 0 and "parsing..." not in tty


# -- the cache commands --------------------------------------------------------------


def test_cache_dir_info_and_clear(tiny: Path, tmp_path: Path) -> None:
    where = tmp_path / "my-cache"
    run(tiny, "--cache-dir", where)
    entries = list(where.iterdir())
    assert len(entries) == 1
    size = entries[0].stat().st_size
    (where / "notes.txt").write_text("not a cache entry")
    info = run("cache", "info", "--cache-dir", where).stdout
    assert f"location: {where}" in info
    assert "entries: 1" in info
    assert f"({size:,} bytes)" in info
    assert f"largest: {entries[0].name}" in info
    assert "notes.txt" not in info
    err = run("cache", "clear", "--cache-dir", where).stderr
    assert "removed 1 cache entry" in err
    assert [p.name for p in where.iterdir()] == ["notes.txt"]  # only cache entries are removed
    assert "entries: 0" in run("cache", "info", "--cache-dir", where).stdout


def test_cache_info_follows_the_environment(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "env-cache"))
    run(tiny)
    assert "entries: 1" in run("cache", "info").stdout
    assert "does not exist yet" in run("cache", "info", "--cache-dir", tmp_path / "none").stdout


def test_check_uses_cache_dir(tiny: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "p.yaml"
    run(tiny, "--solve", "--num-ipus", "2", "--config-out", cfg, "--no-cache")
    run("check", cfg, "--profile", tiny, "--cache-dir", tmp_path / "c2")
    assert len(list((tmp_path / "c2").iterdir())) == 1


# -- conventions ----------------------------------------------------------------------


def _outputs(tiny: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Per command, arguments that write ``-o`` (the last argument is the output file)."""
    cfg = tmp_path / "p.yaml"
    run(tiny, "--solve", "--num-ipus", "2", "--config-out", cfg)
    return {
        "analyse": [str(tiny), "-o"],
        "simulate": ["simulate", str(cfg), "-o"],
        "check": ["check", str(cfg), "--profile", str(tiny), "-o"],
        "synth": ["synth", "--preset", "bert-tiny", "-o"],
    }


@pytest.mark.parametrize("command", ["analyse", "simulate", "check", "synth"])
def test_o_and_f_behave_the_same_everywhere(command: str, tiny: Path, tmp_path: Path) -> None:
    args = _outputs(tiny, tmp_path)[command]
    target = tmp_path / f"{command}.out"
    target.write_text("keep me")
    refused = run(*args, target, ok=(2,))
    assert "file exists; pass --force" in refused.stderr
    assert target.read_text() == "keep me"
    for flag in ("-f", "--force"):
        done = run(*args, target, flag)
        assert done.stdout == "" and target.read_text() != "keep me", command


def test_every_command_spells_force_and_output_the_same() -> None:
    from popliner.cli import SUBCOMMANDS

    for command in SUBCOMMANDS:
        text = run(command, "--help").stdout
        if "--force" in text:
            assert "-f, --force" in text, command
        if "--output" in text:
            assert "-o, --output" in text, command


def test_usage_line_shows_only_accepted_arguments() -> None:
    usage = run("analyse", "--help").stdout.splitlines()[0]
    assert usage.endswith(" analyse [OPTIONS] PROFILE"), usage


def test_format_that_disagrees_with_the_suffix_is_obeyed_with_a_warning(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    err = run(tiny, "-o", out, "--format", "tsv").stderr
    assert "writing TSV tables to" in err and "although its name ends .csv" in err
    assert "\t" in out.read_text()
    err = run(tiny, "-o", tmp_path / "y.xlsx", "--format", "csv").stderr
    assert "--format csv is ignored" in err
    quiet = run(tiny, "-o", tmp_path / "z.tsv").stderr
    assert "although" not in quiet


def test_analyse_is_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "popliner analyse PROFILE" in readme


def test_readme_quick_start_shows_the_real_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = "popliner fixtures/profiles/bert-base-training.json.gz --solve --num-ipus 4"
    assert command in readme
    after = readme.split("what to run next:\n\n", 1)[1]
    shown = after.split("```\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    err = run(*command.split()[1:]).stderr
    # The page shows a first run (no cache yet), its times masked (scripts/docgen.py); the summary is exact.
    start = err.index("[ (unlayered)")
    assert err[start:] == shown[shown.index("[ (unlayered)"):]
    assert err[:start].count("\n") == shown[:shown.index("[ (unlayered)")].count("\n")
