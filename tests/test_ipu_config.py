"""--ipu-config-out: an optimum-graphcore ipu_config.json for the chosen split, loaded back field by field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.config.model import ConfigTraining
from popliner.config.snippets import memory_settings
from tests.helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
BERT = FIXTURES / "bert-base-training.json.gz"
TINY = FIXTURES / "tiny.json"

#: The keyword parameters of optimum.graphcore.IPUConfig.__init__ (optimum-graphcore, ipu_configuration.py).
#: IPUConfig refuses unknown keys, so every key popliner writes must be one of these.
IPU_CONFIG_PARAMETERS = {
    "replication_factor", "inference_replication_factor", "gradient_accumulation_steps", "layers_per_ipu",
    "inference_layers_per_ipu", "ipus_per_replica", "inference_ipus_per_replica", "optimizer_state_offchip",
    "replicated_tensor_sharding", "matmul_proportion", "inference_matmul_proportion", "enable_half_partials",
    "embedding_serialization_factor", "inference_embedding_serialization_factor",
    "serialized_embedding_splits_per_ipu", "inference_serialized_embedding_splits_per_ipu",
    "projection_serialization_factor", "inference_projection_serialization_factor",
    "serialized_projection_splits_per_ipu", "inference_serialized_projection_splits_per_ipu",
    "recompute_checkpoint_every_layer", "device_iterations", "inference_device_iterations", "output_mode", "seed",
    "auto_loss_scaling", "executable_cache_dir", "explicit_ir_inference", "parallelize_kwargs",
    "inference_parallelize_kwargs",
}


def solve(profile: Path, tmp_path: Path, *extra: str, ok: int = 0):
    out = tmp_path / "ipu_config.json"
    # -H: BERT pretraining as optimum builds it, the head wrapped onto IPU 0.
    extra = tuple(("--head-placement", "wrap") if e == "-H" else (e,) for e in extra)  # type: ignore[assignment]
    args = [a for group in extra for a in group]  # type: ignore[attr-defined]
    result = CliRunner().invoke(cli, [str(profile), "--solve", "--ipu-config-out", str(out), *args])
    assert result.exit_code == ok, (result.stdout, result.stderr)
    if ok:
        return None, None, result
    return json.loads(out.read_text()), json.loads(result.stdout), result


def model_layers(split: dict) -> list[int]:
    """The model's own layers on each IPU: popliner's embedding and head groups are not layers."""
    return [len([name for name in s["layers"] if name not in ("embedding", "head")]) for s in split["stages"]]


def test_training_split_gives_every_training_field(tmp_path: Path) -> None:
    cfg, split, result = solve(BERT, tmp_path, "--num-ipus", "4", "--exact-ipus", "--head-placement", "wrap")
    assert set(cfg) <= IPU_CONFIG_PARAMETERS
    layers = model_layers(split)
    assert split["layers_per_ipu"] == layers and sum(layers) == 12
    assert cfg == {
        "layers_per_ipu": layers,
        "ipus_per_replica": 4,
        "matmul_proportion": [0.6, 0.6, 0.6, 0.6],
        "replication_factor": 1,
        # 4 IPUs in training with the head wrapped: 2x4+1 = 9 pipeline stages; default G = max(16, 2x9) = 18
        "gradient_accumulation_steps": 18,
        "device_iterations": 1,
        "recompute_checkpoint_every_layer": False,
        "optimizer_state_offchip": False,
        "replicated_tensor_sharding": False,
    }
    assert "wrote" in result.stderr and "ipu_config.json" in result.stderr


def test_matmul_proportion_once_or_per_ipu_and_gradient_accumulation(tmp_path: Path) -> None:
    cfg, _, _ = solve(BERT, tmp_path, "--num-ipus", "4", "--exact-ipus", "-H", "--matmul-proportion", "0.25",
                      "--gradient-accumulation", "32")
    assert cfg["matmul_proportion"] == [0.25] * 4 and cfg["gradient_accumulation_steps"] == 32
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    cfg, _, _ = solve(BERT, tmp_path, "--num-ipus", "4", "--exact-ipus", "-H", *sum(
        (["--matmul-proportion", v] for v in ("0.1", "0.2", "0.3", "0.4")), []))
    assert cfg["matmul_proportion"] == [0.1, 0.2, 0.3, 0.4]


def test_matmul_proportion_count_must_match(tmp_path: Path) -> None:
    _, _, result = solve(BERT, tmp_path, "--num-ipus", "4", "--exact-ipus", "-H", "--matmul-proportion", "0.1",
                         "--matmul-proportion", "0.2", ok=2)
    assert "one value or one per IPU (4), not 2" in result.stderr
    _, _, result = solve(BERT, tmp_path, "--matmul-proportion", "1.5", ok=2)
    assert "not a fraction" in result.stderr


def test_inference_split_gives_the_inference_fields(tmp_path: Path) -> None:
    cfg, split, _ = solve(TINY, tmp_path, "--num-ipus", "2", "--exact-ipus", "--head-placement", "last")
    assert set(cfg) <= IPU_CONFIG_PARAMETERS
    assert cfg == {
        "inference_layers_per_ipu": [1, 1],
        "inference_ipus_per_replica": 2,
        "inference_matmul_proportion": [0.6, 0.6],
        "inference_replication_factor": 1,
        # 2 IPUs in inference: 2 stages; default batches per step max(16, 4) = 16
        "inference_device_iterations": 16,
        "recompute_checkpoint_every_layer": False,
        "optimizer_state_offchip": False,
        "replicated_tensor_sharding": False,
    }
    assert split["layers_per_ipu"] == [1, 1]


def test_ipu_config_needs_solve_and_force(tmp_path: Path) -> None:
    out = tmp_path / "ipu_config.json"
    result = CliRunner().invoke(cli, [str(TINY), "--ipu-config-out", str(out)])
    assert result.exit_code == 2 and "--ipu-config-out needs --solve" in result.stderr
    out.write_text("{}")
    last = ["--head-placement", "last"]
    result = CliRunner().invoke(cli, [str(TINY), "--solve", "--ipu-config-out", str(out), *last])
    assert result.exit_code == 2 and out.read_text() == "{}"
    result = CliRunner().invoke(cli, [str(TINY), "--solve", "--ipu-config-out", str(out), "-f", *last])
    assert result.exit_code == 0 and json.loads(out.read_text())["inference_ipus_per_replica"] >= 1


@pytest.mark.parametrize("options, expected", [
    (ConfigTraining(), (False, False, False)),
    (ConfigTraining(recompute="every-layer"), (True, False, False)),
    (ConfigTraining(recompute="pipeline"), (False, False, False)),  # IPUConfig has no field for it
    (ConfigTraining(optimizer_state="off-chip"), (False, True, False)),
    (ConfigTraining(replication_factor=4, sharded_optimizer_state=True), (False, False, True)),
    (ConfigTraining(replication_factor=1, sharded_optimizer_state=True), (False, False, False)),
])
def test_model_options_map_onto_ipu_config_names(options: ConfigTraining, expected: tuple[bool, bool, bool]) -> None:
    got = memory_settings(options)
    assert set(got) <= IPU_CONFIG_PARAMETERS
    keys = ("recompute_checkpoint_every_layer", "optimizer_state_offchip", "replicated_tensor_sharding")
    assert tuple(got[k] for k in keys) == expected


def test_training_options_reach_the_ipu_config(tmp_path: Path) -> None:
    cfg, _, _ = solve(BERT, tmp_path, "--num-ipus", "4", "-H", "--recompute", "every-layer",
                      "--optimizer-state", "off-chip",
                      "--replication-factor", "2", "--sharded-optimizer-state")
    assert set(cfg) <= IPU_CONFIG_PARAMETERS
    assert cfg["recompute_checkpoint_every_layer"] is True
    assert cfg["optimizer_state_offchip"] is True
    assert cfg["replicated_tensor_sharding"] is True
    assert cfg["replication_factor"] == 2


TINY_TRAINING = FIXTURES / "tiny-training.json"


@pytest.mark.parametrize(("placement", "layers", "expected"), [
    # The model's layers per IPU, as optimum-graphcore counts them: the embedding and head groups are not layers.
    ("last", [["embedding", "0"], ["1", "head"]], [1, 1]),
    ("wrap", [["embedding", "0", "head"], ["1"]], [1, 1]),
])
def test_layers_per_ipu_counts_the_models_layers_only(tmp_path: Path, placement: str, layers: list[list[str]],
                                                      expected: list[int]) -> None:
    cfg, split, _ = solve(TINY_TRAINING, tmp_path, "--num-ipus", "2", "--exact-ipus", "--mem-per-tile", "800",
                          "--head-placement", placement)
    assert [s["layers"] for s in split["stages"]] == layers
    assert split["layers_per_ipu"] == expected and cfg["layers_per_ipu"] == expected


def test_an_ipu_with_the_embedding_alone_counts_no_layer(tmp_path: Path) -> None:
    cfg, split, _ = solve(TINY_TRAINING, tmp_path, "--num-ipus", "3", "--exact-ipus", "--mem-per-tile", "800",
                          "--head-placement", "wrap")
    assert [s["layers"] for s in split["stages"]] == [["embedding", "head"], ["0"], ["1"]]
    assert split["layers_per_ipu"] == [0, 1, 1] == cfg["layers_per_ipu"]


def test_first_is_refused_before_any_work(tmp_path: Path) -> None:
    # optimum's models put the head back on IPU 0 after the last IPU, or on the last IPU: never in IPU 0's
    # first stage, as --head-placement first plans. No ipu_config.json that would build something else.
    out, config = tmp_path / "ipu_config.json", tmp_path / "pipeline.yaml"
    result = CliRunner().invoke(cli, [str(TINY_TRAINING), "--solve", "--num-ipus", "2", "--ipu-config-out", str(out),
                                      "--config-out", str(config), "--head-placement", "first"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "optimum-graphcore cannot build this split" in result.stderr and "--head-placement wrap or last" in \
        result.stderr
    assert not out.exists() and not config.exists()
    # Not given, the placement is optimum-graphcore's (--ipu-config-out plans for it): never first.
    result = CliRunner().invoke(cli, [str(TINY_TRAINING), "--solve", "--num-ipus", "2", "--ipu-config-out", str(out),
                                      "--config-out", str(config), "--mem-per-tile", "800"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["training"]["head_placement"] in ("last", "wrap") and out.exists()


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_the_yaml_snippet_is_the_ipu_config(tmp_path: Path, mode: str) -> None:
    out, config = tmp_path / "ipu_config.json", tmp_path / "pipeline.yaml"
    CliRunner().invoke(cli, [str(TINY_TRAINING), "--solve", "--num-ipus", "2", "--exact-ipus", "--mem-per-tile", "800",
                             "--head-placement", "wrap", "--mode", mode, "--matmul-proportion", "0.3",
                             "--matmul-proportion", "0.4", "--ipu-config-out", str(out), "--config-out", str(config)])
    import yaml

    snippet = yaml.safe_load(config.read_text())["snippets"]["optimum_graphcore"]
    assert snippet == json.loads(out.read_text())
    prefix = "" if mode == "training" else "inference_"
    assert snippet[f"{prefix}matmul_proportion"] == [0.3, 0.4]
