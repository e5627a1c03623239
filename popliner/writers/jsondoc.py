"""JSON documents: a solved split (``--solve``'s stdout) and a simulation (``simulate --json``, ``-o FILE.json``).

Both are plain JSON-ready data with no wall-clock figures, so the same inputs give the same bytes.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from popliner.writers.writer import Functions, json_of

if TYPE_CHECKING:
    from popliner.plan import SplitPlan
    from popliner.simulator.engine import SimResult
    from popliner.writers.simulation import Simulation

__all__ = ["JSON", "PlanDocument", "result_document", "simulation_document", "split_document"]


@dataclass(frozen=True)
class PlanDocument:
    """The JSON of ``popliner plan`` (:func:`popliner.pod.output.plan_document`)."""

    document: dict[str, Any]


def split_document(plan: SplitPlan) -> dict[str, Any]:
    """The plan's split as plain JSON-able data, with its framework and training options; no wall-clock figures,
    so it is reproducible."""
    split, analysis, placement = plan.split, plan.analysis, plan.layout.placement
    where = "the head is a pipeline stage of its own on IPU 0" if placement == "wrap" else "the head on the last IPU"
    doc: dict[str, Any] = {
        "profile": analysis.profile.path,
        "profile_sha256": analysis.profile.sha256,
        "solver": split.solver,
        "status": split.status,
        "mode": split.mode,
        "num_ipus_requested": split.num_ipus_requested,
        "num_ipus_used": split.num_ipus_used,
        "layers_per_ipu": plan.layout.model_layer_counts([s.layers for s in split.stages]),
        "budget_bytes_per_tile": split.budget_bytes,
        "objective": split.objective,
        "bound": split.bound,
        "gap": split.gap,
        "note": split.note,
        "unlayered_operations": "placed with the first stage" if placement == "first" else (
            f"embedding and head are layers of their own, {where} (--head-placement {placement})"),
        "stages": [
            {
                "index": s.index,
                "ipu": s.ipu,
                "first_layer": s.first_layer,
                "last_layer": s.last_layer,
                "layers": list(s.layers),
                "memory_bytes_summed_over_tiles": s.memory.as_dict() | {"total": s.memory.total},
                "worst_tile": s.worst_tile,
                "worst_tile_bytes": s.worst_tile_bytes,
                "worst_tile_stash_bytes": s.worst_tile_stash,
                "copy_buffer_bytes_per_tile": s.copy_buffer,
                "stash_entries": s.stash_entries,
                "stash_bytes_summed_over_tiles": s.stash_bytes,
                "cycles": s.cycles,
                "bytes_in": s.bytes_in,
                "bytes_out": s.bytes_out,
                "fits": s.fits,
                **({"overflow": {
                    "tile": s.overflow.tile,
                    "step": s.overflow.step,
                    "largest_live_variables": [{"name": v.name, "bytes": v.bytes} for v in s.overflow.largest_live],
                }} if s.overflow is not None else {}),
            }
            for s in split.stages
        ],
        "framework": analysis.framework.as_document(),
    }
    if plan.training is not None:
        # The options as asked, with the recomputation the figures assume (``compiled`` when the profile has it)
        # and the optimizer state as recorded (``off-chip`` when the profile was compiled so).
        doc["training"] = analysis.options.training.as_dict() | {
            "recompute": plan.recompute_applied, "optimizer_state": plan.training.optimizer_state}
    return doc


def simulation_document(sim: Simulation) -> dict[str, Any]:
    """The summary of a simulation: where it came from, the result, and the config's training options."""
    doc: dict[str, Any] = {"config": sim.config, "figures_from": sim.source}
    doc.update(result_document(sim.result))
    if sim.training is not None:
        doc["training"] = sim.training.as_document()
    return doc


def result_document(result: SimResult) -> dict[str, Any]:
    """Summary as JSON-ready data (no schedule; see the trace for that)."""
    from popliner.simulator.engine import memory_over_time  # the simulator only for a simulation (a solve's time)
    from popliner.writers.simulation import mode_of

    over_time = memory_over_time(result)
    return {
        "mode": mode_of(result),
        "num_ipus": len(result.ipus),
        "pipeline_stages": result.num_stages,
        "micro_batches": result.micro_batches,
        "micro_batch_size": result.micro_batch_size,
        "execution": result.execution,
        "pipeline_cycles": result.num_cycles,
        "clock_hz": result.clock_hz,
        "link_bandwidth": result.link_bandwidth,
        "sync_cycles": result.sync_cycles,
        "step_cycles": result.step_cycles,
        "step_seconds": result.step_seconds,
        "throughput_samples_per_s": result.throughput,
        "shares": {
            "compute": result.compute_share,
            "fill_flush": result.fill_flush_share,
            "imbalance": result.imbalance_share,
            "communication": result.communication_share,
        },
        "budget_bytes": result.budget_bytes,
        "fits": result.fits,
        "stages": [
            {"index": s.index, "ipu": s.ipu, "kind": s.kind, "cycles": s.cycles,
             "recompute_cycles": s.recompute_cycles, "send_bytes": s.send_bytes, "layers": s.label}
            for s in result.stages
        ],
        "ipus": [
            {"ipu": u.ipu, "stages": list(u.stages), "busy_cycles": u.busy_cycles, "utilisation": u.utilisation,
             "fill_flush_cycles": u.fill_flush_cycles, "imbalance_cycles": u.imbalance_cycles,
             "communication_cycles": u.communication_cycles, "max_stash_entries": u.max_stash_entries,
             "worst_tile": u.worst_tile, "resident_bytes": u.base_bytes,
             "stash_in_flight_bytes": u.stash_bytes,
             "copy_buffer_bytes": u.copy_buffer_bytes, "peak_bytes": u.peak_bytes, "fits": u.fits,
             "memory_over_time": [{"time_us": round(p.time * 1e6 / result.clock_hz, 6), "stash_entries": p.entries,
                                   "bytes": p.bytes} for p in over_time.get(u.ipu, ())]}
            for u in result.ipus
        ],
    }


JSON: Functions = {"Simulation": json_of(simulation_document),
                   "SplitPlan": json_of(split_document),
                   "PlanDocument": json_of(operator.attrgetter("document"))}
