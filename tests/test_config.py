"""Pipeline config: building from a split, YAML round trip, validation of hand edits, snippets."""

from __future__ import annotations

import copy
import io
import json
import logging
from typing import Any

import pytest
import yaml

from popliner.config import (
    PipelineConfig,
    config_from_split,
    default_gradient_accumulation,
    parse_config,
    read_config,
)
from popliner.config.model import ConfigTraining
from popliner.config.snippets import ipu_config, optimum_snippet, popart_snippet, poptorch_snippet
from popliner.config.yaml_io import config_from_document
from popliner.errors import ConfigError, UsageProblem
from popliner.fileio import atomic_write
from popliner.memory.types import ComponentBytes
from popliner.pipeline import num_pipeline_stages
from popliner.solvers.result import SplitResult, StageResult
from popliner.writers.pipeline_yaml import config_to_document, write_config
from tests.helpers import FIXTURES

SHA = "0123456789abcdef" * 4
LAYERS = (("embed", "enc/0"), ("enc/1", "enc:2", "7"), ("enc/3", "head"))
#: popliner's embedding and head groups as layers of their own (--head-placement last).
GROUPED = (("embedding", "enc/0"), ("enc/1", "enc:2", "7"), ("enc/3", "head"))


def make_split(mode: str = "training", groups: tuple[tuple[str, ...], ...] = LAYERS) -> SplitResult:
    k = len(groups)
    stages = []
    for i, layers in enumerate(groups):
        depth = 2 * (k - 1 - i) + 1 if mode == "training" and i < k - 1 else 0
        stages.append(StageResult(
            index=i, ipu=i, layers=layers, memory=ComponentBytes(1000 * (i + 1), 200, 300, 400, 50),
            worst_tile=3 + i, worst_tile_bytes=5000 + i, stash_bytes=100 * max(depth - 1, 0),
            stash_entries=depth, cycles=9000 + i, bytes_in=0 if i == 0 else 4096, budget=600_000,
        ))
    return SplitResult(solver="greedy", status="GREEDY", mode=mode, num_ipus_requested=k, budget_bytes=600_000,
                       stages=tuple(stages))


def make_config(mode: str = "training", g: int | None = None,
                groups: tuple[tuple[str, ...], ...] = LAYERS) -> PipelineConfig:
    # popliner's embedding and head groups exist only with --head-placement last or wrap: a training config
    # records that placement (an inference config records none; its placement is read from the stages).
    training = ConfigTraining(head_placement="last") if groups == GROUPED and mode == "training" else None
    return config_from_split(make_split(mode, groups), profile_path="model.json", profile_sha256=SHA, tiles=1472,
                             bytes_per_tile=638_976, clock_hz=1.33e9, gradient_accumulation=g, training=training)


def dump(cfg: PipelineConfig) -> str:
    buf = io.StringIO()
    write_config(cfg, buf)
    return buf.getvalue()


def document(cfg: PipelineConfig) -> dict[str, Any]:
    return yaml.safe_load(dump(cfg))  # type: ignore[no-any-return]


def rejected(doc: Any, source: str = "edited.yaml") -> str:
    with pytest.raises(ConfigError) as err:
        config_from_document(doc, source)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{source}:")
    return message


# --------------------------------------------------------------- building


def test_pipeline_stage_counts() -> None:
    assert num_pipeline_stages(False, 4) == 4
    assert num_pipeline_stages(True, 3) == 5
    assert num_pipeline_stages(True, 1) == 1


@pytest.mark.parametrize(("mode", "k", "expected"), [
    ("training", 3, 16),  # P = 5 -> max(16, 10)
    ("inference", 10, 20),  # P = 10
    ("training", 10, 38),  # P = 19
])
def test_default_gradient_accumulation(mode: str, k: int, expected: int) -> None:
    assert default_gradient_accumulation(num_pipeline_stages(mode == "training", k)) == expected
    groups = tuple((f"l{i}",) for i in range(k))
    assert make_config(mode, None, groups).gradient_accumulation == expected


