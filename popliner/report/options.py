"""The model and run options a report states, in one place.

Every option that changes the figures belongs in :func:`model_options`. Where
the training options come from, and how a new one is given a line in
:data:`MEANINGS`: docs/report.md ('Adding an option').
"""

from __future__ import annotations

from dataclasses import dataclass

from popliner.analysis import Analysis
from popliner.config.model import PipelineConfig
from popliner.framework import framework_title

__all__ = ["MEANINGS", "OptionRow", "model_options"]

#: What each option means, for the report's reader.
MEANINGS: dict[str, str] = {
    "mode": "training adds activation stashes and backward stages; inference runs forward only",
    "framework": "what builds the pipeline from the config (found in the profile, or --framework)",
    "recompute": "which activations are recomputed in the backward pass instead of stashed",
    "optimizer_state": "where the optimizer state (e.g. Adam moments) lives",
    "replication_factor": "copies of the pipeline (data parallel); IPUs in total = K x R",
    "sharded_optimizer_state": "optimizer state divided over the replicas",
    "recompute_requested": "the recomputation asked for; `auto` chose the least that makes the split fit",
    "head_placement": "which IPU holds the operations without a layer (embedding and head)",
    "update_regex": "names of the weight-update operations (they find the optimizer state)",
    "optimizer_state_regex": "names of the variables that are optimizer state (replaces the rule)",
    "layer_rule": "how operations were grouped into layers",
    "counted_variables": "whose variables count towards a stage's memory",
    "gradient_accumulation": "micro-batches per step (G); the pipeline needs G >= its stages",
    "micro_batch_size": "samples per micro-batch, for the throughput",
    "link_bandwidth": "bytes per second of an inter-IPU copy",
    "sync_cycles": "clock cycles of the sync before each copy phase",
    "solver": "how the split was found",
}


@dataclass(frozen=True)
class OptionRow:
    name: str
    value: str
    meaning: str


def model_options(analysis: Analysis, config: PipelineConfig, gradient_accumulation: int, micro_batch_size: int,
                  link_bandwidth: float, sync_cycles: float) -> tuple[OptionRow, ...]:
    """The options in force for the report's figures, model options first."""
    opts = analysis.options
    values: dict[str, object] = {"mode": analysis.mode}
    # The config's record wins: it names the framework the split was planned for.
    values["framework"] = (framework_title(config.framework) if config.framework is not None
                           else analysis.framework.describe())
    if config.options is not None:
        # The config's record: the options its figures, and this report's, were computed with.
        values.update(config.options.as_document())
    rule = analysis.named_layers.rule  # the naming rule; the head placement's groups are said after it
    values["layer_rule"] = (f"--layer-name-regex {opts.layer_name_regex}" if rule == "regex" else f"preset {rule}") + (
        f"; embedding and head as layers of their own (head placement {analysis.layout.placement})"
        if analysis.layout.grouped else "")
    values["counted_variables"] = ("operations with a layer (PopLiner's rule)" if opts.layered_vars_only
                                   else "all operations (--all-vars)")
    values["gradient_accumulation"] = gradient_accumulation
    values["micro_batch_size"] = micro_batch_size
    values["link_bandwidth"] = f"{link_bandwidth:.4g} B/s"
    values["sync_cycles"] = f"{sync_cycles:g}"
    if config.solver:
        values["solver"] = f"{config.solver} ({config.solver_status})" if config.solver_status else config.solver
    return tuple(OptionRow(name, _text(value), MEANINGS.get(name, "")) for name, value in values.items())


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
