"""No unsafe loading anywhere; an interrupted run leaves no partial file and says so."""

from __future__ import annotations

import ast
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.cli import cli, signals_interrupt
from popliner.errors import Interrupted
from popliner.interrupts import uninterrupted

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
    from popliner.writers import tables

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
    from popliner.writers import tables

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


# -- where an interrupt may land (issue 12 point 3) ---------------------------------------


def _wait_for_the_handler(seconds: float) -> None:
    """Python code to run for a while: signal handlers run between its bytecodes."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_signal_during_an_import_waits_for_the_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A C extension's init may not survive an exception from its own imports (orjson: SIGSEGV)."""
    (tmp_path / "slow_module_under_signal.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "end = time.monotonic() + 0.3\n"
        "while time.monotonic() < end:\n"
        "    pass\n"
        "FINISHED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Interrupted) as info, signals_interrupt():
        import slow_module_under_signal  # noqa: F401
        _wait_for_the_handler(2.0)
    assert info.value.signum == signal.SIGTERM
    assert sys.modules["slow_module_under_signal"].FINISHED
    # Raised in the code after the import (the waiting signal is retried on a short timer), not in it.
    frames = [entry.name for entry in info.traceback]
    assert "_wait_for_the_handler" in frames and "<module>" not in frames, frames
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # the old handlers are back


def test_a_signal_during_an_uninterrupted_step_waits_for_it() -> None:
    reached = False
    with pytest.raises(Interrupted), signals_interrupt():
        with uninterrupted():
            os.kill(os.getpid(), signal.SIGHUP)
            _wait_for_the_handler(0.2)
            reached = True
        _wait_for_the_handler(2.0)
    assert reached