def test_training_placements_follow_popart() -> None:
    cfg = make_config("training")
    got = {p.name: (p.ipu, p.pipeline_stage, p.backward_stage) for p in cfg.placements}
    # K = 3: forward on IPU i is stage i, backward 2K-2-i = 4-i; the last IPU does both in stage 2.
    assert got == {"embed": (0, 0, 4), "enc/0": (0, 0, 4), "enc/1": (1, 1, 3), "enc:2": (1, 1, 3),
                   "7": (1, 1, 3), "enc/3": (2, 2, 2), "head": (2, 2, 2)}
    assert cfg.num_pipeline_stages == 5


def test_inference_placements_have_no_backward() -> None:
    cfg = make_config("inference")
    assert [(p.ipu, p.pipeline_stage, p.backward_stage) for p in cfg.placements][-1] == (2, 2, None)
    assert "backwardPipelineStage" not in document(cfg)["layers"][0]


def test_too_few_micro_batches_rejected_when_building() -> None:
    with pytest.raises(UsageProblem, match="at least one micro-batch per stage: use 5 or more"):
        make_config("training", g=4)
    assert make_config("training", g=5).gradient_accumulation == 5


# ------------------------------------------------------------- round trip


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_round_trip(mode: str) -> None:
    cfg = make_config(mode, g=24)
    text = dump(cfg)
    again = parse_config(text, "cfg.yaml")
    assert again == cfg
    assert dump(again) == text  # deterministic bytes
    assert not any(s.predicted_stale for s in again.stages)


def test_round_trip_through_a_file(tmp_path: Any) -> None:
    cfg = make_config()
    path = tmp_path / "pipeline.yaml"
    with atomic_write(path, force=False) as f:
        write_config(cfg, f)
    assert read_config(path) == cfg


def test_document_layout() -> None:
    doc = document(make_config("training", g=16))
    assert doc["version"] == 1
    assert doc["profile"] == {"path": "model.json", "sha256": SHA}
    assert doc["target"] == {"tiles_per_ipu": 1472, "bytes_per_tile": 638_976, "clock_hz": 1.33e9}
    assert (doc["mode"], doc["num_ipus"], doc["pipeline_stages"], doc["gradient_accumulation"]) == \
        ("training", 3, 5, 16)
    s1 = doc["stages"][1]
    assert (s1["index"], s1["ipu"], s1["pipeline_stages"], s1["layers"]) == (1, 1, [1, 3], ["enc/1", "enc:2", "7"])
    pred = s1["predicted"]
    assert pred["memory"] == {"variables": 2000, "vertex_code": 200, "vertex_state": 300, "exchange_code": 400,
                              "control_code": 50, "total": 2950}
    assert (pred["worst_tile"], pred["worst_tile_bytes"], pred["stash_bytes"], pred["stash_entries"],
            pred["cycles"], pred["bytes_in"]) == (4, 5001, 200, 3, 9001, 4096)


# ------------------------------------------------------------------ snippets


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_snippets_contain_every_layer(mode: str) -> None:
    cfg = make_config(mode)
    popart, poptorch = popart_snippet(cfg), poptorch_snippet(cfg)
    for p in cfg.placements:
        assert f"{json.dumps(p.name)}: ({p.ipu}, {p.pipeline_stage})," in popart
        assert f"{json.dumps(p.name)}: {p.ipu}," in poptorch
    assert "builder.virtualGraph(ipu), builder.pipelineStage(stage)" in popart
    # PopTorch: a BeginBlock per layer (IPU_OF_LAYER above), stages follow the IPUs.
    assert "for path, ipu in IPU_OF_LAYER.items():\n    begin_block(model, path, ipu)" in poptorch
    assert "poptorch.BeginBlock(getattr(owner, name), user_id=path, ipu_id=ipu)" in poptorch
    assert "poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu)" in poptorch
    compile(popart, "<popart>", "exec")  # valid Python
    compile(poptorch, "<poptorch>", "exec")
    # No embedding and head of their own (--head-placement first): no optimum model builds that, so no IPUConfig.
    assert optimum_snippet(cfg) == document(cfg)["snippets"]["optimum_graphcore"]
    assert str(optimum_snippet(cfg)).startswith("# optimum-graphcore cannot build this split: ")
    grouped = make_config(mode, groups=GROUPED)
    prefix = "" if mode == "training" else "inference_"
    assert optimum_snippet(grouped)[f"{prefix}layers_per_ipu"] == [1, 3, 1]  # the groups are not layers
    assert document(grouped)["snippets"]["optimum_graphcore"][f"{prefix}ipus_per_replica"] == 3
    # The YAML's snippet is ipu_config.json, field for field.
    assert document(grouped)["snippets"]["optimum_graphcore"] == ipu_config(grouped)


