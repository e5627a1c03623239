"""Ready-to-paste placement code for PopART, PopTorch and optimum-graphcore.

What each holds, and that all three are regenerated from ``stages[].layers``
whenever a config is written or read: docs/pipeline-config.md ('Snippets').
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from popliner.config.model import ConfigTraining, PipelineConfig
from popliner.errors import UsageProblem
from popliner.textsafe import shown


class FlowList(list):  # type: ignore[type-arg]
    """A list the YAML writer puts on one line (short lists of numbers)."""

__all__ = [
    "DEFAULT_MATMUL_PROPORTION",
    "FlowList",
    "ipu_config",
    "memory_settings",
    "optimum_check",
    "optimum_models",
    "optimum_problem",
    "optimum_say",
    "optimum_snippet",
    "popart_snippet",
    "poptorch_snippet",
    "snippets",
]

log = logging.getLogger("popliner")

#: Poplar's default ``availableMemoryProportion``: what a profile compiled
#: without setting it used for matmul and convolution temporaries. popliner's
#: figures hold for the proportion the profile was compiled with.
DEFAULT_MATMUL_PROPORTION = 0.6


def snippets(cfg: PipelineConfig) -> dict[str, Any]:
    """The ``snippets`` block of the YAML document, in a fixed key order."""
    return {
        "popart": popart_snippet(cfg),
        "poptorch": poptorch_snippet(cfg),
        "optimum_graphcore": optimum_snippet(cfg),
    }


def _q(text: str) -> str:
    """``text`` as a Python string literal: whatever it holds, it cannot end the literal or the line.

    JSON string syntax is valid Python string syntax for any text, and JSON escapes quotes, backslashes
    and C0 controls; the other non-printable characters (DEL, C1 controls, U+2028/U+2029, bidi
    overrides) are escaped too, so that the line reads as it parses.
    """
    return shown(json.dumps(text, ensure_ascii=False))


def _header(cfg: PipelineConfig, tool: str) -> list[str]:
    return [
        f"# {tool}: {cfg.num_ipus} IPUs, {cfg.mode}, {cfg.num_pipeline_stages} pipeline stages,",
        f"# {cfg.gradient_accumulation} micro-batches per step (written by popliner).",
    ]


def popart_snippet(cfg: PipelineConfig) -> str:
    """Per-layer ``virtualGraph``/``pipelineStage`` table plus the builder scope sketch."""
    lines = _header(cfg, "PopART")
    if cfg.training:
        lines += [
            "# Forward ops of a layer get the IPU's forward pipeline stage; PopART puts",
            f"# their gradient ops on stage {2 * cfg.num_ipus - 2} - ipu by itself.",
        ]
    lines += ["import popart", "", "PLACEMENT = {  # layer -> (virtualGraph, pipelineStage)"]
    lines += [f"    {_q(p.name)}: ({p.ipu}, {p.pipeline_stage})," for p in cfg.placements]
    lines += [
        "}",
        "",
        "builder = popart.Builder()",
        "for layer, (ipu, stage) in PLACEMENT.items():",
        "    with builder.virtualGraph(ipu), builder.pipelineStage(stage):",
        "        ...  # add the ops of `layer` here",
        "",
        "opts = popart.SessionOptions()",
        "opts.virtualGraphMode = popart.VirtualGraphMode.Manual",
        "opts.enablePipelining = True",
    ]
    if cfg.training:
        lines += [
            "opts.enableGradientAccumulation = True",
            f"opts.accumulationFactor = {cfg.gradient_accumulation}",
        ]
        lines += _popart_training(cfg.options or ConfigTraining())
    else:
        lines += [f"# batches per step: popart.DataFlow({cfg.gradient_accumulation}, anchors)"]
    return "\n".join(lines) + "\n"


def _popart_training(t: ConfigTraining) -> list[str]:
    """SessionOptions for the recorded training options (PopART's names)."""
    lines = [f"# Training options of popliner's figures: {shown(t.summary())}."]
    if t.recompute in ("pipeline", "every-layer"):
        lines.append("opts.autoRecomputation = popart.RecomputationType.Pipeline")
    if t.recompute == "every-layer":
        lines += ["# every-layer: in each layer's scope above, checkpoint its output so that only",
                  "# the layer outputs are stashed and the rest is recomputed layer by layer:",
                  "#     x = builder.checkpointOutput([x])[0]"]
    elif t.recompute == "compiled":
        lines.append("# the profile was compiled with recomputation: keep the recomputation settings it used")
    location = "opts.optimizerStateTensorLocationSettings.location"
    if t.optimizer_state == "off-chip":
        lines.append(f"{location}.storage = popart.TensorStorage.OffChip")
    if t.sharded_optimizer_state:
        lines.append(f"{location}.replicatedTensorSharding = popart.ReplicatedTensorSharding.On")
    if t.replication_factor > 1:
        lines += ["opts.enableReplicatedGraphs = True", f"opts.replicatedGraphCount = {t.replication_factor}"]
    return lines


def poptorch_snippet(cfg: PipelineConfig) -> str:
    """A ``poptorch.BeginBlock`` on every part (embedding, each layer, head) and the AutoStage that stages them.

    A layout whose stage is not its IPU (a head wrapped onto IPU 0) takes
    ``AutoIncrement``, any other ``SameAsIpu``; why, with PopTorch's sources:
    docs/pipeline-config.md ('Snippets').
    """
    lines = _header(cfg, "PopTorch")
    lines += ["import poptorch", "", "IPU_OF_LAYER = {  # layer -> ipu_id, in model order"]
    lines += [f"    {_q(p.name)}: {p.ipu}," for p in cfg.placements]
    lines += ["}", "", "PIPELINE_STAGE = {  # layer -> the pipeline stage PopTorch gives its block"]
    lines += [f"    {_q(p.name)}: {p.pipeline_stage}," for p in cfg.placements]
    lines += [
        "}",
        "",
        "",
        "def begin_block(model, path, ipu):",
        "    # path: the module path of the layer in your model (e.g. \"bert.encoder.layer.3\";",
        "    # with --layer-preset huggingface/gpt2/llama/timm/torchvision the layer names are such paths)",
        "    parent, _, name = path.rpartition(\".\")",
        "    owner = model.get_submodule(parent) if parent else model",
        "    setattr(owner, name, poptorch.BeginBlock(getattr(owner, name), user_id=path, ipu_id=ipu))",
        "",
        "",
        "# Every part starts a block on its IPU, so that nothing runs where the plan does not put it.",
        "for path, ipu in IPU_OF_LAYER.items():",
        "    begin_block(model, path, ipu)",
        "",
    ]
    for s in cfg.stages:
        tail = f" .. {s.layers[-1]}" if len(s.layers) > 1 else ""
        # A comment ends at the first line break: names go in with every non-printable character escaped.
        lines.append(f"# IPU {s.ipu}: {len(s.layers)} layer(s), {shown(s.layers[0])}{shown(tail)}")
    lines += _poptorch_layout_notes(cfg)
    # A part that runs in a stage other than its IPU's number (a wrapped head) cannot be staged by SameAsIpu.
    auto = "AutoIncrement" if any(p.pipeline_stage != p.ipu for p in cfg.placements) else "SameAsIpu"
    lines += ["", "opts = poptorch.Options()",
              f"opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.{auto}))"]
    if cfg.training:
        lines.append(f"opts.Training.gradientAccumulation({cfg.gradient_accumulation})")
        lines += _poptorch_training(cfg.options or ConfigTraining(), cfg.num_ipus)
    else:
        lines.append(f"opts.deviceIterations({cfg.gradient_accumulation})")
    return "\n".join(lines) + "\n"


def _poptorch_layout_notes(cfg: PipelineConfig) -> list[str]:
    """What the reader must know about the embedding and head for PopTorch to build the plan."""
    if cfg.head_wraps:
        return ["# The head runs on IPU 0 after the last IPU, a pipeline stage of its own",
                f"# ({cfg.stage_layout.head_stage}): AutoIncrement gives each new block the next stage and PopTorch",
                "# merges consecutive blocks on one IPU, so the stages are those of PIPELINE_STAGE."]
    if cfg.layout.grouped or cfg.num_ipus == 1:
        return []
    return ["# --head-placement first: popliner's figures put the operations without a layer on IPU 0, in its",
            "# first stage. Give your embedding module a block on IPU 0 as well (begin_block(model, PATH, 0)).",
            "# PopTorch runs whatever follows the last block in that block: a head after the last layer runs",
            f"# on IPU {cfg.num_ipus - 1}, not on IPU 0 as the figures assume. Solve with --head-placement last",
            "# or wrap for figures of the pipeline PopTorch builds."]


def _poptorch_training(t: ConfigTraining, num_ipus: int) -> list[str]:
    """poptorch.Options calls for the recorded training options (PopTorch's names)."""
    lines = [f"# Training options of popliner's figures: {shown(t.summary())}."]
    if t.recompute in ("pipeline", "every-layer"):
        lines.append("opts._Popart.set(\"autoRecomputation\", 3)  # popart.RecomputationType.Pipeline")
    elif t.recompute == "none" and num_ipus > 1:
        # PopTorch turns pipeline recomputation on by itself over more than one IPU (Compiler.cpp),
        # unless the option is set: the figures are for none.
        lines.append("opts._Popart.set(\"autoRecomputation\", 0)  # popart.RecomputationType.None: "
                     "PopTorch would recompute by itself")
    if t.recompute == "every-layer":
        lines += [
            "",
            "",
            "import torch  # noqa: E402",
            "",
            "",
            "def checkpoint_output(module, inputs, output):",
            "    # every-layer: stash only each layer's output, recompute the rest in the backward pass.",
            "    # A layer may return a tuple or list (a Hugging Face block returns (hidden_states, ...)):",
            "    # each tensor in it is checkpointed, None and other values pass through unchanged.",
            "    if isinstance(output, (tuple, list)):",
            "        return type(output)(checkpoint_output(module, inputs, o) for o in output)",
            "    if not isinstance(output, torch.Tensor):",
            "        return output",
            "    return poptorch.recomputationCheckpoint(output)",
            "",
            "",
            "for path in IPU_OF_LAYER:",
            "    model.get_submodule(path).register_forward_hook(checkpoint_output)",
            "",
        ]
    elif t.recompute == "compiled":
        lines.append("# the profile was compiled with recomputation: keep the recomputation settings it used")
    if t.optimizer_state == "off-chip" or t.sharded_optimizer_state:
        on_chip = "False" if t.optimizer_state == "off-chip" else "True"
        sharded = "True" if t.sharded_optimizer_state else "False"
        lines += ["opts.TensorLocations.setOptimizerLocation(",
                  f"    poptorch.TensorLocationSettings().useOnChipStorage({on_chip})"
                  f".useReplicatedTensorSharding({sharded}))"]
    if t.replication_factor > 1:
        lines.append(f"opts.replicationFactor({t.replication_factor})")
    return lines


def optimum_snippet(cfg: PipelineConfig) -> dict[str, Any] | str:
    """The ``IPUConfig`` keys of the split: the same document as ``ipu_config.json`` (:func:`ipu_config`).

    A split optimum-graphcore cannot build (:func:`optimum_problem`) gets a
    comment saying why instead: no keys that would build something else.
    """
    problem = optimum_problem(cfg)
    if problem is not None:
        return f"# optimum-graphcore cannot build this split: {problem}\n"
    return {key: FlowList(value) if isinstance(value, list) else value for key, value in ipu_config(cfg).items()}


#: The optimum-graphcore 0.7.1 models that build each layout (their parallelize() in models/bert and models/gpt2).
OPTIMUM_WRAP_MODELS = ("PipelinedBertForPreTraining", "PipelinedBertForMaskedLM", "PipelinedGPT2LMHeadModel")
OPTIMUM_LAST_MODELS = ("PipelinedBertForSequenceClassification", "PipelinedBertForQuestionAnswering",
                       "PipelinedBertForTokenClassification", "PipelinedGPT2ForSequenceClassification")


def optimum_problem(cfg: PipelineConfig) -> str | None:
    """Why optimum-graphcore cannot build the split's layout, or None when it can.

    Where optimum's models put the embedding and the head, and why none builds
    ``first``: docs/pipeline-config.md ('What optimum-graphcore builds from it'). A split
    recorded ``last`` or ``wrap`` without the two groups had no operation
    left without a layer (the head is part of the model's last layer, on the
    last IPU): optimum builds that too, as it does any placement of a
    profile that left no operation without a layer (``every_op_layered``).
    """
    if cfg.num_ipus == 1 or cfg.layout.grouped or cfg.layout.placement != "first" or cfg.every_op_layered:
        return None
    return FIRST_PROBLEM


#: Why optimum-graphcore cannot build a ``--head-placement first`` split.
FIRST_PROBLEM = ("its models put the head either back on IPU 0 after the last IPU (pretraining, masked-LM and LM "
                 "heads) or on the last IPU (classification and QA heads), never on IPU 0 in its first stage as "
                 "--head-placement first plans; solve with --head-placement wrap or last (popliner plan: "
                 "--head-placement last,wrap)")


def optimum_check(cfg: PipelineConfig, option: str) -> None:
    """Refuse (UsageProblem) a split optimum-graphcore cannot build, naming the ``option`` that asked for it."""
    problem = optimum_problem(cfg)
    if problem is not None:
        raise UsageProblem(f"{option}: optimum-graphcore cannot build this split: {problem}")


def optimum_say(cfg: PipelineConfig) -> None:
    """Before writing optimum-graphcore's IPUConfig: which of its models build the split (over more than one IPU),
    and what the user must know for them to build the plan."""
    models = optimum_models(cfg)
    if cfg.num_ipus > 1 and models:
        where = "wraps the head onto IPU 0" if cfg.head_wraps else "puts the head on the last IPU"
        log.info("ipu_config.json builds this split with an optimum-graphcore model that %s: %s", where,
                 ", ".join(models))
    t = cfg.options
    if t is not None and t.recompute == "none" and cfg.num_ipus > 1:
        log.warning("optimum-graphcore trains with pipeline recomputation over more than one IPU (PopTorch turns it "
                    "on and optimum leaves it on); the figures are for none: solve with --recompute pipeline for "
                    "figures of what it builds")


def optimum_models(cfg: PipelineConfig) -> tuple[str, ...]:
    """The optimum-graphcore models whose parallelize() builds the split's layout (all of them on one IPU)."""
    if cfg.num_ipus == 1:
        return (*OPTIMUM_WRAP_MODELS, *OPTIMUM_LAST_MODELS)
    if optimum_problem(cfg) is not None:
        return ()
    return OPTIMUM_WRAP_MODELS if cfg.head_wraps else OPTIMUM_LAST_MODELS


# -- optimum-graphcore ipu_config.json ------------------------------------------


def memory_settings(options: ConfigTraining) -> dict[str, Any]:
    """The IPUConfig fields that follow the training options: recomputation and optimizer state.

    The one place that maps popliner's options onto optimum-graphcore's names;
    an option added to :class:`ConfigTraining` that IPUConfig has a field for gets it here.
    """
    return {
        "recompute_checkpoint_every_layer": options.recompute == "every-layer",
        "optimizer_state_offchip": options.optimizer_state == "off-chip",
        "replicated_tensor_sharding": options.sharded_optimizer_state and options.replication_factor > 1,
    }


def ipu_config(cfg: PipelineConfig, options: ConfigTraining | None = None) -> dict[str, Any]:
    """An optimum-graphcore ``IPUConfig`` (its ``ipu_config.json`` keys) for the config's split.

    The keys written for a training and for an inference split, and why the two
    sets: docs/pipeline-config.md ('optimum-graphcore ``ipu_config.json``').
    ``options`` default to the config's training record. Raises
    UsageProblem for a split optimum cannot build (:func:`optimum_problem`).
    """
    optimum_check(cfg, "--ipu-config-out")
    k = cfg.num_ipus
    proportions = _per_ipu(cfg.matmul_proportion, k)
    if options is None:
        options = cfg.options or ConfigTraining()
    counts = [int(n) for n in cfg.layers_per_ipu]
    prefix = "" if cfg.training else "inference_"
    out: dict[str, Any] = {
        f"{prefix}layers_per_ipu": counts,
        f"{prefix}ipus_per_replica": k,
        f"{prefix}matmul_proportion": proportions,
        f"{prefix}replication_factor": options.replication_factor,
    }
    if cfg.training:
        out["gradient_accumulation_steps"] = cfg.gradient_accumulation
        out["device_iterations"] = 1
    else:
        # optimum runs inference sharded, one micro-batch through all IPUs at a time; G batches per call.
        out["inference_device_iterations"] = cfg.gradient_accumulation
    out.update(memory_settings(options))
    return out


def _per_ipu(values: Sequence[float], k: int) -> list[float]:
    """One value per IPU: the config's were checked when it was made or read (one, or one per IPU)."""
    values = values or (DEFAULT_MATMUL_PROPORTION,)
    return [float(v) for v in values] * (k if len(values) == 1 else 1)
