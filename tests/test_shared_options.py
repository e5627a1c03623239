"""One option block per concept on every command; one budget spelling; exits 1 and 3 as exceptions; one
per-variable first/last-step helper."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner

from popliner.cli import PoplinerFailure, cli, failure_for
from popliner.errors import EXIT_DOES_NOT_FIT, EXIT_NO_SPLIT, DoesNotFitError, InfeasibleSplitError
from tests.helpers import FIXTURES

REPO = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
COMMANDS = ("analyse", "check", "report", "simulate")


def options_of(name: str) -> dict[str, click.Option]:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


@pytest.mark.parametrize(("concept", "on"), [
    ("--no-cache", COMMANDS), ("--cache-dir", COMMANDS), ("--link-bandwidth", ("analyse", "report", "simulate")),
    ("--sync-cycles", ("report", "simulate")), ("--micro-batch-size", ("report", "simulate")),
    ("--budget", ("analyse", "check", "report")), ("--headroom", ("analyse", "check", "report")),
])
def test_each_concept_is_one_option_on_every_command_that_takes_it(concept: str, on: tuple[str, ...]) -> None:
    found = {name: options_of(name).get(concept) for name in COMMANDS}
    assert sorted(n for n, o in found.items() if o is not None) == sorted(on)
    # Same names, type, default and help (--budget's help names each command's own default).
    shapes = {(tuple(o.opts), type(o.type).__name__, str(o.type.to_info_dict()), o.default, o.is_flag,
               o.help if concept != "--budget" else "") for o in found.values() if o is not None}
    assert len(shapes) == 1, shapes


def test_gradient_accumulation_is_G_everywhere() -> None:
    shapes = {name: (tuple(sorted(options_of(name)["-G"].opts)), repr(options_of(name)["-G"].type))
              for name in ("analyse", "report", "simulate")}
    assert set(shapes.values()) == {(("--gradient-accumulation", "-G"), "<IntRange 1<=x<=100000>")}


def run(*args: object, ok: tuple[int, ...] = (0,)) -> Any:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code in ok, (result.exit_code, result.stderr)
    return result


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = tmp_path_factory.mktemp("shared") / "pipeline.yaml"
    run(TINY, "--solve", "--num-ipus", "2", "--config-out", cfg)
    return cfg


def test_headroom_is_budget_one_minus(config: Path) -> None:
    # check: --headroom 0.75 is --budget 0.25 (tiny's tiles hold 1000 bytes: a 250-byte budget).
    by_budget = run("check", config, "--profile", TINY, "--budget", "0.25", ok=(1,))
    by_headroom = run("check", config, "--profile", TINY, "--headroom", "0.75", ok=(1,))
    assert by_budget.stdout == by_headroom.stdout and " 250 " in by_budget.stdout
    # analyse: --budget 0.5 is --headroom 0.5, the split and its figures alike.
    split = [run(TINY, "--solve", "--num-ipus", "2", opt, "0.5").stdout for opt in ("--budget", "--headroom")]
    assert split[0] == split[1] and '"budget_bytes_per_tile": 500,' in split[0]
    both = run("check", config, "--profile", TINY, "--budget", "0.5", "--headroom", "0.5", ok=(2,))
    assert "--budget 0.5 and --headroom 0.5 both set the budget" in both.stderr
    assert "popliner: error:" in run(TINY, "--solve", "--budget", "0.9", "--headroom", "0.1", ok=(2,)).stderr


def test_exits_1_and_3_are_the_library_exceptions() -> None:
    fit = failure_for(DoesNotFitError("2 of 4 IPUs do not fit"))
    none = failure_for(InfeasibleSplitError(""))
    assert isinstance(fit, PoplinerFailure) and isinstance(none, PoplinerFailure)
    assert (fit.exit_code, fit.verdict, none.exit_code, none.verdict) == (EXIT_DOES_NOT_FIT, True, EXIT_NO_SPLIT, True)
    # No command leaves with sys.exit: the one place is the entry point (popliner/cli/__init__.py).
    for path in sorted((REPO / "popliner" / "cli").glob("*.py")):
        if path.name == "__init__.py":
            continue
        calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute) and n.attr == "exit"]
        assert calls == [], path


def test_the_verdict_line_is_a_log_line(config: Path) -> None:
    result = run("check", config, "--profile", TINY, "--budget", "0.25", ok=(1,))
    assert result.stderr.splitlines()[-1] == "popliner: 1 of 2 IPUs do not fit"
    result = run(TINY, "--solve", "--num-ipus", "1", "--mem-per-tile", "10", ok=(3,))
    assert "error:" not in result.stderr


def test_variable_steps_by_hand() -> None:
    from popliner.memory.liveness import variable_steps
    from popliner.profile.loader import load_profile

    profile = load_profile(str(TINY))
    first, last = variable_steps(profile)
    for v, klass in enumerate(profile.variables.klass.tolist()):
        lo, hi = int(profile.class_ptr[klass]), int(profile.class_ptr[klass + 1])
        starts = [int(profile.iv_start[i]) for i in range(lo, hi)]
        ends = [int(profile.iv_end[i]) - 1 for i in range(lo, hi)]
        assert (first[v], last[v]) == ((min(starts), max(ends)) if starts else (-1, -1)), v
    assert first.dtype == np.int64 and (first >= 0).any()
