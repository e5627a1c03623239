"""What ``popliner plan`` writes: the ranked table, the JSON document, and the chosen configuration's configs."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from popliner.config.model import ConfigTraining, PipelineConfig, analysis_config, config_training
from popliner.errors import UsageProblem
from popliner.pod.plan import PodConfig, PodPlan
from popliner.textsafe import shown

if TYPE_CHECKING:
    from popliner.memory.training import AppliedRecompute

__all__ = ["pick", "pipeline_config", "plan_document", "plan_table", "pod_ipu_config"]


def pick(plan: PodPlan, rank: int) -> PodConfig:
    """The configuration at ``rank`` (1 = the fastest) among those that fit."""
    fitting = plan.fitting
    if not fitting:
        raise UsageProblem(f"{plan.profile_path}: no configuration fits a pod of {plan.request.pod_ipus} IPUs, so "
                           "there is none to write; see the reasons with --all")
    if not 1 <= rank <= len(fitting):
        raise UsageProblem(f"--pick {rank}: the plan has {len(fitting)} configuration(s) that fit; "
                           f"pick one of 1..{len(fitting)}")
    return fitting[rank - 1]


def pipeline_config(plan: PodPlan, config: PodConfig) -> PipelineConfig:
    """The pipeline config of one configuration: its split, G, and its training options with R replicas."""
    assert config.split is not None and config.gradient_accumulation is not None
    analysis = plan.analysis_of(config)
    training = None
    if analysis.mode == "training":
        options = analysis.options.training
        training = dataclasses.replace(config_training(options, cast("AppliedRecompute", config.recompute)),
                                       replication_factor=config.replicas)
    # The layer options and framework recorded as --solve records them: check and simulate apply them.
    return analysis_config(analysis, config.split, config.gradient_accumulation, training)


def pod_ipu_config(cfg: PipelineConfig, config: PodConfig) -> dict[str, Any]:
    """The optimum-graphcore ``IPUConfig`` of one configuration (replicas in inference too).

    optimum builds a head placed ``last`` or ``wrap`` (or one IPU): for ``first``
    this raises UsageProblem (``--head-placement last,wrap`` plans only those).
    """
    from popliner.config.snippets import ipu_config

    return ipu_config(cfg, cfg.options or ConfigTraining(replication_factor=config.replicas))


def _rank_of(plan: PodPlan) -> dict[int, int]:
    return {id(c): k + 1 for k, c in enumerate(plan.fitting)}


def plan_document(plan: PodPlan, everything: bool = False) -> dict[str, Any]:
    """The JSON document: the request, the constants, and every configuration that fits (all with ``everything``)."""
    request, constants = plan.request, plan.request.constants
    ranks = _rank_of(plan)
    shown = plan.configs if everything else plan.fitting
    return {
        "profile": plan.profile_path,
        "profile_sha256": plan.profile_sha256,
        "mode": plan.mode,
        "pod_ipus": request.pod_ipus,
        "global_batch": plan.global_batch,
        "micro_batch": request.micro_batch,
        "budget_bytes": shown[0].budget if shown else None,
        "constants": {"clock_hz": plan.clock_hz, "link_bandwidth": constants.link_bandwidth,
                      "replica_bandwidth": constants.replica_bandwidth,
                      "streaming_bandwidth": constants.streaming_bandwidth, "sync_cycles": constants.sync_cycles},
        "notes": list(plan.notes),
        "fitting": len(plan.fitting),
        "configurations": [_config_document(c, ranks.get(id(c))) for c in shown],
    }


def _config_document(c: PodConfig, rank: int | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "rank": rank, "fits": c.fits, "ipus_per_replica": c.ipus_per_replica, "replicas": c.replicas,
        "gradient_accumulation": c.gradient_accumulation, "micro_batch": c.micro_batch,
        "pipeline_stages": c.pipeline_stages, "recompute": c.recompute, "head_placement": c.head_placement,
        "optimizer_state": c.optimizer_state, "sharded_optimizer_state": c.sharded_optimizer_state,
    }
    if c.reason:
        doc["reason"] = c.reason
    if c.split is not None:
        doc["fullest_ipu"] = c.fullest_ipu
        doc["fullest_bytes"] = c.fullest_bytes
        doc["headroom_bytes"] = c.headroom_bytes
        doc["ipus"] = [_ipu_document(s, grad, state) for s, grad, state in
                       zip(c.split.stages, c.gradient_bytes, c.state_bytes)]
    if c.step is not None:
        doc["step_seconds"] = round(c.step.seconds, 9)
        doc["step_parts_seconds"] = {name: round(value, 9) for name, value in c.step.parts.items()}
        doc["pipeline_cycles"] = round(c.step.pipeline_cycles, 3)
        doc["bound"] = c.step.bound
        doc["samples_per_second"] = None if c.samples_per_second is None else round(c.samples_per_second, 3)
    return doc


def _ipu_document(s: Any, gradient_bytes: int, state_bytes: int) -> dict[str, Any]:
    def of_figure(*names: str) -> dict[str, Any]:
        return {name: None if s.figure is None else getattr(s.figure, name) for name in names}

    return {
        "ipu": s.ipu, "layers": list(s.layers), "worst_tile": s.worst_tile, "worst_tile_bytes": s.worst_tile_bytes,
        **of_figure("forward_cycles", "backward_cycles", "recompute_cycles", "head_cycles"),
        "bytes_in": s.bytes_in,
        # The part of bytes_in sent back (gradients): the rest goes forwards, as the simulator sends them.
        **of_figure("gradient_bytes_in"),
        "gradient_bytes": gradient_bytes, "streamed_state_bytes": state_bytes,
    }


def plan_table(plan: PodPlan, everything: bool = False, limit: int | None = None) -> str:
    """The ranked table for stderr: the first ``limit`` configurations that fit (all, and the rest, with
    ``everything``)."""
    header = ("rank", "K x R", "G", "recompute", "head", "opt. state", "fullest", "samples/s", "bound", "split")
    ranks = _rank_of(plan)
    rows = [_row(c, str(ranks[id(c)])) for c in plan.fitting[:limit]]
    if everything:
        rows.extend(_row(c, "-") for c in plan.configs if not c.fits)
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in enumerate(header)]
    lines = ["  ".join(v.rjust(w) if k in (0, 2, 6, 7) else v.ljust(w) for k, (v, w) in
                       enumerate(zip(line, widths))).rstrip() for line in (header, *rows)]
    return "\n".join(lines) + "\n"


def _row(c: PodConfig, rank: str) -> tuple[str, ...]:
    state = c.optimizer_state + (" sharded" if c.sharded_optimizer_state else "")
    fullest = f"{c.fullest_bytes / c.bytes_per_tile:.0%}" if c.fullest_bytes is not None else "-"
    rate = f"{c.samples_per_second:,.1f}" if c.samples_per_second is not None else "-"
    if c.step is not None and c.step.seconds > 0:
        parts = c.step.parts
        bound = f"{c.step.bound} {parts[c.step.bound] / c.step.seconds:.0%}"
        # The largest of the other parts too: what to attack next when compute bounds it.
        other = max((n for n in parts if n != c.step.bound), key=lambda n: parts[n])
        if parts[other] > 0:
            bound += f" ({other} {parts[other] / c.step.seconds:.0%})"
    else:
        bound = "-"
    g = str(c.gradient_accumulation) if c.gradient_accumulation is not None else "-"
    split = shown(c.split_text) if c.fits else c.reason  # layer names come from the user's profile
    return (rank, f"{c.ipus_per_replica} x {c.replicas}", g, c.recompute, c.head_placement, state, fullest, rate,
            bound, split)
