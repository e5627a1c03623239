"""The README stays true: its Python example runs, every command is documented, links resolve."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from popliner.cli import SUBCOMMANDS, cli
from tests.helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _run_readme_example(index: int) -> None:
    code = re.findall(r"```python\n(.*?)```", README, flags=re.S)[index]
    profile = FIXTURES / "bert-base-training.json.gz"
    exec(compile(code.replace('"model.json.gz"', repr(str(profile))), "README.md", "exec"), {})  # noqa: S102


def test_readme_python_example_runs(capsys):
    _run_readme_example(0)
    out = capsys.readouterr().out
    assert out.startswith("OPTIMAL ")


def test_readme_notebook_example_prints_what_the_readme_shows(capsys):
    _run_readme_example(1)
    out = capsys.readouterr().out
    blocks = re.findall(r"On the bundled BERT profile this prints:\n\n```\n(.*?)```", README, flags=re.S)
    assert blocks == [out]


def test_every_command_has_help_and_is_in_the_readme():
    for name in SUBCOMMANDS:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.stdout, name
        if name != "analyse":  # the default command is `popliner PROFILE`
            assert f"popliner {name}" in README, name


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_readme_lists_every_main_option():
    result = CliRunner().invoke(cli, ["analyse", "--help"])
    options = set(re.findall(r"(--[a-z0-9-]+)", result.stdout)) - {"--help"}
    missing = sorted(o for o in options if o not in README)
    assert missing == []
