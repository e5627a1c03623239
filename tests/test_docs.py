"""The README stays true: its Python example runs, every command is documented, links resolve."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
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
    blocks = re.findall(r"On the bundled BERT profile this prints:\n\n<!-- \[\[\[cog.*?\]\]\] -->\n```\n(.*?)```",
                        README, flags=re.S)
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


def test_the_reference_lists_every_option_of_every_command():
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert "docs/reference.md" in README
    for name in SUBCOMMANDS:
        result = CliRunner().invoke(cli, [name, "--help"])
        options = set(re.findall(r"(--[a-z0-9-]+)", result.stdout))
        missing = sorted(o for o in options if o not in reference)
        assert missing == [], name


def _check(page: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "docs.py"), "--check", str(page)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow  # a long case (about 2.5 s)
def test_the_docs_check_fails_on_a_changed_figure(tmp_path):
    """A page whose shown output no longer matches what its command prints fails the check, with a diff."""
    page = tmp_path / "page.md"
    page.write_text("<!-- [[[cog\nfrom docgen import output\n"
                    "output('popliner fixtures/profiles/tiny-training.json --solve --num-ipus 2', stream='stderr',"
                    " lines=slice(7, 14))\n]]] -->\n<!-- [[[end]]] -->\n", encoding="utf-8")
    made = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs.py"), str(page)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert made.returncode == 0, made.stderr
    text = page.read_text(encoding="utf-8")
    table = re.search(r"^  0  \S+\s+\d+\s+(\d+) ", text, flags=re.M)
    assert table is not None, text
    assert _check(page).returncode == 0
    figure = table.group(1)
    page.write_text(text.replace(f" {figure} ", f" {int(figure) + 1} ", 1), encoding="utf-8")
    changed = _check(page)
    assert changed.returncode == 1
    assert "-  0" in changed.stderr and str(int(figure) + 1) in changed.stderr, changed.stderr
