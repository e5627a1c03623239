"""Turn a pipeline config (and optionally a profile's analysis) into simulator stages.

K IPUs give K pipeline stages in inference and 2K-1 in training:
forward of IPU i is stage i, backward of IPU i is stage 2K-2-i, and the last
IPU runs forward and backward in one stage K-1. A head wrapped onto IPU 0
adds stage K (its forward and backward) and moves the backwards to 2K-i.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from popliner.config.model import ConfigStage, PipelineConfig
from popliner.errors import ConfigError
from popliner.pipeline import StageFigure, StageLayout, copy_buffer_per_tile
from popliner.simulator.engine import SimStage

__all__ = [
    "BACKWARD_FRACTION",
    "AnalysisLike",
    "IpuFigures",
    "SimInputs",
    "inputs_from_analysis",
    "inputs_from_config",
    "ipu_figures",
    "pipeline_stages",
]

logger = logging.getLogger(__name__)

#: Share of a stage's training cycles taken by the backward pass when only
#: the total is known (the config stores forward + backward): backward
#: computes gradients for both inputs and weights, about twice the forward.
BACKWARD_FRACTION = 2.0 / 3.0


class AnalysisLike(Protocol):
    """The part of ``popliner.analysis.Analysis`` the simulator uses."""

    @property
    def layer_names(self) -> tuple[str, ...]: ...

    @property
    def mode(self) -> str: ...

    def pipeline_figures(self, stages: Sequence[Sequence[str]]) -> tuple[StageFigure, ...]: ...


@dataclass(frozen=True)
class SimInputs:
    """Stages plus the target figures they were computed for."""

    stages: tuple[SimStage, ...]
    tiles_per_ipu: int
    clock_hz: float
    source: str  # "config" or "profile"


@dataclass(frozen=True, eq=False)
class IpuFigures:
    """Per IPU (config stage): what the pipeline stages are built from."""

    forward_cycles: int
    backward_cycles: int
    memory_per_tile: np.ndarray
    stash_entry_per_tile: np.ndarray | None
    bytes_in: int  # bytes crossing the boundary into this IPU per micro-batch, both ways
    label: str
    recompute_cycles: int = 0  # part of backward_cycles: forward work run again (recomputation)
    #: Training: the part of ``bytes_in`` sent back (gradients); None for a config that does not record it,
    #: whose whole ``bytes_in`` is then sent each way (as configs were simulated before it was recorded).
    gradient_bytes_in: int | None = None

    @property
    def received(self) -> int:
        """Bytes sent forwards into this IPU per micro-batch (activations)."""
        return self.bytes_in - self.gradient_bytes_in if self.gradient_bytes_in is not None else self.bytes_in

    @property
    def returned(self) -> int:
        """Bytes this IPU sends back over the same boundary per micro-batch (gradients)."""
        return self.gradient_bytes_in if self.gradient_bytes_in is not None else self.bytes_in


def pipeline_stages(plan: StageLayout, ipus: Sequence[IpuFigures], head_cycles: int = 0) -> tuple[SimStage, ...]:
    """Expand per-IPU figures into the pipeline stages of ``plan`` (K in inference, 2K-1 in training).

    ``head_cycles``: the cycles of a head ``plan`` wraps onto IPU 0 (one more
    stage, K; the backwards move one stage later).
    """
    k = len(ipus)
    if plan.num_ipus != k:
        raise ValueError(f"{k} IPUs of figures for a split over {plan.num_ipus}")
    if plan.wraps:
        return _wrapped_stages(plan, ipus, head_cycles)
    if not plan.training:
        return tuple(
            SimStage(plan.forward_stage(i), i, "forward", f.forward_cycles, ipus[i + 1].bytes_in if i + 1 < k else 0,
                     f.memory_per_tile, None, f.label)
            for i, f in enumerate(ipus)
        )
    out = [
        SimStage(plan.forward_stage(i), i, "forward", f.forward_cycles, ipus[i + 1].received, f.memory_per_tile,
                 f.stash_entry_per_tile, f.label)
        for i, f in enumerate(ipus[:-1])
    ]
    last = ipus[-1]
    # The last IPU computes the loss and sends the gradient of its input back.
    # Its re-run forward work (every-layer recomputation) comes after its forward part.
    out.append(SimStage(plan.forward_stage(k - 1), k - 1, "forward+backward", last.forward_cycles
                        + last.backward_cycles, last.returned if k > 1 else 0, last.memory_per_tile, None, last.label,
                        last.recompute_cycles, last.forward_cycles))
    for i in range(k - 2, -1, -1):
        f = ipus[i]
        # Resident memory is given once per IPU, on its forward stage; the re-run
        # forward work opens the backward stage.
        out.append(SimStage(plan.backward_stage(i), i, "backward", f.backward_cycles, f.returned if i > 0 else 0,
                            None, None, f.label, f.recompute_cycles, 0))
    return tuple(out)


def _wrapped_stages(plan: StageLayout, ipus: Sequence[IpuFigures], head_cycles: int) -> tuple[SimStage, ...]:
    """The stages with a head wrapped onto IPU 0 (docs/solvers.md, ``--head-placement wrap``).

    Forwards 0..K-1, the head at stage K on IPU 0 (forward and backward back
    to back, no stash), then the backwards 2K-i; ``ipus[0].bytes_in`` is what
    the head receives from the last IPU (and, in training, sends back).
    """
    k = len(ipus)
    training = plan.training
    head_stage = k if plan.head_stage is None else plan.head_stage
    into_head = ipus[0].received if training else ipus[0].bytes_in
    out = [SimStage(plan.forward_stage(i), i, "forward", f.forward_cycles,
                    (ipus[i + 1].received if training else ipus[i + 1].bytes_in) if i + 1 < k else into_head,
                    f.memory_per_tile, f.stash_entry_per_tile if training else None, f.label)
           for i, f in enumerate(ipus)]
    if not training:
        out.append(SimStage(head_stage, 0, "forward", head_cycles, 0, None, None, "head"))
        return tuple(out)
    out.append(SimStage(head_stage, 0, "forward+backward", head_cycles, ipus[0].returned, None, None, "head"))
    for i in range(k - 1, -1, -1):
        f = ipus[i]
        out.append(SimStage(plan.backward_stage(i), i, "backward", f.backward_cycles, f.returned if i > 0 else 0,
                            None, None, f.label, f.recompute_cycles, 0))
    return tuple(out)


def inputs_from_config(cfg: PipelineConfig, backward_fraction: float = BACKWARD_FRACTION) -> SimInputs:
    """Stages from the config's predicted figures.

    Per-tile detail is not in the config, so: ``stash_bytes`` holds the
    ``stash_entries - 1`` entries beyond the one the single-IPU profile
    already has; one entry is spread evenly over all tiles; the worst tile
    carries the rest of the stage's worst-tile bytes, less its copy buffers
    (the simulator adds those itself). With the simulated number of entries
    equal to ``stash_entries`` the peak is the prediction.
    """
    tiles = cfg.tiles_per_ipu
    figures = []
    wraps = cfg.head_wraps  # IPU 0's bytes_in is then what the head receives from the last IPU
    # A wrapped head's cycles are part of IPU 0's; the config records them apart (a config written
    # before it did keeps them in IPU 0's backward stage: the same work per micro-batch on IPU 0).
    head = (cfg.stages[0].head_cycles or 0) if wraps and cfg.stages else 0
    for k, s in enumerate(cfg.stages):
        if k == 0 and head:
            s = dataclasses.replace(s, cycles=s.cycles - head)
        extra = s.stash_entries - 1
        per_entry = math.ceil(s.stash_bytes / extra / tiles) if extra > 0 else 0
        bytes_out = cfg.stages[k + 1].bytes_in if k + 1 < len(cfg.stages) else (
            cfg.stages[0].bytes_in if wraps else 0)
        buffer = copy_buffer_per_tile(s.bytes_in if k or wraps else 0, bytes_out, tiles, cfg.training)
        if cfg.training and s.gradient_bytes_in is None:
            buffer = copy_buffer_per_tile(2 * (s.bytes_in if k or wraps else 0), 2 * bytes_out, tiles, True)  # older
        memory = np.zeros(tiles, dtype=np.int64)
        memory[s.worst_tile] = max(0, s.worst_tile_bytes - s.stash_entries * per_entry - buffer)
        backward, recompute = _backward_cycles(s, cfg.training, backward_fraction)
        figures.append(IpuFigures(s.cycles - backward, backward, memory,
                                   np.full(tiles, per_entry, dtype=np.int64), s.bytes_in, _label(s.layers),
                                   recompute, s.gradient_bytes_in if cfg.training else None))
    return SimInputs(pipeline_stages(cfg.stage_layout, figures, head), tiles, cfg.clock_hz, "config")


def _backward_cycles(s: ConfigStage, training: bool, backward_fraction: float) -> tuple[int, int]:
    """(backward, of which recompute) cycles of a config stage: as recorded, else the fixed share."""
    if not training:
        return 0, 0
    if s.forward_cycles is not None and 0 <= s.forward_cycles <= s.cycles:
        backward = s.cycles - s.forward_cycles
        recompute = s.recompute_cycles if s.recompute_cycles is not None else 0
        return backward, min(max(recompute, 0), backward)
    return round(s.cycles * backward_fraction), 0


def inputs_from_analysis(cfg: PipelineConfig, analysis: AnalysisLike, *, tiles_per_ipu: int,
                         clock_hz: float) -> SimInputs:
    """Stages recomputed from the profile for the config's layer placement (:func:`ipu_figures` of each IPU)."""
    check_profile_matches(cfg, analysis)
    layers = [s.layers for s in cfg.stages]
    computed = analysis.pipeline_figures(layers)
    figures = [ipu_figures(fig, cfg.training, _label(group)) for group, fig in zip(layers, computed)]
    head = computed[0].head_cycles if cfg.head_wraps and computed else 0
    return SimInputs(pipeline_stages(cfg.stage_layout, figures, head), tiles_per_ipu, clock_hz, "profile")


