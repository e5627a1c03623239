"""The CI memory-budget check: recompute each IPU of a pipeline config from the profile.

Figures come from the profile's operations, never from the config's
predictions, so a hand-edited config or a changed model is checked for real.
"""

from __future__ import annotations

from dataclasses import dataclass

from popliner.analysis import Analysis
from popliner.config.model import PipelineConfig
from popliner.errors import ConfigError
from popliner.memory.overflow import LiveVariable, overflow_detail
from popliner.memory.types import ComponentBytes

__all__ = ["CheckResult", "IpuCheck", "LiveVariable", "check_config"]


@dataclass(frozen=True)
class IpuCheck:
    """One IPU: its worst tile against the budget; for an overflow, why."""

    ipu: int
    layers: tuple[str, ...]
    memory: ComponentBytes  # summed over tiles, stash excluded
    stash_bytes: int  # summed over tiles, all extra entries
    worst_tile: int
    worst_tile_bytes: int  # on the worst tile: model + stash + copy buffer
    worst_tile_memory: ComponentBytes  # the worst tile's components (stash and copy buffer not included)
    worst_tile_stash: int  # the stash on the worst tile
    copy_buffer: int  # per tile (the same on every tile)
    budget: int
    fits: bool
    peak_step: int  # step of the variable peak on the worst tile, -1 if none
    largest_live: tuple[LiveVariable, ...]

    @property
    def headroom(self) -> int:
        return self.budget - self.worst_tile_bytes


@dataclass(frozen=True)
class CheckResult:
    profile_path: str
    config_path: str
    budget: int
    ipus: tuple[IpuCheck, ...]

    @property
    def fits(self) -> bool:
        return all(i.fits for i in self.ipus)


def check_config(analysis: Analysis, config: PipelineConfig, config_path: str, *, budget: int,
                 largest: int = 5) -> CheckResult:
    """Each IPU of the config against ``budget``, from the profile (:func:`popliner.pipeline.stage_figures`)."""
    _check_layers(analysis, config, config_path)
    figures = analysis.pipeline_figures([stage.layers for stage in config.stages])
    results = []
    for k, (stage, figure) in enumerate(zip(config.stages, figures)):
        worst = figure.worst_tile
        fits = figure.fits(budget)
        step = -1
        live: tuple[LiveVariable, ...] = ()
        if not fits:
            detail = overflow_detail(analysis.model, analysis.stage_ops(stage.layers, k == 0), worst, largest)
            step, live = detail.step, detail.largest_live
        results.append(IpuCheck(
            ipu=k, layers=stage.layers, memory=figure.memory.summed(), stash_bytes=figure.stash_bytes_summed,
            worst_tile=worst, worst_tile_bytes=figure.worst_bytes, worst_tile_memory=figure.worst_tile_memory,
            worst_tile_stash=figure.worst_tile_stash, copy_buffer=figure.copy_buffer, budget=budget, fits=fits,
            peak_step=step, largest_live=live,
        ))
    return CheckResult(analysis.profile.path, config_path, budget, tuple(results))


def _check_layers(analysis: Analysis, config: PipelineConfig, config_path: str) -> None:
    known = set(analysis.layer_names)
    for k, stage in enumerate(config.stages):
        for j, layer in enumerate(stage.layers):
            if layer not in known:
                raise ConfigError(
                    f"{config_path} at stages[{k}].layers[{j}]: layer {layer!r} is not in the profile "
                    f"{analysis.profile.path} (its layers: {', '.join(analysis.layer_names[:12])}"
                    f"{' ...' if len(known) > 12 else ''}); was the config made for another model, or with "
                    "--layer-name-regex/--layer-preset? give those options here too"
                )
    placed = {layer for s in config.stages for layer in s.layers}
    missing = [name for name in analysis.layer_names if name not in placed]
    if missing:
        raise ConfigError(f"{config_path}: layers {', '.join(missing[:8])} of the profile are on no IPU; "
                          "add them to a stage")
