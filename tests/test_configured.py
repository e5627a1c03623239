"""check, report and simulate --profile read a profile the same way for a config (cli/configured.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.cli.configured import budget_for_config
from popliner.config.yaml_io import read_config
from tests.helpers import FIXTURES

TINY = FIXTURES / "tiny.json"


def invoke(*args: object, ok: tuple[int, ...] = (0,)) -> tuple[str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code in ok, (result.exit_code, result.stderr)
    return result.stdout, result.stderr


@pytest.fixture()
def made(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A config solved from tiny.json, and a copy of the profile whose content differs by one byte per tile."""
    profile = tmp_path / "tiny.json"
    shutil.copy(TINY, profile)
    config = tmp_path / "pipeline.yaml"
    invoke(profile, "--solve", "--num-ipus", "2", "--mem-per-tile", "1000", "--config-out", config)
    other = tmp_path / "other.json"
    other.write_text(TINY.read_text().replace('"bytesPerTile": 1000', '"bytesPerTile": 1001'))
    return profile, config, other


@pytest.mark.parametrize("command", [("check",), ("simulate", "--json"), ("report", "-o", "r.html")])
def test_each_command_warns_once_about_another_profile(made, command, tmp_path, monkeypatch) -> None:
    profile, config, other = made
    monkeypatch.chdir(tmp_path)
    _, err = invoke(command[0], config, "--profile", profile, *command[1:])
    assert "differs from the profile" not in err
    again = ("-f",) if command[0] == "report" else ()  # the report file is there from the first run
    _, err = invoke(command[0], config, "--profile", other, *command[1:], *again, ok=(0, 1))
    lines = [line for line in err.splitlines() if "differs from the profile the config was written for" in line]
    assert len(lines) == 1 and str(other) in lines[0]


def test_budget_is_the_configs_unless_a_fraction_is_given(made) -> None:
    from popliner.analysis import load_analysis

    profile, config, _ = made
    cfg = read_config(config)
    analysis = load_analysis(str(profile))
    assert budget_for_config(analysis, cfg, None) == cfg.effective_budget
    assert budget_for_config(analysis, cfg, 0.5) == 500  # half of tiny's 1,000-byte tile
