"""The real consumers build the plan: optimum-graphcore 0.7.1's IPUConfig and models, and the emitted PopTorch code.

For every bundled fixture, head placement (first, last, wrap) and mode, popliner
solves a split and writes its pipeline config and ``ipu_config.json``. Then:

- the real ``optimum.graphcore.IPUConfig`` loads ``ipu_config.json`` and the
  YAML's optimum snippet (the same document), the real pipelined models
  (BERT pretraining, masked LM, QA, sequence classification; GPT-2 LM head
  and sequence classification; tiny configs built here, no downloads) run
  ``parallelize()`` and a forward pass, and ``to_options()`` gives the
  execution strategy;
- the emitted PopTorch snippet runs on a model whose module paths are the
  layer names;

and every block (embedding, each layer, head) must start on the IPU and in
the pipeline stage of the plan (the config's ``layers`` table). PopTorch and
PopART need IPU hardware, so ``tests/client/standins`` records what they are
asked (blocks, stages by PopTorch's own AutoStage rule, options); nothing
else is replaced.

A block's pipeline stage is the number of IPU changes before it in forward
order: PopTorch merges consecutive blocks on one IPU into one stage
(``CompilerImpl::numPipelineStages``) and needs the raw stage ids to
ascend (its ``AutoStage`` documentation), which is checked too.

Run by ``.ci/run`` in its own step, in a virtual environment with
optimum-graphcore 0.7.1 (marker ``client``; the main suite deselects it).
popliner itself runs as a command (``POPLINER_CMD``, default ``popliner``),
in its own environment.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import FIXTURES  # not tests.helpers: this environment has no click

pytestmark = pytest.mark.client

ROOT = Path(__file__).resolve().parents[2]
BIG_TILE = "1000000000"  # every split fits: the test is about placement, not memory

#: fixture -> (model family for optimum, modes, IPUs)
CASES: dict[str, tuple[str, tuple[str, ...], int]] = {
    "tiny.json": ("generic", ("inference",), 2),
    "tiny-training.json": ("generic", ("training", "inference"), 2),
    "bert-tiny-training.json": ("bert", ("training", "inference"), 3),
    "bert-tiny-inference.json": ("bert", ("inference",), 3),
    "bert-base-training.json.gz": ("bert", ("training", "inference"), 4),
    "gpt2-small-inference.json.gz": ("gpt2", ("inference",), 4),
    "resnet-small-training.json.gz": ("generic", ("training", "inference"), 4),
}
PLACEMENTS = ("first", "last", "wrap")
#: Fixtures whose head reads the embedding's weight (GPT-2's LM head): no framework builds such a weight on two
#: IPUs, so popliner refuses `last` for them (docs/pipeline-config.md#tied-heads, tests/test_tied_heads.py).
TIED = frozenset({"gpt2-small-inference.json.gz"})
PARAMS = [(f, m, p) for f, (_, modes, _) in CASES.items() for m in modes for p in PLACEMENTS
          if not (f in TIED and p == "last")]

#: The optimum models of each head layout, by family; the block names their parallelize() gives each part.
WRAP_MODELS = {"bert": ("PipelinedBertForPreTraining", "PipelinedBertForMaskedLM"),
               "gpt2": ("PipelinedGPT2LMHeadModel",)}
LAST_MODELS = {"bert": ("PipelinedBertForQuestionAnswering", "PipelinedBertForSequenceClassification"),
               "gpt2": ("PipelinedGPT2ForSequenceClassification",)}
EMBEDDING_BLOCKS = ("Embedding", "Token embedding", "Position embedding")
HEAD_BLOCKS = ("Pooler", "Classifier", "LM head", "QA Outputs", "Classifier Output", "Score")


@dataclass(frozen=True)
class Plan:
    """What popliner wrote for one case."""

    config: dict[str, Any]
    ipu_config: dict[str, Any] | None
    stderr: str

    @property
    def rows(self) -> list[dict[str, Any]]:
        return list(self.config["layers"])

    @property
    def placement(self) -> dict[str, tuple[int, int]]:
        """layer -> (ipu, forward pipeline stage), from the config's table."""
        return {r["name"]: (r["ipu"], r["pipelineStage"]) for r in self.rows}

    @property
    def model_layers(self) -> list[str]:
        """The model's own layers in model order (popliner's embedding and head groups are not layers)."""
        grouped = self.rows[0]["name"] == "embedding" and any(r["name"] == "head" for r in self.rows)
        return [r["name"] for r in self.rows if not (grouped and r["name"] in ("embedding", "head"))]

    @property
    def grouped(self) -> bool:
        return self.rows[0]["name"] == "embedding"

    @property
    def wraps(self) -> bool:
        return self.grouped and self.placement["head"][1] == self.config["num_ipus"]


