"""The pipeline config as plain frozen dataclasses, and how to make one from a split.

A config places each layer of the model on one IPU. The stage numbering
(K stages in inference, 2K-1 in training) is PopART's, from
:mod:`popliner.pipeline`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from popliner.config.layering import layer_record
from popliner.errors import UsageProblem
from popliner.layout import Layout
from popliner.memory.types import ComponentBytes
from popliner.pipeline import LayerPlacement, StageLayout
from popliner.solvers.result import SplitResult, StageResult
from popliner.training_record import ConfigTraining, config_training

if TYPE_CHECKING:
    from popliner.analysis import Analysis

__all__ = [
    "CONFIG_VERSION",
    "MODES",
    "PREDICTED_FIGURES",
    "PREDICTED_OPTIONAL",
    "ConfigStage",
    "ConfigTraining",
    "LayerPlacement",
    "PipelineConfig",
    "analysis_config",
    "check_gradient_accumulation",
    "config_from_split",
    "config_stage",
    "config_training",
    "default_gradient_accumulation",
    "layers_fingerprint",
]

CONFIG_VERSION = 1
MODES: tuple[str, ...] = ("inference", "training")
#: The figures of a stage's ``predicted`` block, by their names in the file and on :class:`ConfigStage`, in the
#: file's order (after ``for_layers`` and ``memory``).
PREDICTED_FIGURES = ("worst_tile", "worst_tile_bytes", "stash_bytes", "stash_entries", "cycles", "bytes_in")
#: Written since the training options are recorded (None when not): a config without them still loads.
PREDICTED_OPTIONAL = ("forward_cycles", "recompute_cycles", "head_cycles", "gradient_bytes_in", "stash_entry_bytes")


def default_gradient_accumulation(num_stages: int) -> int:
    """Micro-batches per step when the user gives none.

    PopART needs at least one per pipeline stage; twice as many keeps the
    fill/flush bubble (P-1)/(G+P-1) at or below a third, and 16 is the
    smallest value that is common in practice.
    """
    return max(16, 2 * num_stages)


def layers_fingerprint(layers: tuple[str, ...]) -> str:
    """Short hash of a stage's layer list; tells whether predicted figures still apply."""
    digest = hashlib.sha256("\x1f".join(layers).encode("utf-8")).hexdigest()
    return digest[:16]


@dataclass(frozen=True)
class ConfigStage:
    """One IPU's share of the model and what popliner predicted for it.

    The figures are the stage's ``predicted`` keys (``predicted_for`` is ``for_layers``:
    :func:`layers_fingerprint` of the layers they were computed for), each meaning what
    docs/pipeline-config.md ('Schema') says; an optional one is None in a config written
    before it was recorded, and ``head_cycles`` is None on all IPUs but IPU 0 of a wrapped head.
    """

    index: int
    ipu: int
    layers: tuple[str, ...]
    memory: ComponentBytes
    worst_tile: int
    worst_tile_bytes: int
    stash_bytes: int
    stash_entries: int
    cycles: int
    bytes_in: int
    predicted_for: str
    forward_cycles: int | None = None
    recompute_cycles: int | None = None
    head_cycles: int | None = None
    #: Training: the part of ``bytes_in`` sent back (the gradients); None in a config written before it was.
    gradient_bytes_in: int | None = None
    #: Bytes of one stash entry on ``worst_tile`` (an IPU that stashes); None elsewhere and in a config
    #: written before it was recorded, which the simulator then reads as ``stash_bytes`` spread evenly.
    stash_entry_bytes: int | None = None

    @property
    def predicted_stale(self) -> bool:
        """True when the layers were edited after popliner predicted the figures."""
        return self.predicted_for != layers_fingerprint(self.layers)


