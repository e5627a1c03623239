"""The CI memory-budget check: recompute each IPU of a pipeline config from the profile.

Figures come from the profile's operations, never from the config's
predictions, so a hand-edited config or a changed model is checked for real.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from popliner.analysis import Analysis
from popliner.config.model import PipelineConfig
from popliner.errors import ConfigError
from popliner.memory.overflow import LiveVariable, overflow_detail
from popliner.solvers.result import StageResult

__all__ = ["CheckResult", "LiveVariable", "check_config"]


@dataclass(frozen=True)
class CheckResult:
    """Each IPU of a config as the profile places it (:class:`~popliner.solvers.result.StageResult`, as a solver
    reports it), against ``budget``; an IPU over it carries its overflow detail (the step and the largest live
    variables on its worst tile)."""

    profile_path: str
    config_path: str
    budget: int
    ipus: tuple[StageResult, ...]

    @property
    def fits(self) -> bool:
        return all(i.fits for i in self.ipus)


def check_config(analysis: Analysis, config: PipelineConfig, config_path: str, *, budget: int) -> CheckResult:
    """Each IPU of the config against ``budget``, from the profile (:func:`popliner.pipeline.stage_figures`)."""
    _check_layers(analysis, config, config_path)
    results = []
    for k, (stage, result) in enumerate(zip(config.stages, analysis.stage_results(config.layer_groups, budget))):
        if not result.fits:
            detail = overflow_detail(analysis.model, analysis.stage_ops(stage.layers, k == 0), result.worst_tile)
            result = dataclasses.replace(result, overflow=detail)
        results.append(result)
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
