"""Turn a pipeline config (and optionally a profile's analysis) into simulator stages.

Which stages K IPUs give, what each sends and where its figures come from is
docs/simulator.md's "Stages given to the simulator".
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from popliner.config.model import ConfigStage, PipelineConfig, config_stage
from popliner.errors import ConfigError
from popliner.pipeline import StageFigure, StageLayout, copy_buffer_per_tile
from popliner.simulator.engine import SimStage
from popliner.simulator.types import IpuFigures
from popliner.solvers.result import StageResult, stage_result

__all__ = [
    "BACKWARD_FRACTION",
    "AnalysisLike",
    "IpuFigures",
    "config_ipu_figures",
    "SimInputs",
    "inputs_from_analysis",
    "inputs_from_config",
    "ipu_figures",
    "pipeline_stages",
    "split_ipu_figures",
    "split_records",
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


def pipeline_stages(plan: StageLayout, ipus: Sequence[IpuFigures], head_cycles: int | None = None,
                    ) -> tuple[SimStage, ...]:
    """Expand per-IPU figures into the pipeline stages of ``plan`` (K in inference, 2K-1 in training).

    ``head_cycles``: the cycles of a head ``plan`` wraps onto IPU 0 (one more
    stage, K; the backwards move one stage later); by default IPU 0's
    :attr:`IpuFigures.head_cycles`. Each stage holds the figures of its IPU.
    """
    k = len(ipus)
    if plan.num_ipus != k:
        raise ValueError(f"{k} IPUs of figures for a split over {plan.num_ipus}")
    head = head_cycles if head_cycles is not None else (ipus[0].head_cycles if ipus else 0)
    stages = _stages(plan, ipus, head)
    return tuple(dataclasses.replace(s, figures=ipus[s.ipu]) for s in stages)


def _stages(plan: StageLayout, ipus: Sequence[IpuFigures], head_cycles: int) -> tuple[SimStage, ...]:
    """The forwards, the loss stage (or a wrapped head's), then the backwards, as docs/simulator.md lists them.

    With a wrapped head ``ipus[0].bytes_in`` is what the head receives from the last IPU (and, in training,
    sends back). The re-run forward work (recomputation) opens a backward stage and follows the forward part
    of the loss stage.
    """
    k, training, wraps = len(ipus), plan.training, plan.wraps
    received = [f.received if training else f.bytes_in for f in ipus]
    out = [SimStage(plan.forward_stage(i), i, "forward", f.forward_cycles,
                    received[(i + 1) % k] if i + 1 < k or wraps else 0, f.memory_per_tile,
                    f.stash_entry_per_tile if training else None, f.label)
           for i, f in enumerate(ipus if wraps or not training else ipus[:-1])]
    if wraps:
        out.append(SimStage(k if plan.head_stage is None else plan.head_stage, 0,
                            "forward+backward" if training else "forward", head_cycles,
                            ipus[0].returned if training else 0, None, None, "head"))
    elif training:
        last = ipus[-1]
        out.append(SimStage(plan.forward_stage(k - 1), k - 1, "forward+backward", last.forward_cycles
                            + last.backward_cycles, last.returned if k > 1 else 0, last.memory_per_tile, None,
                            last.label, last.recompute_cycles, last.forward_cycles))
    for i in range(k - 1 if wraps else k - 2, -1, -1) if training else ():
        f = ipus[i]
        out.append(SimStage(plan.backward_stage(i), i, "backward", f.backward_cycles, f.returned if i > 0 else 0,
                            None, None, f.label, f.recompute_cycles, 0))
    return tuple(out)


def inputs_from_config(cfg: PipelineConfig, *, source: str = "config", clock_hz: float | None = None) -> SimInputs:
    """The simulator's stages of a pipeline config: each IPU's :func:`ipu_figures`, expanded by its layout.

    A config just planned, the same config read back from its file and one
    whose figures were recomputed from the profile (:func:`inputs_from_analysis`)
    all go through here, so they simulate alike. ``source`` says where the
    figures came from; ``clock_hz`` defaults to the config's.
    """
    figures = config_ipu_figures(cfg.stages, cfg.tiles_per_ipu, cfg.training, cfg.head_wraps)
    return SimInputs(pipeline_stages(cfg.stage_layout, figures), cfg.tiles_per_ipu,
                     cfg.clock_hz if clock_hz is None else clock_hz, source)


def config_ipu_figures(stages: Sequence[ConfigStage], tiles: int, training: bool,
                       wraps: bool) -> tuple[IpuFigures, ...]:
    """Each IPU's :func:`ipu_figures`, with the bytes it sends on (the next IPU's ``bytes_in``).

    ``wraps``: the head is wrapped onto IPU 0, whose ``bytes_in`` is then what
    the head receives from the last IPU.
    """
    out = []
    for k, s in enumerate(stages):
        bytes_out = stages[k + 1].bytes_in if k + 1 < len(stages) else (stages[0].bytes_in if wraps else 0)
        out.append(ipu_figures(s, tiles=tiles, training=training, receives=bool(k) or wraps, bytes_out=bytes_out))
    return tuple(out)


def ipu_figures(s: ConfigStage, *, tiles: int, training: bool, receives: bool, bytes_out: int) -> IpuFigures:
    """What the simulator reads of an IPU: the one way an IPU's record becomes simulator input.

    The worst tile's resident bytes and one stash entry per tile, as docs/simulator.md ("Figures from the
    config") gives them; only the worst tile's bytes are kept, as the simulator reads no other tile's.
    ``receives``: whether the IPU's ``bytes_in`` crosses into it (not IPU 0, unless a head wraps onto it);
    ``bytes_out``: what it sends on.
    """
    extra = s.stash_entries - 1
    if s.stash_entry_bytes is not None:
        per_entry = s.stash_entry_bytes
    else:  # older config: the average entry
        per_entry = math.ceil(s.stash_bytes / extra / tiles) if extra > 0 else 0
    bytes_in = s.bytes_in if receives else 0
    ways = 2 if training and s.gradient_bytes_in is None else 1  # older config: the whole crossing each way
    buffer = copy_buffer_per_tile(ways * bytes_in, ways * bytes_out, tiles)
    memory = np.zeros(tiles, dtype=np.int64)
    memory[s.worst_tile] = max(0, s.worst_tile_bytes - s.stash_entries * per_entry - buffer)
    # A wrapped head's cycles are part of IPU 0's; the config records them apart (a config written
    # before it did keeps them in IPU 0's backward stage: the same work per micro-batch on IPU 0).
    head = s.head_cycles or 0
    own = dataclasses.replace(s, cycles=s.cycles - head) if head else s
    backward, recompute = _backward_cycles(own, training)
    return IpuFigures(own.cycles - backward, backward, memory, np.full(tiles, per_entry, dtype=np.int64), s.bytes_in,
                      _label(s.layers), recompute, s.gradient_bytes_in if training else None, head)


def _backward_cycles(s: ConfigStage, training: bool) -> tuple[int, int]:
    """(backward, of which recompute) cycles of a config stage: as recorded, else the fixed share."""
    if not training:
        return 0, 0
    if s.forward_cycles is not None and 0 <= s.forward_cycles <= s.cycles:
        backward = s.cycles - s.forward_cycles
        recompute = s.recompute_cycles if s.recompute_cycles is not None else 0
        return backward, min(max(recompute, 0), backward)
    return round(s.cycles * BACKWARD_FRACTION), 0


def inputs_from_analysis(cfg: PipelineConfig, analysis: AnalysisLike, *, tiles_per_ipu: int,
                         clock_hz: float) -> SimInputs:
    """The config's layer placement with every IPU's figures recomputed from the profile.

    Each figure becomes the record a planned config holds (:func:`split_records`),
    and that record is simulated as a saved config is (:func:`inputs_from_config`).
    """
    check_profile_matches(cfg, analysis)
    computed = analysis.pipeline_figures([s.layers for s in cfg.stages])
    records = [stage_result(f, analysis.layer_names, cfg.effective_budget) for f in computed]
    recomputed = dataclasses.replace(cfg, stages=split_records(records, cfg.training), tiles_per_ipu=tiles_per_ipu)
    return inputs_from_config(recomputed, source="profile", clock_hz=clock_hz)


def split_records(stages: Sequence[StageResult], training: bool) -> tuple[ConfigStage, ...]:
    """Each IPU of a split as the config records it (:func:`popliner.config.model.config_stage`)."""
    return tuple(config_stage(k, s, training) for k, s in enumerate(stages))


def split_ipu_figures(stages: Sequence[StageResult], tiles: int, training: bool,
                      wraps: bool) -> tuple[IpuFigures, ...]:
    """A split's IPUs as the simulator reads them: through the config's records, as ``simulate`` does."""
    return config_ipu_figures(split_records(stages, training), tiles, training, wraps)


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
