"""With nothing but ``--num-ipus``, PopTorch and optimum-graphcore build the pipeline popliner plans.

Training profiles generated the way PopTorch names them, with a recomputation
checkpoint in every layer (what optimum's ``recompute_checkpoint_every_layer``
leaves in a one-IPU profile), are solved with no option but ``--num-ipus``: the
head placement and the recomputation are the framework's defaults. The emitted
PopTorch snippet and the YAML's optimum snippet (``IPUConfig(**snippet)`` with
the real pipelined models' ``parallelize()``) must then put every part on the
planned IPU and pipeline stage, and checkpoint every part, as planned.

``POPLINER_CLIENT_PLANS=DIR`` adds every ``DIR/*/pipeline.yaml`` (a directory
whose name contains ``gpt2`` is a GPT-2, any other a BERT): the full-size
models of ``scripts/framework_fits.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.client.test_optimum_client import (
    LAST_MODELS,
    WRAP_MODELS,
    Plan,
    build_with_optimum,
    expected_blocks,
    popliner,
    run_poptorch_snippet,
)

pytestmark = pytest.mark.client

#: case -> (synth options, family, IPUs)
CASES: dict[str, tuple[tuple[str, ...], str, int]] = {
    "bert-mlm": (("--preset", "bert-tiny", "--head", "mlm"), "bert", 3),
    "bert-squad": (("--preset", "bert-tiny",), "bert", 3),
    "gpt2": (("--preset", "gpt2-tiny",), "gpt2", 3),
}


def _extra_plans() -> list[Path]:
    root = os.environ.get("POPLINER_CLIENT_PLANS")
    return sorted(Path(root).glob("*/pipeline.yaml")) if root else []


def _generated(tmp: Path, case: str) -> tuple[Plan, str]:
    synth, family, k = CASES[case]
    profile = tmp / f"{case}.json"
    popliner("synth", *synth, "--mode", "training", "--framework", "poptorch", "--checkpoint-every-layer",
             "-o", str(profile))
    result = popliner(str(profile), "--solve", "--num-ipus", str(k), "--config-out", str(tmp / "pipeline.yaml"),
                      "--no-cache")
    return _read(tmp / "pipeline.yaml", result.stderr), family


def _read(path: Path, stderr: str) -> Plan:
    config = yaml.safe_load(path.read_text())
    snippet = config["snippets"].get("optimum_graphcore")
    return Plan(config, snippet if isinstance(snippet, dict) else None, stderr)


def _check(p: Plan, family: str) -> None:
    import poptorch

    assert p.config["training"]["recompute"] == "every-layer"  # the model checkpoints every layer
    built, opts, _ = run_poptorch_snippet(p)
    assert built == p.placement  # every part on the planned IPU and in the planned stage
    assert len(poptorch.CHECKPOINTS) == len(p.rows)  # each part's output checkpointed
    if p.config["num_ipus"] > 1:
        assert opts.value("_Popart.set") == ("autoRecomputation", 3)
    assert p.ipu_config is not None, "a PopTorch default placement is one optimum builds too (last or wrap)"
    assert p.ipu_config["recompute_checkpoint_every_layer"] is True
    for name in (WRAP_MODELS if p.wraps else LAST_MODELS)[family]:
        blocks, _, checkpoints = build_with_optimum(family, name, p.ipu_config, "training", len(p.model_layers))
        assert blocks == expected_blocks(p, blocks), name
        assert checkpoints > 0, name


@pytest.mark.parametrize("case", sorted(CASES))
def test_defaults_build_the_plan(tmp_path: Path, case: str) -> None:
    plan, family = _generated(tmp_path, case)
    assert "planned as PopTorch builds it" in plan.stderr
    _check(plan, family)


@pytest.mark.parametrize("path", _extra_plans(), ids=lambda p: p.parent.name)
def test_full_size_plans_build(path: Path) -> None:
    family = "gpt2" if "gpt2" in path.parent.name else "bert"
    _check(_read(path, ""), family)