def test_snippets_carry_the_gradient_accumulation() -> None:
    cfg = make_config("training", g=32, groups=GROUPED)
    assert "opts.accumulationFactor = 32" in popart_snippet(cfg)
    assert "opts.Training.gradientAccumulation(32)" in poptorch_snippet(cfg)
    assert optimum_snippet(cfg)["gradient_accumulation_steps"] == 32
    inf = make_config("inference", g=8, groups=GROUPED)
    assert "opts.deviceIterations(8)" in poptorch_snippet(inf)
    assert optimum_snippet(inf)["inference_device_iterations"] == 8


# ------------------------------------------------------------ hand edits: OK


def test_moving_a_layer_between_stages(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI may have cut the package logger off from the root logger caplog listens on.
    monkeypatch.setattr(logging.getLogger("popliner"), "propagate", True)
    doc = document(make_config())
    moved = doc["stages"][1]["layers"].pop(0)  # enc/1 moves to the end of IPU 0
    doc["stages"][0]["layers"].append(moved)
    with caplog.at_level(logging.WARNING, logger="popliner.config"):
        cfg = config_from_document(doc, "edited.yaml")
    assert cfg.stages[0].layers == ("embed", "enc/0", "enc/1")
    assert {p.name: p.ipu for p in cfg.placements}["enc/1"] == 0  # table regenerated
    assert [s.predicted_stale for s in cfg.stages] == [True, True, False]
    assert "layers[2] ('enc/1') says IPU 1" in caplog.text and "regenerated" in caplog.text
    assert yaml.safe_load(dump(cfg))["layers"][2] == {"name": "enc/1", "ipu": 0, "pipelineStage": 0,
                                                      "backwardPipelineStage": 4}
    assert '"enc/1": (0, 0),' in popart_snippet(cfg)


def test_snippets_block_is_ignored_on_read() -> None:
    doc = document(make_config())
    doc["snippets"] = {"popart": "anything"}
    assert config_from_document(doc, "x.yaml") == make_config()


# -------------------------------------------------------- hand edits: errors


def test_layer_missing() -> None:
    doc = document(make_config())
    doc["stages"][1]["layers"].remove("enc:2")
    msg = rejected(doc)
    assert "layers[3]: layer 'enc:2' is in no stage; add it to stages[1].layers (next to 'enc/1')" in msg


def test_layer_twice() -> None:
    doc = document(make_config())
    doc["stages"][2]["layers"].append("enc/0")
    msg = rejected(doc)
    assert "stages[2].layers[2]: layer 'enc/0' is assigned twice (also at stages[0].layers[1])" in msg
    assert "keep it in one stage only" in msg


def test_unknown_layer() -> None:
    doc = document(make_config())
    doc["stages"][0]["layers"][1] = "enc/O"
    msg = rejected(doc)
    assert "stages[0].layers[1]: unknown layer 'enc/O'" in msg and "check the spelling" in msg


def test_stages_out_of_order() -> None:
    doc = document(make_config())
    doc["stages"][0], doc["stages"][1] = doc["stages"][1], doc["stages"][0]
    msg = rejected(doc)
    assert "stages[0].index: is 1 but this is entry 0 of `stages`" in msg and "pipeline (data-flow) order" in msg


def test_layers_out_of_model_order() -> None:
    doc = document(make_config())
    doc["stages"][0]["layers"].append(doc["stages"][2]["layers"].pop(0))  # enc/3 onto IPU 0
    msg = rejected(doc)
    assert "stages[1].layers[0]: layer 'enc/1' comes before 'enc/3' (stages[0].layers[2]) in the model" in msg
    assert "keep layers in model order" in msg


def test_ipu_must_match_position() -> None:
    doc = document(make_config())
    doc["stages"][1]["ipu"] = 2
    assert "stages[1].ipu: is 2 but stage 1 must run on IPU 1" in rejected(doc)


def test_num_ipus_must_match_stages() -> None:
    doc = document(make_config())
    doc["num_ipus"] = 4
    assert "num_ipus: is 4 but `stages` lists 3; set `num_ipus: 3`" in rejected(doc)


@pytest.mark.parametrize(("value", "expected"), [
    (2, "version: unsupported version 2; this popliner reads `version: 1`"),
    ("1", "version: unsupported version '1'"),
])
def test_bad_version(value: Any, expected: str) -> None:
    doc = document(make_config())
    doc["version"] = value
    assert expected in rejected(doc)


def test_missing_version() -> None:
    doc = document(make_config())
    del doc["version"]
    assert "version: missing; add the `version:` entry" in rejected(doc)


def test_yaml_syntax_error(tmp_path: Any) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("version: 1\nstages: [\n  - index: 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_config(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: line ") and "YAML syntax error" in msg and "\n" not in msg


@pytest.mark.parametrize("text", ["- version: 1\n- stages: []\n", "just text\n", "42\n"])
def test_top_level_must_be_a_mapping(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^x\.yaml: the top level must be a mapping"):
        parse_config(text, "x.yaml")


def test_empty_file() -> None:
    with pytest.raises(ConfigError, match="the file is empty"):
        parse_config("", "x.yaml")


def test_missing_file(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        read_config(tmp_path / "nope.yaml")


def test_wrong_types() -> None:
    doc = document(make_config())
    doc["stages"][0]["predicted"]["cycles"] = "many"
    assert "stages[0].predicted.cycles: expected a whole number, got the text 'many'" in rejected(doc)
    doc = document(make_config())
    doc["stages"][1]["layers"][2] = 7  # a layer named "7" written without quotes
    assert "stages[1].layers[2]: expected a layer name (text), got the number 7; quote it: '7'" in rejected(doc)
    doc = document(make_config())
    doc["mode"] = "train"
    assert "mode: unknown mode 'train'; use `inference` or `training`" in rejected(doc)


def test_unknown_key_is_a_typo() -> None:
    doc = document(make_config())
    doc["stages"][0]["layer"] = doc["stages"][0].pop("layers")
    assert "stages[0].layer: unknown key" in rejected(doc)


def test_too_few_micro_batches_in_file() -> None:
    doc = document(make_config())
    doc["gradient_accumulation"] = 4
    assert "gradient_accumulation: 4 is smaller than the 5 pipeline stages; set it to 5 or more" in rejected(doc)


def test_empty_stage() -> None:
    doc = document(make_config())
    doc["stages"][2]["layers"] = []
    assert "stages[2].layers: must be a non-empty list" in rejected(doc)


def test_worst_tile_outside_the_ipu() -> None:
    doc = document(make_config())
    doc["stages"][0]["predicted"]["worst_tile"] = 1472
    assert "stages[0].predicted.worst_tile: tile 1472 does not exist" in rejected(doc)


def test_document_is_not_modified_by_validation() -> None:
    doc = document(make_config())
    before = copy.deepcopy(doc)
    config_from_document(doc, "x.yaml")
    assert doc == before
    assert config_to_document(make_config())["version"] == 1


@pytest.mark.parametrize("old, new, message", [
    ("tiles_per_ipu: 4", "tiles_per_ipu: 1000000000000", "target.tiles_per_ipu: 1000000000000 is above the limit"),
    ("gradient_accumulation: 16", "gradient_accumulation: 1000000000000",
     "gradient_accumulation: 1000000000000 is above the limit"),
])
def test_absurd_sizes_are_refused_not_run(tmp_path, old, new, message):

    from click.testing import CliRunner

    from popliner.cli import cli

    profile = FIXTURES / "tiny.json"
    cfg = tmp_path / "p.yaml"
    args = [str(profile), "--solve", "--num-ipus", "2", "--config-out", str(cfg)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new))
    result = CliRunner().invoke(cli, ["simulate", str(cfg)])
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_wrapped_head_takes_autoincrement_and_its_own_stage() -> None:
    # PopTorch's SameAsIpu would give the head (IPU 0) stage 0, before the stages it follows: AutoIncrement
    # gives every new block the next stage, and consecutive blocks on one IPU share one.
    from popliner.config.model import ConfigTraining
    from popliner.config.snippets import OPTIMUM_LAST_MODELS, OPTIMUM_WRAP_MODELS, optimum_models

    groups = (("embedding", "enc/0", "head"), ("enc/1",), ("enc/3",))
    cfg = config_from_split(make_split("training", groups), profile_path="model.json", profile_sha256=SHA,
                            tiles=1472, bytes_per_tile=638_976, clock_hz=1.33e9, gradient_accumulation=None,
                            training=ConfigTraining(head_placement="wrap"))
    code = poptorch_snippet(cfg)
    assert "poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement)" in code
    scope: dict[str, Any] = {}
    start = code.index("PIPELINE_STAGE = {")
    exec(code[start:code.index("}", start) + 1], scope)  # noqa: S102
    # 3 IPUs: forward stages 0, 1, 2 and the head's stage 3 (after the last IPU's forward).
    assert scope["PIPELINE_STAGE"] == {"embedding": 0, "enc/0": 0, "enc/1": 1, "enc/3": 2, "head": 3}
    assert optimum_models(cfg) == OPTIMUM_WRAP_MODELS
    assert optimum_models(make_config("training", groups=GROUPED)) == OPTIMUM_LAST_MODELS
    assert optimum_models(make_config("training")) == ()  # --head-placement first: none builds it
    assert "AutoStage.SameAsIpu" in poptorch_snippet(make_config("training", groups=GROUPED))


def test_execution_and_matmul_proportion_round_trip() -> None:
    import dataclasses

    cfg = dataclasses.replace(make_config("inference", groups=GROUPED), framework="optimum",
                              matmul_proportion=(0.2, 0.3, 0.4))
    doc = document(cfg)
    assert (doc["framework"], doc["execution"], doc["matmul_proportion"]) == ("optimum", "sharded", [0.2, 0.3, 0.4])
    assert doc["snippets"]["optimum_graphcore"]["inference_matmul_proportion"] == [0.2, 0.3, 0.4]
    back = config_from_document(doc, "edited.yaml")
    assert (back.framework, back.execution, back.matmul_proportion) == ("optimum", "sharded", (0.2, 0.3, 0.4))
    training = dataclasses.replace(make_config("training", groups=GROUPED), framework="optimum")
    assert training.execution == "pipelined"  # optimum trains pipelined
    for key, value, message in (("execution", "parallel", "execution: the text 'parallel' is not one of"),
                                ("matmul_proportion", [0.2, 0.3], "matmul_proportion: expected a list of one value"),
                                ("matmul_proportion", [0.2, 1.5, 0.1], "matmul_proportion[1]: the number 1.5 is not"),
                                ("framework", "jax", "framework: the text 'jax' is not one of")):
        bad = copy.deepcopy(doc)
        bad[key] = value
        assert message in rejected(bad), key