@dataclass(frozen=True)
class PipelineConfig:
    """A pipeline over ``len(stages)`` IPUs; ``stages[i]`` runs on IPU i.

    ``stages[].layers`` is the source of truth for placement; the per-layer
    table (:attr:`placements`) and the snippets are derived from it.
    ``model_layers`` is every layer of the model in model (data-flow) order.
    ``training`` holds the training options of the figures (None in
    inference; the defaults for a training config written before they were
    recorded).
    """

    profile_path: str
    profile_sha256: str
    tiles_per_ipu: int
    bytes_per_tile: int
    clock_hz: float
    mode: str
    gradient_accumulation: int
    stages: tuple[ConfigStage, ...]
    model_layers: tuple[str, ...]
    solver: str = ""
    solver_status: str = ""
    budget_bytes: int | None = None
    version: int = CONFIG_VERSION
    training_options: ConfigTraining | None = None
    #: The layer options the config was made with, those that differ from the defaults
    #: (:mod:`popliner.config.layering`); empty in a config written before they were recorded.
    layer_options: tuple[tuple[str, object], ...] = ()
    #: The framework the split is planned for (popliner.framework); None in a config written before it was recorded.
    framework: str | None = None
    #: optimum-graphcore's ``matmul_proportion``: one value, or one per IPU; empty for Poplar's default.
    matmul_proportion: tuple[float, ...] = ()
    #: The profile left no operation without a layer, so IPU 0 holds nothing but its layers whatever the head
    #: placement (known when the config is made from a split; not recorded in the file, read back as False).
    every_op_layered: bool = field(default=False, compare=False)

    @property
    def execution(self) -> str:
        """How the framework runs the stages: optimum-graphcore runs inference ``sharded``, the rest ``pipelined``.

        optimum's ``IPUConfig._to_options`` sets ``ShardedExecution`` for inference (one micro-batch
        passes through every IPU before the next starts) and ``PipelinedExecution`` for training.
        """
        return "sharded" if self.framework == "optimum" and not self.training else "pipelined"

    @property
    def num_ipus(self) -> int:
        return len(self.stages)

    @property
    def training(self) -> bool:
        return self.mode == "training"

    @property
    def options(self) -> ConfigTraining | None:
        """The training options of the figures: the recorded ones, the defaults for an older training config."""
        if not self.training:
            return None
        return self.training_options if self.training_options is not None else ConfigTraining()

    @property
    def layer_groups(self) -> tuple[tuple[str, ...], ...]:
        """Each IPU's layers, in IPU order."""
        return tuple(s.layers for s in self.stages)

    @property
    def layout(self) -> Layout:
        """Where the embedding and the head go: the recorded placement, else read from the stages."""
        placement = self.training_options.head_placement if self.training_options is not None else None
        return Layout.of_stages(self.layer_groups, placement, self.model_layers)

    @property
    def stage_layout(self) -> StageLayout:
        """The IPU and the pipeline stages of every part (PopART's rules in :mod:`popliner.pipeline`)."""
        return StageLayout.of(self.layout, self.layer_groups, self.training)

    @property
    def head_wraps(self) -> bool:
        """Is the head a pipeline stage of its own on IPU 0 (``--head-placement wrap``)?"""
        return self.stage_layout.wraps

    @property
    def num_pipeline_stages(self) -> int:
        return self.stage_layout.num_stages

    @property
    def placements(self) -> tuple[LayerPlacement, ...]:
        """One row per layer in model order, derived from ``stages[].layers`` (a wrapped head runs at stage K)."""
        return self.stage_layout.placements(self.model_layers)

    @property
    def layers_per_ipu(self) -> tuple[int, ...]:
        """The model's layers on each IPU, as optimum-graphcore counts them (no embedding or head group)."""
        return tuple(self.layout.model_layer_counts(self.layer_groups))

    @property
    def effective_budget(self) -> int:
        """Per-tile budget to check against: the solver's, else the whole tile."""
        return self.budget_bytes if self.budget_bytes is not None else self.bytes_per_tile


