"""Ready-to-paste placement code for PopART, PopTorch and optimum-graphcore.

All three are derived from ``stages[].layers``; they are regenerated every
time a config is written or read, so hand edits to them are not kept.
Layer names are the profile's; the snippets quote them as Python strings,
and the user maps them onto their own module paths where those differ.
"""

from __future__ import annotations

import json
from typing import Any

from popliner.config.model import PipelineConfig


class FlowList(list):  # type: ignore[type-arg]
    """A list the YAML writer puts on one line (short lists of numbers)."""


def flow_list(values: Any) -> FlowList:
    return FlowList(values)

__all__ = ["FlowList", "flow_list", "optimum_snippet", "popart_snippet", "poptorch_snippet", "snippets"]


def snippets(cfg: PipelineConfig) -> dict[str, Any]:
    """The ``snippets`` block of the YAML document, in a fixed key order."""
    return {
        "popart": popart_snippet(cfg),
        "poptorch": poptorch_snippet(cfg),
        "optimum_graphcore": optimum_snippet(cfg),
    }


def _q(text: str) -> str:
    # JSON string syntax is valid Python string syntax for any text.
    return json.dumps(text, ensure_ascii=False)


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
    else:
        lines += [f"# batches per step: popart.DataFlow({cfg.gradient_accumulation}, anchors)"]
    return "\n".join(lines) + "\n"


def poptorch_snippet(cfg: PipelineConfig) -> str:
    """``poptorch.BeginBlock`` at the first layer of each IPU and the matching stages."""
    lines = _header(cfg, "PopTorch")
    lines += ["import poptorch", "", "IPU_OF_LAYER = {  # layer -> ipu_id"]
    lines += [f"    {_q(p.name)}: {p.ipu}," for p in cfg.placements]
    lines += [
        "}",
        "",
        "",
        "def begin_block(model, path, ipu):",
        "    # path: the module path of the layer in your model (e.g. \"encoder.layer.3\")",
        "    parent, _, name = path.rpartition(\".\")",
        "    owner = model.get_submodule(parent) if parent else model",
        "    setattr(owner, name, poptorch.BeginBlock(getattr(owner, name), user_id=f\"ipu{ipu}\", ipu_id=ipu))",
        "",
        "",
    ]
    for s in cfg.stages:
        tail = f" .. {s.layers[-1]}" if len(s.layers) > 1 else ""
        lines.append(f"begin_block(model, {_q(s.layers[0])}, {s.ipu})  # IPU {s.ipu}: {s.layers[0]}{tail}")
    lines += ["", "opts = poptorch.Options()", "opts.setExecutionStrategy(poptorch.PipelinedExecution("]
    lines += [f"    poptorch.Stage(\"ipu{s.ipu}\").ipu({s.ipu})," for s in cfg.stages]
    lines.append("))")
    if cfg.training:
        lines.append(f"opts.Training.gradientAccumulation({cfg.gradient_accumulation})")
    else:
        lines.append(f"opts.deviceIterations({cfg.gradient_accumulation})")
    return "\n".join(lines) + "\n"


def optimum_snippet(cfg: PipelineConfig) -> dict[str, Any]:
    """Keys of a Hugging Face optimum-graphcore ``IPUConfig``."""
    counts = cfg.layers_per_ipu
    out: dict[str, Any] = {"ipus_per_replica": cfg.num_ipus, "layers_per_ipu": flow_list(counts)}
    if cfg.training:
        out["gradient_accumulation_steps"] = cfg.gradient_accumulation
    else:
        out["inference_layers_per_ipu"] = flow_list(counts)
        out["inference_device_iterations"] = cfg.gradient_accumulation
    return out
