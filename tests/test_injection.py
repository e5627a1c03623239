"""Issue 22, points 4 and 13: nothing a name can inject into code, XML or a terminal.

Names come from the profile (operation names through ``--layer-name-regex``,
variable names) and from the command line (file names). Before the fix a
layer name with a newline became a live line of Python in the PopTorch
snippet's ``# IPU n:`` comment, a NUL made the snippet unparseable, control
characters made the SVG plots and the JUnit XML unparseable, and ESC/OSC and
bidi overrides reached the terminal raw.
"""

from __future__ import annotations

import ast
import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from popliner.cli import cli
from popliner.config.model import PipelineConfig
from popliner.config.snippets import popart_snippet, poptorch_snippet
from popliner.config.yaml_io import read_config
from popliner.errors import EXIT_BAD_INPUT
from popliner.textsafe import shell_word, shown, shown_lines
from tests.helpers import FIXTURES
from tests.hostile_names import HOSTILE_CHARACTERS, LAYER_0, LAYER_1, LAYER_REGEX, TINY, write_hostile

REPO = Path(__file__).resolve().parent.parent
TINY_TRAINING = FIXTURES / "tiny-training.json"

#: One hostile feature per name, then all of them at once.
HOSTILE_NAMES = [
    "a\nimport os",
    'a"; import os; x = "',
    "a'; import os; x = '",
    "a\\",
    'a\\"',
    'a"""',
    "a\rimport os",
    "a\u2028import os",
    "a\u2029import os",
    "a\x85import os",
    "a\x0cimport os",
    "a\x0bimport os",
    "a\x00b",
    "a\x1b]0;title\x07\x1b[31m",
    "a\u202eevil\u2066x\u2069",
    "a\x7f\x9b",
    "\ufeffa",
    "é 层 😀",
    LAYER_0,
    LAYER_1,
]


def _config(tmp_path: Path, profile: Path, *extra: str) -> PipelineConfig:
    out = tmp_path / f"{profile.stem}.yaml"
    r = CliRunner().invoke(cli, ["-q", str(profile), "--solve", "--num-ipus", "2", "--config-out", str(out), "-f",
                                 *extra])
    assert r.exit_code == 0, r.stderr
    return read_config(out)


def _renamed(cfg: PipelineConfig, names: list[str]) -> PipelineConfig:
    """The same config with its layers renamed, in model order, to ``names`` (cycled, made distinct)."""
    mapping = {old: f"{names[i % len(names)]}{i}" for i, old in enumerate(cfg.model_layers)}
    stages = tuple(dataclasses.replace(s, layers=tuple(mapping[x] for x in s.layers)) for s in cfg.stages)
    return dataclasses.replace(cfg, stages=stages, model_layers=tuple(mapping[x] for x in cfg.model_layers))


def _statements(source: str) -> list[str]:
    """The kind of every statement, nested ones included (a name must add none anywhere)."""
    return [type(node).__name__ for node in ast.walk(ast.parse(source)) if isinstance(node, ast.stmt)]


def _literal_keys(source: str, variable: str) -> list[str]:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == variable:
            return list(ast.literal_eval(node.value).keys())
    raise AssertionError(f"no {variable} in the snippet")


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> list[PipelineConfig]:
    tmp = tmp_path_factory.mktemp("configs")
    return [_config(tmp, TINY), _config(tmp, TINY_TRAINING, "--recompute", "every-layer", "--optimizer-state",
                                         "off-chip")]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n)[:30] for n in HOSTILE_NAMES])
def test_a_name_adds_no_statement_to_the_snippets(configs: list[PipelineConfig], name: str) -> None:
    for cfg in configs:
        plain, hostile = _renamed(cfg, ["layer"]), _renamed(cfg, [name])
        for snippet, table in ((popart_snippet, "PLACEMENT"), (poptorch_snippet, "IPU_OF_LAYER")):
            source = snippet(hostile)
            assert _statements(source) == _statements(snippet(plain)), source
            # The names are carried exactly, as string literals.
            assert _literal_keys(source, table) == [p.name for p in hostile.placements]
            # And the text reads as it parses: no line break or invisible character a reader could miss.
            assert len(source.splitlines()) == len(snippet(plain).splitlines())
            assert all(line.isprintable() for line in source.split("\n"))


@pytest.mark.slow  # a long case (about 5 s)
def test_hostile_profile_end_to_end(tmp_path: Path) -> None:
    """The real run: snippets parse the same as a plain profile's, the SVGs are XML, stderr is escaped."""
    hostile = write_hostile(tmp_path / "hostile.json")
    runs = {}
    for profile in (TINY, hostile):
        folder = tmp_path / profile.stem
        folder.mkdir()
        r = CliRunner().invoke(cli, [str(profile), "--layer-name-regex", LAYER_REGEX, "--solve", "--num-ipus", "2",
                                     "--config-out", str(folder / "p.yaml"), "--plot", str(folder / "p.svg")])
        assert r.exit_code == 0, r.stderr
        runs[profile.stem] = (r.stderr, yaml.safe_load((folder / "p.yaml").read_text()), folder)
    plain_err, plain_doc, _ = runs[TINY.stem]
    err, doc, folder = runs["hostile"]
    assert [LAYER_0, LAYER_1] == [x for s in doc["stages"] for x in s["layers"]][-2:]  # the names are really there
    for key in ("popart", "poptorch"):
        assert _statements(doc["snippets"][key]) == _statements(plain_doc["snippets"][key])
    for svg in ("p.svg", "p-split.svg", "p-tiles.svg"):
        ET.parse(folder / svg)  # expat: refuses any character XML forbids
    assert not HOSTILE_CHARACTERS - {"\n"} & set(err), [c for c in err if c in HOSTILE_CHARACTERS]
    assert len(err.splitlines()) == len(plain_err.splitlines())
    assert shown(LAYER_1) in err


def test_error_lines_escape_file_names() -> None:
    name = "no\x1b]0;pwned\x07\nsuch\u202e.json"
    r = CliRunner().invoke(cli, [name])
    assert r.exit_code == EXIT_BAD_INPUT
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("popliner: error: "), r.stderr
    assert shown(name) in lines[0] and "\x1b" not in r.stderr and "\u202e" not in r.stderr


def test_log_arguments_are_escaped_on_one_line(tmp_path: Path) -> None:
    profile = tmp_path / "a\nb\x1b[2J.json"
    profile.write_text(TINY.read_text())
    r = CliRunner().invoke(cli, [str(profile)])  # the default level logs "loaded PATH ..."
    assert r.exit_code == 0, r.stderr
    assert all(line.startswith("popliner: ") for line in r.stderr.splitlines()), r.stderr
    assert shown(str(profile)) in r.stderr and "\x1b" not in r.stderr


def test_textsafe() -> None:
    assert shown("plain é 层") == "plain é 层"
    assert shown("a\nb\x00\u202e\u2028 \u00a0") == "a\\nb\\x00\\u202e\\u2028 \\xa0"
    assert shown_lines("a\x1b\nb") == "a\\x1b\nb"
    assert shell_word("a b") == "'a b'"
    # bash's $'...': \xHH is a byte, so above ASCII only \u gives the character back.
    assert shell_word("it's\n\u202e\x80") == "$'it\\'s\\x0a\\u202e\\u0080'"