def ipu_figures(figure: StageFigure, training: bool, label: str = "") -> IpuFigures:
    """What the simulator reads of an IPU's pipeline figure: the one way a figure becomes simulator input.

    The single-IPU profile already holds one stash entry of every stage (its
    activations live from forward to backward), so that entry is taken out
    of the resident memory and the simulator adds back as many as are in
    flight. The last IPU runs forward and backward back to back: no stash,
    and its activations stay live in between exactly as the profile shows them.
    """
    total = np.asarray(figure.memory.total_per_tile, dtype=np.int64)
    entry = (np.asarray(figure.stash_entry_per_tile, dtype=np.int64) if figure.stash_entries
             else np.zeros_like(total))
    return IpuFigures(figure.forward_cycles, figure.backward_cycles if training else 0, np.maximum(total - entry, 0),
                      entry, figure.bytes_in, label, figure.recompute_cycles if training else 0,
                      figure.gradient_bytes_in if training else None)


def check_profile_matches(cfg: PipelineConfig, analysis: AnalysisLike) -> None:
    """The config must name only the profile's layers and share its mode."""
    known = set(analysis.layer_names)
    for s in cfg.stages:
        for j, layer in enumerate(s.layers):
            if layer not in known:
                raise ConfigError(f"stages[{s.index}].layers[{j}]: layer {layer!r} is not in the profile; "
                                  "was the config written for another profile, or with "
                                  "--layer-name-regex/--layer-preset? give those options here too")
    if analysis.mode != cfg.mode:
        raise ConfigError(f"mode: the config says {cfg.mode} but the profile is {analysis.mode}; "
                          "write the config again from this profile")


def _label(layers: Sequence[str]) -> str:
    return layers[0] if len(layers) == 1 else f"{layers[0]} .. {layers[-1]}"
