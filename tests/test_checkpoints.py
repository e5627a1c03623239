"""Recomputation checkpoints the model carries decide the recomputation PopTorch and optimum build.

PopART's ``checkpointOutput`` (which ``poptorch.recomputationCheckpoint`` and optimum's
``recompute_checkpoint_every_layer`` reach) adds an ``Identity`` named ``Checkpoint``. A model with
one in every layer is recomputed per layer once pipelined; popliner plans that by default.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.cli import cli
from popliner.defaults import framework_defaults
from popliner.ops.checkpoints import _NAME, checkpoint_operations, layers_with_checkpoints
from popliner.plan import SplitRequest, plan_split


@pytest.mark.parametrize(("name", "found"), [
    ("bert/encoder/layer_3/Checkpoint", True),
    ("bert.encoder.layer.3/Checkpoint", True),
    ("Checkpoint", True),
    ("layer3/Checkpoint_1", True),
    ("layer3/Checkpoint:0", True),
    ("layer3/CheckpointLoader", False),
    ("model/checkpoint_manager/Add", False),
    ("layer3/Checkpoint/Add", False),
])
def test_checkpoint_names(name, found):
    assert bool(_NAME.search(name)) is found


@pytest.mark.parametrize(("framework", "ipus", "checkpointed", "recompute"), [
    ("poptorch", 4, True, "every-layer"),
    ("poptorch", 4, False, "pipeline"),
    ("optimum", 2, True, "every-layer"),
    ("poptorch", 1, True, "none"),  # one IPU: nothing pipelined, nothing recomputed
    ("popart", 4, True, "none"),  # PopART recomputes only when autoRecomputation is set
])
def test_checkpoints_change_the_default_by_hand(framework, ipus, checkpointed, recompute):
    assert framework_defaults(framework, ipus, False, checkpointed=checkpointed).recompute == recompute


def _synth(path: Path, *extra: str) -> Path:
    result = CliRunner().invoke(cli, ["synth", "--preset", "bert-tiny", "--mode", "training", "--framework",
                                      "poptorch", "-o", str(path), *extra])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ck")
    return {"plain": _synth(d / "plain.json"), "checkpointed": _synth(d / "ck.json", "--checkpoint-every-layer"),
            "gpt": _synth(d / "gpt.json", "--preset", "gpt2-tiny", "--checkpoint-every-layer"),
            # Operations named by module path, as PopTorch names Hugging Face models (bert.encoder.layer.3/...).
            "hf": _synth(d / "hf.json", "--preset", "poptorch-bert-tiny", "--checkpoint-every-layer")}


def test_every_layer_of_a_checkpointed_model_has_one(profiles):
    for key, expected in (("plain", False), ("checkpointed", True), ("gpt", True), ("hf", True)):
        a = load_analysis(str(profiles[key]), AnalysisOptions(), use_cache=False)
        layers = a.named_layers or a.layers
        has = layers_with_checkpoints(a.ops, layers, a.is_backward)
        assert len(has) == len(layers.names) > 0
        assert bool(has.all()) is expected and (bool(has.any()) is expected)
        # Exactly one forward checkpoint per layer, and none among the backward operations.
        ck = checkpoint_operations(a.ops, a.is_backward)
        assert int(ck.sum()) == (len(layers.names) if expected else 0)
        assert not (ck & a.is_backward).any()
        if expected:
            assert np.bincount(layers.layer_of_op[ck], minlength=len(layers.names)).tolist() == [1] * len(
                layers.names)


def test_a_checkpointed_model_is_planned_recomputed_per_layer(profiles):
    a = load_analysis(str(profiles["checkpointed"]), AnalysisOptions(), use_cache=False)
    plan = plan_split(a, SplitRequest(num_ipus=2, head_placement="last", time_limit=30))
    assert plan.defaults is not None and plan.defaults.recompute == "every-layer"
    assert plan.recompute_applied == "every-layer"
    # The same split and figures as asking for every-layer recomputation by hand.
    by_hand = plan_split(a, SplitRequest(num_ipus=2, recompute="every-layer", head_placement="last", time_limit=30))
    assert [s.worst_tile_bytes for s in plan.split.stages] == [s.worst_tile_bytes for s in by_hand.split.stages]
    plain = load_analysis(str(profiles["plain"]), AnalysisOptions(), use_cache=False)
    assert plan_split(plain, SplitRequest(num_ipus=2, head_placement="last",
                                         time_limit=30)).recompute_applied == "pipeline"


def test_the_summary_says_why(profiles):
    result = CliRunner().invoke(cli, [str(profiles["checkpointed"]), "--solve", "--num-ipus", "2", "--no-cache"])
    assert result.exit_code in (0, 3), result.output
    assert json.loads(result.stdout)["training"]["recompute"] == "every-layer"
    assert "checkpoint in every layer" in result.stderr


@pytest.mark.parametrize("compiled", ["on-chip", "off-chip"])
def test_a_profile_compiled_with_off_chip_state_is_recorded_and_configured_so(tmp_path, compiled):
    profile = tmp_path / "p.json"
    made = CliRunner().invoke(cli, ["synth", "--preset", "bert-tiny", "--mode", "training", "--optimizer-state",
                                    compiled, "-o", str(profile)])
    assert made.exit_code == 0, made.output
    out = tmp_path / "pipeline.yaml"
    base = [str(profile), "--solve", "--num-ipus", "2", "--recompute", "none", "--head-placement", "last",
            "--mem-per-tile", "4000000",
            "--no-cache"]
    plain = CliRunner().invoke(cli, [*base, "--config-out", str(out)])
    assert plain.exit_code == 0, plain.output
    doc = json.loads(plain.stdout)
    assert doc["training"]["optimizer_state"] == compiled
    import yaml

    config = yaml.safe_load(out.read_text())
    assert config["training"]["optimizer_state"] == compiled
    assert config["snippets"]["optimum_graphcore"]["optimizer_state_offchip"] is (compiled == "off-chip")
    assert ("useOnChipStorage(False)" in config["snippets"]["poptorch"]) is (compiled == "off-chip")
    if compiled == "off-chip":
        # Asking for what the profile already does changes no figure.
        asked = CliRunner().invoke(cli, [*base, "--optimizer-state", "off-chip"])
        assert [s["worst_tile_bytes"] for s in json.loads(asked.stdout)["stages"]] == [
            s["worst_tile_bytes"] for s in doc["stages"]]


def test_the_hint_does_not_offer_what_the_profile_already_does(tmp_path):
    from popliner.solvers.problem import SplitProblem
    from popliner.training_choice import suggest_options

    candidates = {}
    for state in ("on-chip", "off-chip"):
        profile = tmp_path / f"{state}.json"
        made = CliRunner().invoke(cli, ["synth", "--preset", "bert-tiny", "--mode", "training", "--optimizer-state",
                                        state, "-o", str(profile)])
        assert made.exit_code == 0, made.output
        a = load_analysis(str(profile), AnalysisOptions(), use_cache=False)
        found = suggest_options(a, SplitProblem(2, 300_000, training=True))
        candidates[state] = found.candidates
    # The usual options: each recomputation mode, with the state on chip and off chip; a profile that already
    # streams its state leaves moving it out (it would change nothing).
    from popliner.training_choice import AUTO_ORDER

    assert candidates["on-chip"] == 2 * len(AUTO_ORDER) - 1  # every mode x both states, less the current one
    assert candidates["off-chip"] == len(AUTO_ORDER) - 1
