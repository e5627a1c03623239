"""What the commands tell a user: every --help, the synth presets, the next-step hint and the "wrote" lines.

The hints are tested by their consumer: the command a "next:" line suggests is run as printed, in the
directory where the first command ran.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.cli import SUBCOMMANDS, cli
from popliner.synth import preset_names, preset_spec

ROOT = Path(__file__).resolve().parent.parent
TINY_TRAINING = ROOT / "fixtures" / "profiles" / "tiny-training.json"
BERT = ROOT / "fixtures" / "profiles" / "bert-base-training.json.gz"


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", POPLINER_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("COLUMNS", None)
    return env


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "popliner", *args], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300, check=False)


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.stdout


def _commands() -> list[tuple[str, ...]]:
    out = [(name,) for name in SUBCOMMANDS]
    out += [("cache", "info"), ("cache", "clear")]
    return out


def test_the_group_help_shows_every_command_in_its_usage_lines():
    usage = _help().split("Options:")[0]
    for name in SUBCOMMANDS:
        if name != "analyse":  # the default command is `popliner PROFILE`
            assert re.search(rf"^\s+popliner {re.escape(name)}\b", usage, flags=re.M), name
    assert re.search(r"^\s+popliner PROFILE", usage, flags=re.M)


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_every_command_lists_verbosity_and_takes_it_anywhere(command):
    text = _help(*command)
    assert re.search(r"^\s+-v, --verbose\s", text, flags=re.M), text
    assert re.search(r"^\s+-q, --quiet\s", text, flags=re.M), text
    if "--cache-dir" in text:
        assert "$XDG_CACHE_HOME" in re.sub(r"\s+", " ", text)


def test_verbosity_after_the_command_still_works(tmp_path):
    quiet = _run(tmp_path, "cache", "info", "-q", "--cache-dir", str(tmp_path / "c"))
    loud = _run(tmp_path, "check", "-vv", "nothing.yaml", "--profile", str(TINY_TRAINING))
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert loud.returncode == 2 and "popliner: popliner " in loud.stderr  # -vv's first debug line


@pytest.mark.slow  # a long case (about 3 s)
def test_config_from_takes_dash_g(tmp_path):
    made = _run(tmp_path, str(TINY_TRAINING), "-o", "review.xlsx", "--solve", "--num-ipus", "2")
    assert made.returncode == 0, made.stderr
    done = _run(tmp_path, "config-from", "review.xlsx", "-G", "24", "-o", "p.yaml")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^gradient_accumulation: 24$", (tmp_path / "p.yaml").read_text(), flags=re.M)


def test_list_presets_columns_line_up_and_show_the_mode():
    result = CliRunner().invoke(cli, ["synth", "--list-presets"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    header, rows = lines[0].split(), [line.split() for line in lines[1:]]
    assert header[:3] == ["preset", "kind", "mode"] and len(rows) == len(preset_names())
    for line, row in zip(lines[1:], rows):
        assert len(row) == len(header), line
        spec = preset_spec(row[0])
        assert row[1:] == [str(getattr(spec, key)) for key in header[1:]]
    # Each column starts where its heading starts (left-aligned text) or ends where it ends (numbers).
    spans = [[m.span() for m in re.finditer(r"\S+", line)] for line in lines]
    for i, key in enumerate(header):
        edges = {span[i][0] if i < 3 else span[i][1] for span in spans}
        assert len(edges) == 1, (key, edges)


def test_a_preset_calibrated_to_a_training_profile_generates_training():
    assert preset_spec("poptorch-bert-tiny").mode == "training"
    assert preset_spec("poptorch-bert-tiny", "inference").mode == "inference"
    assert {preset_spec(name).mode for name in preset_names() if name != "poptorch-bert-tiny"} == {"inference"}
    result = CliRunner().invoke(cli, ["synth", "--preset", "poptorch-bert-tiny", "--vocab", "512", "--tiles", "16",
                                      "--seq", "32", "--batch", "1", "-o", "-", "--no-var-names"])
    assert result.exit_code == 0
    generator = json.loads(result.stdout)["source"]["generator"]
    assert generator["mode"] == "training" and generator["first_moment"] == "half"  # its training-only setting


def _next_solve_command(stderr: str) -> str:
    hint = stderr.split("popliner: next:\n", 1)[1].splitlines()[0]
    return hint.split("  # ")[0].strip()


@pytest.mark.slow  # a long case (about 6 s)
def test_the_next_hint_after_outputs_runs_as_printed(tmp_path):
    first = _run(tmp_path, str(TINY_TRAINING), "-o", "review.xlsx", "--plot=layers.png", "--solve",
                 "--num-ipus", "2")
    assert first.returncode == 0, first.stderr
    suggested = _next_solve_command(first.stderr)
    assert "review.xlsx" not in suggested and "layers.png" not in suggested, suggested
    words = shlex.split(suggested)
    assert words[0] == "popliner" and words[-2:] == ["--config-out", "pipeline.yaml"]
    second = _run(tmp_path, *words[1:])  # in the same directory, where review.xlsx and the plots now are
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "pipeline.yaml").is_file()


@pytest.mark.slow  # a long case (about 2.5 s)
def test_exit_3_says_it_wrote_the_config(tmp_path):
    result = _run(tmp_path, str(BERT), "--solve", "--num-ipus", "2", "--config-out", "p.yaml")
    assert result.returncode == 3
    assert (tmp_path / "p.yaml").is_file()
    assert re.search(r"^popliner: wrote p\.yaml \(.*over budget\)$", result.stderr, flags=re.M), result.stderr


# Two writers in the main suite, all four in the slow step (main suite time: a simulate run each).
@pytest.mark.parametrize("name", [pytest.param("step.trace.json", marks=pytest.mark.slow),
                                  pytest.param("step.txt", marks=pytest.mark.slow), "step.json", "step.svg"])
def test_simulate_says_what_it_wrote(tmp_path, name):
    made = _run(tmp_path, str(TINY_TRAINING), "--solve", "--num-ipus", "2", "--config-out", "p.yaml")
    assert made.returncode == 0, made.stderr
    result = _run(tmp_path, "simulate", "p.yaml", "--profile", str(TINY_TRAINING), "-o", name)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / name).is_file()
    assert result.stderr.splitlines()[-1] == f"popliner: wrote {name}"
    assert result.stdout == ""


@pytest.mark.parametrize("asked, said", [
    ((), "no recomputation (autoRecomputation is off unless set)"),  # no option: the framework's way
    (("--recompute", "every-layer"), "recompute every-layer as asked"),
    (("--recompute", "every-layer", "--head-placement", "last"), None),  # nothing left to the framework
])
def test_the_planned_as_line_says_what_was_applied(tmp_path, asked, said):
    """Issue 36 point 9: "planned as PopART builds it: ... no recomputation ...; an option you give wins" was
    printed under --recompute every-layer too, and never said what was applied."""
    result = _run(tmp_path, str(TINY_TRAINING), "--solve", "--num-ipus", "2", *asked)
    assert result.returncode == 0, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("popliner: planned as PopART builds it:")]
    if said is None:
        assert lines == [], result.stderr
        return
    (line,) = lines
    assert said in line, line
    if "--recompute" in asked:
        assert "no recomputation" not in line, line


@pytest.mark.slow  # a long case (about 3 s)
def test_simulate_with_a_profile_logs_each_line_once(tmp_path):
    """Issue 36 point 9: `simulate --profile` logged its two loading lines twice."""
    made = _run(tmp_path, str(TINY_TRAINING), "--solve", "--num-ipus", "2", "--config-out", "p.yaml")
    assert made.returncode == 0, made.stderr
    for cache in ("cold", "warm"):
        result = _run(tmp_path, "simulate", "p.yaml", "--profile", str(TINY_TRAINING), "--no-cache"
                      if cache == "cold" else "-v")
        assert result.returncode == 0, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == len(set(lines)), result.stderr
        assert sum(x.startswith("popliner: layers by") for x in lines) == 1, result.stderr