def popliner(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    command = [*shlex.split(os.environ.get("POPLINER_CMD", "popliner")), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode in ok, (command, result.returncode, result.stderr[-2000:])
    return result


_PLANS: dict[tuple[str, str, str], Plan] = {}


def plan(tmp_path_factory: pytest.TempPathFactory, fixture: str, mode: str, placement: str) -> Plan:
    key = (fixture, mode, placement)
    if key not in _PLANS:
        out = tmp_path_factory.mktemp("plan")
        k = CASES[fixture][2]
        args = [str(FIXTURES / fixture), "--solve", "--num-ipus", str(k), "--exact-ipus", "--mem-per-tile", BIG_TILE,
                "--head-placement", placement, "--mode", mode, "--config-out", str(out / "pipeline.yaml"), "--no-cache"]
        if mode == "training":
            args += ["--recompute", "every-layer"]
        if CASES[fixture][0] != "generic":
            args += ["--framework", "optimum"]  # the config then says how optimum runs it
        if placement != "first":
            args += ["--ipu-config-out", str(out / "ipu_config.json"), "--matmul-proportion", "0.45"]
        result = popliner(*args)
        config = yaml.safe_load((out / "pipeline.yaml").read_text())
        ipu = json.loads((out / "ipu_config.json").read_text()) if placement != "first" else None
        _PLANS[key] = Plan(config, ipu, result.stderr)
    return _PLANS[key]


def effective_stages(blocks: list[tuple[str, int, int]]) -> dict[str, tuple[int, int]]:
    """user_id -> (ipu, pipeline stage): the stage counts the IPU changes before the block (PopTorch merges runs)."""
    raw = [stage for _, _, stage in blocks]
    assert raw == sorted(raw), f"PopTorch needs ascending stage ids in a pipeline, got {blocks}"
    out: dict[str, tuple[int, int]] = {}
    stage, last_ipu = -1, None
    for user_id, ipu, _ in blocks:
        if ipu != last_ipu:
            stage, last_ipu = stage + 1, ipu
        out.setdefault(user_id, (ipu, stage))
    return out


# ---------------------------------------------------------------------------------------- PopTorch snippet


def layered_model(names: list[str], trailing: str | None = None) -> Any:
    """A torch model whose module paths are ``names``, run in that order (and an unblocked ``trailing`` module)."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name in [*names, *([trailing] if trailing else [])]:
                self.add_module(name, torch.nn.Linear(4, 4))

        def forward(self, x: Any) -> Any:
            for module in self._modules.values():
                x = module(x)
            return x

    return Model()


def run_poptorch_snippet(p: Plan, trailing: str | None = None) -> tuple[dict[str, tuple[int, int]], Any, Any]:
    import poptorch
    import torch

    model = layered_model([r["name"] for r in p.rows], trailing)
    scope: dict[str, Any] = {"model": model}
    exec(compile(p.config["snippets"]["poptorch"], "<poptorch snippet>", "exec"), scope)  # noqa: S102
    opts = scope["opts"]
    poptorch.start_trace(opts.strategy())
    where: dict[str, Any] = {}
    if trailing:
        def note(module: Any, inputs: Any) -> None:
            where.setdefault("at", poptorch.BLOCKS[-1])

        model.get_submodule(trailing).register_forward_pre_hook(note)
    with torch.no_grad():
        model(torch.ones(1, 4))
    return effective_stages(poptorch.BLOCKS), opts, where.get("at")


@pytest.mark.parametrize(("fixture", "mode", "placement"), PARAMS)
def test_the_poptorch_snippet_builds_the_plan(tmp_path_factory: pytest.TempPathFactory, fixture: str, mode: str,
                                              placement: str) -> None:
    import poptorch

    p = plan(tmp_path_factory, fixture, mode, placement)
    built, opts, _ = run_poptorch_snippet(p)
    assert built == p.placement  # every part, on the planned IPU and in the planned stage
    strategy = opts.strategy()
    assert type(strategy) is poptorch.PipelinedExecution
    assert strategy.auto_stage == (poptorch.AutoStage.AutoIncrement if p.wraps else poptorch.AutoStage.SameAsIpu)
    stages = {name: s for name, s in _snippet_table(p.config["snippets"]["poptorch"], "PIPELINE_STAGE").items()}
    assert stages == {name: stage for name, (_, stage) in p.placement.items()}
    if mode == "training" and p.config["num_ipus"] > 1:
        assert opts.value("_Popart.set") == ("autoRecomputation", 3)  # every-layer: PopART's pipeline recomputation
    if mode == "training":
        assert len(poptorch.CHECKPOINTS) == len(p.rows)  # every-layer: each part's output is a checkpoint
    if placement == "first":
        # popliner's figures keep the operations without a layer on IPU 0; a head after the last layer runs
        # in the last block under PopTorch, and the snippet says so.
        _, _, head_block = run_poptorch_snippet(p, trailing="unlayered_head")
        last_ipu = p.config["num_ipus"] - 1
        assert head_block[1] == last_ipu != 0
        assert "a head after the last layer runs" in p.config["snippets"]["poptorch"]


def _snippet_table(code: str, name: str) -> dict[str, int]:
    scope: dict[str, Any] = {}
    start = code.index(f"{name} = {{")
    end = code.index("}", start) + 1
    exec(code[start:end], scope)  # noqa: S102
    return scope[name]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------- optimum-graphcore


def optimum_model(family: str, name: str, num_layers: int) -> Any:
    from optimum.graphcore.models.bert import modeling_bert
    from optimum.graphcore.models.gpt2 import modeling_gpt2
    from transformers import BertConfig, GPT2Config

    if family == "bert":
        config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=num_layers, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=32, num_labels=2)
        return getattr(modeling_bert, name)(config)
    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=num_layers, n_head=2, n_positions=32, num_labels=2,
                        pad_token_id=0)
    return getattr(modeling_gpt2, name)(config)


def build_with_optimum(family: str, name: str, document: dict[str, Any], mode: str,
                       num_layers: int) -> tuple[dict[str, tuple[int, int]], Any, int]:
    """Blocks of the real model parallelized by the real IPUConfig: user_id -> (ipu, stage); options; checkpoints."""
    import poptorch
    import torch
    from optimum.graphcore import IPUConfig

    ipu_config = IPUConfig(**document)
    if mode == "inference":
        ipu_config.eval()
    model = optimum_model(family, name, num_layers)
    model.ipu_config = ipu_config
    model.parallelize()
    opts = ipu_config.to_options(for_inference=mode == "inference", compile_only=True)
    poptorch.start_trace(opts.strategy())
    # torch's eval flag only picks the models' loss path (training needs labels); the blocks are parallelize()'s.
    model.eval()
    with torch.no_grad():
        model(input_ids=torch.randint(1, 64, (1, 8)))
    return effective_stages(poptorch.BLOCKS), opts, len(poptorch.CHECKPOINTS)


def expected_blocks(p: Plan, blocks: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """For each optimum block, the (ipu, stage) the plan gives the part it holds."""
    out = {}
    for user_id in blocks:
        if user_id in EMBEDDING_BLOCKS:
            out[user_id] = p.placement["embedding"] if p.grouped else p.placement[p.model_layers[0]]
        elif user_id in HEAD_BLOCKS:
            out[user_id] = p.placement["head"] if p.grouped else p.placement[p.model_layers[0]]
        else:  # Encoder{i} / Layer{i}: the model's i-th layer
            index = int(user_id.removeprefix("Encoder").removeprefix("Layer"))
            out[user_id] = p.placement[p.model_layers[index]]
    return out


OPTIMUM_PARAMS = [(f, m, pl) for f, m, pl in PARAMS if CASES[f][0] != "generic"]


@pytest.mark.parametrize(("fixture", "mode", "placement"), OPTIMUM_PARAMS)
def test_optimum_builds_the_plan_or_popliner_refuses(tmp_path_factory: pytest.TempPathFactory, fixture: str,
                                                      mode: str, placement: str) -> None:
    import poptorch

    family = CASES[fixture][0]
    p = plan(tmp_path_factory, fixture, mode, placement)
    k, n = p.config["num_ipus"], len(p.model_layers)
    if placement == "first":
        assert p.ipu_config is None
        assert str(p.config["snippets"]["optimum_graphcore"]).startswith("# optimum-graphcore cannot build")
        # What a user would write by hand from the plan's layer counts: optimum builds something else (the head
        # back on IPU 0 after the last IPU, not in stage 0 with the embedding), so popliner refuses to write it.
        counts = [sum(1 for r in p.rows if r["ipu"] == i) for i in range(k)]
        prefix = "" if mode == "training" else "inference_"
        built, _, _ = build_with_optimum(family, WRAP_MODELS[family][0],
                                         {f"{prefix}layers_per_ipu": counts, f"{prefix}ipus_per_replica": k}, mode, n)
        head = next(b for b in built if b in HEAD_BLOCKS)
        assert built[head] == (0, k) != p.placement[p.model_layers[0]]
        refused = popliner(str(FIXTURES / fixture), "--solve", "--num-ipus", str(k), "--head-placement", "first",
                           "--ipu-config-out", str(tmp_path_factory.mktemp("refused") / "ipu_config.json"), ok=(2,))
        assert "optimum-graphcore cannot build this split" in refused.stderr
        # Without --head-placement, --ipu-config-out plans for optimum-graphcore: a placement it builds.
        planned = popliner(str(FIXTURES / fixture), "--solve", "--num-ipus", str(k), "--mem-per-tile", "100000000",
                           "--ipu-config-out", str(tmp_path_factory.mktemp("planned") / "ipu_config.json"))
        assert json.loads(planned.stdout)["framework"]["name"] == "optimum"
        assert json.loads(planned.stdout).get("training", {"head_placement": "last"})["head_placement"] != "first"
        return
    assert p.ipu_config is not None
    assert p.config["snippets"]["optimum_graphcore"] == p.ipu_config  # the YAML's snippet is ipu_config.json
    assert p.config["framework"] == "optimum"
    models = (WRAP_MODELS if p.wraps else LAST_MODELS)[family]
    for name in models:  # -v names the optimum models that build the split
        assert name in p.stderr, name
    for name in models:
        built, opts, checkpoints = build_with_optimum(family, name, p.ipu_config, mode, n)
        assert built == expected_blocks(p, built), name
        assert {b for b in built if b in HEAD_BLOCKS}, f"{name}: the head has a block of its own"
        strategy = opts.strategy()
        assert type(strategy) is (poptorch.ShardedExecution if mode == "inference" else poptorch.PipelinedExecution)
        # The config says how optimum runs it, and the simulator runs that schedule.
        assert p.config["execution"] == ("sharded" if type(strategy) is poptorch.ShardedExecution else "pipelined")
        assert strategy.auto_stage == poptorch.AutoStage.AutoIncrement
        assert opts.value("setAvailableMemoryProportion") == ({f"IPU{i}": 0.45 for i in range(k)},)
        if mode == "training":
            # every-layer: optimum checkpoints every layer of pretraining/LM models, all but the last of the others
            # (the last IPU's last layer: PopART recomputes nothing in the last stage either way).
            assert checkpoints == (n if p.wraps else n - 1), name


@pytest.mark.parametrize("fixture", [f for f, (family, _, _) in CASES.items() if family != "generic"])
def test_the_optimum_snippet_loads_as_an_ipu_config(tmp_path_factory: pytest.TempPathFactory, fixture: str) -> None:
    from optimum.graphcore import IPUConfig

    mode = CASES[fixture][1][0]
    for placement in ("wrap",) if fixture in TIED else ("last", "wrap"):
        p = plan(tmp_path_factory, fixture, mode, placement)
        loaded = IPUConfig(**p.config["snippets"]["optimum_graphcore"])
        prefix = "" if mode == "training" else "inference_"
        assert getattr(loaded, f"{prefix}layers_per_ipu") == p.ipu_config[f"{prefix}layers_per_ipu"]
        assert getattr(loaded, f"{prefix}matmul_proportion") == [0.45] * p.config["num_ipus"]


@pytest.mark.parametrize("fixture", sorted(TIED))
def test_a_tied_head_on_the_last_ipu_is_refused(tmp_path_factory: pytest.TempPathFactory, fixture: str) -> None:
    # The tied weight would be read on IPU 0 (the embedding) and on the last IPU (the head): PopART's pipelining
    # refuses a weight consumed on two IPUs, so popliner refuses the placement with one line naming wrap.
    out = tmp_path_factory.mktemp("tied")
    refused = popliner(str(FIXTURES / fixture), "--solve", "--num-ipus", str(CASES[fixture][2]), "--head-placement",
                       "last", "--ipu-config-out", str(out / "ipu_config.json"), "--no-cache", ok=(2,))
    errors = [line for line in refused.stderr.splitlines() if line.startswith("popliner: error:")]
    assert len(errors) == 1 and "wrap" in errors[0], refused.stderr
    assert not (out / "ipu_config.json").exists()