def config_from_split(
    split: SplitResult,
    *,
    profile_path: str | os.PathLike[str],
    profile_sha256: str,
    tiles: int,
    bytes_per_tile: int,
    clock_hz: float,
    gradient_accumulation: int | None,
    training: ConfigTraining | None = None,
    layer_options: tuple[tuple[str, object], ...] = (),
    framework: str | None = None,
    matmul_proportion: Sequence[float] = (),
    every_op_layered: bool = False,
) -> PipelineConfig:
    """Turn a solver's split into a config; ``None`` G picks :func:`default_gradient_accumulation`.

    ``training`` records the training options the split's figures were
    computed with (ignored in inference).
    """
    if not split.stages:
        raise UsageProblem("the split has no stages; there is nothing to write a pipeline config for")
    if split.mode not in MODES:
        raise UsageProblem(f"split mode {split.mode!r} is neither 'inference' nor 'training'")
    training_split = split.mode == "training"
    stages = tuple(config_stage(position, s, training_split) for position, s in enumerate(split.stages))
    recorded = (training or ConfigTraining()) if training_split else None
    groups = [s.layers for s in stages]
    layout = Layout.of_stages(groups, recorded.head_placement if recorded is not None else None)
    num_stages = StageLayout.of(layout, groups, training_split).num_stages
    # G: the one given (checked against the pipeline stages) or the default.
    g = default_gradient_accumulation(num_stages) if gradient_accumulation is None else gradient_accumulation
    check_gradient_accumulation(g, num_stages)
    return PipelineConfig(
        profile_path=os.fspath(profile_path), profile_sha256=profile_sha256, tiles_per_ipu=int(tiles),
        bytes_per_tile=int(bytes_per_tile), clock_hz=float(clock_hz), mode=split.mode, gradient_accumulation=int(g),
        stages=stages, model_layers=layout.names, solver=split.solver, solver_status=split.status,
        budget_bytes=int(split.budget_bytes), training_options=recorded, layer_options=layer_options,
        framework=framework, matmul_proportion=check_matmul_proportion(matmul_proportion, len(stages)),
        every_op_layered=every_op_layered,
    )


def analysis_config(analysis: Analysis, split: SplitResult, gradient_accumulation: int | None,
                    training: ConfigTraining | None, matmul_proportion: Sequence[float] = ()) -> PipelineConfig:
    """:func:`config_from_split` for a split of ``analysis``: its profile, target, layer options and framework."""
    t = analysis.profile.target
    return config_from_split(split, profile_path=analysis.profile.path, profile_sha256=analysis.profile.sha256,
                             tiles=t.tiles_per_ipu, bytes_per_tile=t.bytes_per_tile, clock_hz=t.clock_hz,
                             gradient_accumulation=gradient_accumulation, training=training,
                             layer_options=layer_record(analysis.options), framework=analysis.framework.name,
                             matmul_proportion=matmul_proportion, every_op_layered=not analysis.base.has_unlayered)


def check_matmul_proportion(values: Sequence[float], num_ipus: int) -> tuple[float, ...]:
    """One value for every IPU or one per IPU (each is a fraction in (0, 1]: the option's callback checks it)."""
    if len(values) not in (0, 1, num_ipus):
        raise UsageProblem(f"--matmul-proportion: give one value or one per IPU ({num_ipus}), not {len(values)}")
    return tuple(float(v) for v in values)


def check_gradient_accumulation(g: int, num_stages: int) -> None:
    """PopART refuses fewer micro-batches than pipeline stages (no main phase)."""
    if g < num_stages:
        raise UsageProblem(
            f"--gradient-accumulation {g} is smaller than the {num_stages} pipeline stages; "
            f"a pipeline needs at least one micro-batch per stage: use {num_stages} or more"
        )


def config_stage(position: int, s: StageResult, training: bool) -> ConfigStage:
    """The saved record of an IPU: the one way a split's :class:`StageResult` (and its figure) becomes one.

    Everything the simulator needs of the IPU is taken here, so that a config
    just planned and the same config read back from its file simulate alike
    (:func:`popliner.simulator.inputs.ipu_figures`).
    """
    if s.ipu != position:
        raise UsageProblem(f"split stage {position} is on IPU {s.ipu}; a pipeline config needs stage i on IPU i")
    if not s.layers:
        raise UsageProblem(f"split stage {position} has no layers; every IPU of a pipeline needs at least one")
    layers = tuple(str(layer) for layer in s.layers)
    f = s.figure
    figures: dict[str, Any] = {key: int(getattr(s, key)) for key in PREDICTED_FIGURES}
    return ConfigStage(
        index=position,
        ipu=position,
        layers=layers,
        memory=ComponentBytes(*(int(v) for v in s.memory.as_tuple(with_other=True))),
        **figures,
        predicted_for=layers_fingerprint(layers),
        forward_cycles=int(f.forward_cycles) if f is not None else None,
        recompute_cycles=int(f.recompute_cycles) if f is not None else None,
        head_cycles=int(f.head_cycles) if f is not None and f.head_cycles else None,
        gradient_bytes_in=int(f.gradient_bytes_in) if f is not None and training else None,
        stash_entry_bytes=(int(f.stash_entry_per_tile[f.worst_tile])  # an entry on the worst tile, if it stashes
                           if f is not None and f.stash_entries and f.memory.tiles else None),
    )
