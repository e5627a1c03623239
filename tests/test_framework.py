"""The framework of a profile: found in source.framework or the debug contexts, overridden by --framework.

Profiles come from ``popliner synth --framework``, which names the debug
contexts as PopART, PopTorch and TensorFlow do; the expected framework of
each is the one it was generated for, an independent fact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.cli import cli
from popliner.errors import ConfigError, UsageProblem
from popliner.framework import choose_framework, detect_framework, framework_of_layers, parse_framework
from popliner.synth import preset_spec, write_profile
from tests.helpers import FIXTURES, stage_cycles_split


def synth(tmp_path: Path, framework: str, *, keep_source: bool = True, mode: str = "training") -> Path:
    """A small BERT profile written as ``framework`` names it; without ``keep_source`` only the contexts tell."""
    path = tmp_path / f"bert-{framework}-{mode}{'' if keep_source else '-nosource'}.json"
    write_profile(preset_spec("bert-tiny", mode, layers=2, tiles=32, framework=framework), path, force=True)
    if not keep_source:
        doc = json.loads(path.read_text())
        del doc["source"]["framework"]
        path.write_text(json.dumps(doc))
    return path


def analysis(path: Path, framework: str | None = None) -> Any:
    return load_analysis(str(path), AnalysisOptions(framework=framework), use_cache=False)


@pytest.mark.parametrize(("generated", "expected", "layer"), [
    ("popart", "popart", "popart"), ("poptorch", "poptorch", "poptorch"), ("tensorflow", "tensorflow", "xla_op")])
def test_the_debug_contexts_name_the_framework(tmp_path: Path, generated: str, expected: str, layer: str) -> None:
    found = analysis(synth(tmp_path, generated, keep_source=False)).framework
    assert (found.name, found.origin, found.evidence) == (expected, "contexts", layer)


@pytest.mark.parametrize("generated", ["popart", "poptorch", "tensorflow"])
def test_source_framework_wins_over_the_contexts_and_the_option_over_both(tmp_path: Path, generated: str) -> None:
    path = synth(tmp_path, generated)
    assert (analysis(path).framework.name, analysis(path).framework.origin) == (generated, "source")
    chosen = analysis(path, "optimum").framework
    assert (chosen.name, chosen.origin) == ("optimum", "option")
    assert chosen.describe() == "optimum-graphcore (--framework)"


def test_a_synthetic_source_falls_back_to_the_contexts() -> None:
    # The bundled fixtures say framework "synthetic" and carry PopART's contexts.
    for name in ("tiny.json", "bert-tiny-training.json"):
        found = load_analysis(str(FIXTURES / name), use_cache=False).framework
        assert (found.name, found.origin) == ("popart", "contexts"), name


def test_poptorch_wins_over_the_popart_contexts_it_lowers_through() -> None:
    assert framework_of_layers({"popart", "poplibs", "poptorch"}) == ("poptorch", "poptorch")
    assert framework_of_layers({"onnx", "popxl", "popart"}) == ("popxl", "popxl")
    assert framework_of_layers({"poplibs", "poplar"}) is None


def test_no_framework_layer_defaults_to_popart_and_says_so(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "tiny.json").read_text())
    doc["source"] = {}
    for c in doc["debugContexts"]:
        c["layer"] = "poplibs" if c["layer"] == "popart" else c["layer"]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(doc))
    profile = load_analysis(str(path), AnalysisOptions(op_layers=("poplibs",)), use_cache=False).profile
    choice = detect_framework(profile)
    assert (choice.name, choice.origin) == ("popart", "default")
    assert "default" in choice.describe()
    assert choose_framework(profile, "tensorflow").name == "tensorflow"


def test_unknown_framework_names_are_refused() -> None:
    assert parse_framework("optimum-graphcore") == "optimum"
    with pytest.raises(UsageProblem, match="unknown framework 'jax'; use one of popart, poptorch"):
        parse_framework("jax")
    result = CliRunner().invoke(cli, [str(FIXTURES / "tiny.json"), "--framework", "jax"])
    assert result.exit_code == 2 and "--framework" in result.stderr


@pytest.mark.parametrize("generated", ["poptorch", "tensorflow"])
def test_every_framework_analyses_to_the_same_figures(tmp_path: Path, generated: str) -> None:
    # Only the names of the layers above Poplar differ: the operations, layers and bytes are the same.
    base, other = analysis(synth(tmp_path, "popart")), analysis(synth(tmp_path, generated))
    assert base.ops.names == other.ops.names and base.layer_names == other.layer_names
    for layers in (base.layer_names[:1], base.layer_names[1:]):
        assert (base.stage_memory(layers).per_tile == other.stage_memory(layers).per_tile).all()
        assert stage_cycles_split(base, layers) == stage_cycles_split(other, layers)


def test_the_framework_is_recorded_in_the_json_and_the_config(tmp_path: Path) -> None:
    profile = synth(tmp_path, "poptorch")
    config = tmp_path / "pipeline.yaml"
    result = CliRunner().invoke(cli, [str(profile), "--solve", "--num-ipus", "2", "--config-out", str(config),
                                      "--no-cache"])
    assert result.exit_code in (0, 3), result.stderr
    assert json.loads(result.stdout)["framework"] == {"name": "poptorch", "from": "source"}
    assert yaml.safe_load(config.read_text())["framework"] == "poptorch"
    from popliner.config import read_config

    assert read_config(config).framework == "poptorch"
    edited = tmp_path / "edited.yaml"
    edited.write_text(config.read_text().replace("framework: poptorch", "framework: jax"))
    with pytest.raises(ConfigError, match=r"edited\.yaml: framework: the text 'jax' is not one of popart"):
        read_config(edited)


@pytest.mark.parametrize(("naming", "expected"), [("poptorch", "poptorch"), ("tensorflow", "tensorflow")])
def test_operations_named_as_a_framework_names_them_are_detected(tmp_path: Path, naming: str, expected: str) -> None:
    # The calibrated presets' naming (popliner/synth/naming.py) rewrites the operation contexts themselves.
    path = tmp_path / f"{naming}.json"
    write_profile(preset_spec("bert-tiny", "training", layers=2, tiles=32, naming=naming), path, force=True)
    found = analysis(path).framework
    assert (found.name, found.origin) == (expected, "contexts")


def test_synth_cli_writes_the_framework(tmp_path: Path) -> None:
    out = tmp_path / "torch.json"
    result = CliRunner().invoke(cli, ["synth", "--preset", "bert-tiny", "--layers", "2", "--tiles", "32",
                                      "--framework", "poptorch", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["source"]["framework"] == "poptorch" and doc["source"]["generator"]["framework"] == "poptorch"
    assert {c["layer"] for c in doc["debugContexts"]} >= {"poptorch", "popart"}
    bad = CliRunner().invoke(cli, ["synth", "--framework", "jax", "-o", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "--framework" in bad.stderr
