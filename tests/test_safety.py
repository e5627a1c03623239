"""No unsafe loading anywhere; an interrupted run leaves no partial file and says so."""

from __future__ import annotations

import ast
from pathlib import Path

from click.testing import CliRunner

from popliner.cli import cli

PACKAGE = Path(__file__).resolve().parent.parent / "popliner"
TINY = PACKAGE.parent / "fixtures" / "profiles" / "tiny.json"


def _calls(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                names.append(f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                names.append(f"{f.value.id}.{f.attr}")
    return names


def test_no_pickle_eval_or_unsafe_yaml():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                   for alias in node.names} | {node.module for node in ast.walk(tree)
                                               if isinstance(node, ast.ImportFrom) and node.module}
        calls = set(_calls(tree))
        bad = ({"pickle", "marshal", "shelve", "dill"} & imports) | ({"eval", "exec", "yaml.load",
                                                                    "yaml.unsafe_load"} & calls)
        if bad:
            offenders.append(f"{path.relative_to(PACKAGE.parent)}: {sorted(bad)}")
    assert offenders == []


def test_ctrl_c_while_writing_leaves_no_file(tmp_path, monkeypatch):
    from popliner.outputs import tables

    def interrupted(grids, stream, fmt="csv"):
        stream.write("Layer,half a row")
        raise KeyboardInterrupt

    monkeypatch.setattr(tables, "write_grids", interrupted)
    out = tmp_path / "layers.csv"
    result = CliRunner().invoke(cli, [str(TINY), "-o", str(out)])
    assert result.exit_code == 130
    assert "interrupted; no partial output file was left behind" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_keeps_the_users_existing_file(tmp_path, monkeypatch):
    from popliner.outputs import tables

    def interrupted(grids, stream, fmt="csv"):
        stream.write("partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(tables, "write_grids", interrupted)
    out = tmp_path / "layers.csv"
    out.write_text("the user's data")
    result = CliRunner().invoke(cli, [str(TINY), "-o", str(out), "--force"])
    assert result.exit_code == 130
    assert out.read_text() == "the user's data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layers.csv"]
