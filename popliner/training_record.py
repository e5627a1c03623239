"""The record of the training options a split's figures were computed with.

A pipeline config keeps it as its ``training`` block (docs/pipeline-config.md),
the plan and the breakdown carry it, and the writers show it. It sits below
``config/`` because the plan and the breakdown make it before any config
exists.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from popliner.layout import HeadPlacement
from popliner.memory.training import (
    DEFAULT_UPDATE_REGEX,
    AppliedRecompute,
    OptimizerState,
    RecomputeRequest,
    TrainingOptions,
)

if TYPE_CHECKING:
    from popliner.analysis import Analysis

__all__ = ["CONFIG_RECOMPUTES", "ConfigTraining", "config_training", "training_of"]


#: What ``training.recompute`` may say: a mode popliner applied, or ``compiled`` (the profile already recomputes).
CONFIG_RECOMPUTES: tuple[str, ...] = ("none", "pipeline", "every-layer", "compiled")


@dataclass(frozen=True)
class ConfigTraining:
    """The training options a config's figures were computed with (docs/pipeline-config.md, ``training``).

    ``recompute`` is the mode applied: ``--recompute auto`` is resolved to
    the mode it chose (``requested`` then says ``auto``), and ``compiled``
    records a profile compiled with recomputation. The regexes are None when
    they are popliner's defaults.
    """

    recompute: AppliedRecompute = "none"
    optimizer_state: OptimizerState = "on-chip"
    replication_factor: int = 1
    sharded_optimizer_state: bool = False
    head_placement: HeadPlacement = "first"
    update_regex: str | None = None
    optimizer_state_regex: str | None = None
    requested: RecomputeRequest | None = None

    def options(self) -> TrainingOptions:
        """The options to analyse the profile with; raises UsageProblem when they are not valid together."""
        return TrainingOptions(
            recompute="none" if self.recompute == "compiled" else self.recompute,
            optimizer_state=self.optimizer_state,
            replication_factor=self.replication_factor,
            sharded_optimizer_state=self.sharded_optimizer_state,
            head_placement=self.head_placement,
            update_regex=self.update_regex if self.update_regex is not None else DEFAULT_UPDATE_REGEX,
            optimizer_state_regex=self.optimizer_state_regex,
        )

    def as_document(self) -> dict[str, object]:
        """The ``training`` block of the YAML; the regexes and ``recompute_requested`` only when they say something."""
        out: dict[str, object] = {
            "recompute": self.recompute, "recompute_requested": self.requested,
            "optimizer_state": self.optimizer_state, "replication_factor": self.replication_factor,
            "sharded_optimizer_state": self.sharded_optimizer_state, "head_placement": self.head_placement,
            "update_regex": self.update_regex, "optimizer_state_regex": self.optimizer_state_regex}
        return {key: value for key, value in out.items() if value is not None}

    def summary(self) -> str:
        """One line for titles and notes: ``recompute every-layer, optimizer state off-chip, ...``."""
        parts = [f"recompute {self.recompute}" + (" (chosen by auto)" if self.requested == "auto" else ""),
                 f"optimizer state {self.optimizer_state}"]
        if self.replication_factor > 1:
            parts.append(f"{self.replication_factor} replicas"
                         + (", optimizer state sharded" if self.sharded_optimizer_state else ""))
        if self.head_placement != "first":
            parts.append(f"head placement {self.head_placement}")
        return ", ".join(parts)


def config_training(options: TrainingOptions, applied_recompute: AppliedRecompute,
                    requested: RecomputeRequest | None = None) -> ConfigTraining:
    """The record of ``options`` as a config keeps it; ``applied_recompute`` is the mode the memory facts applied."""
    return ConfigTraining(
        recompute=applied_recompute,
        optimizer_state=options.optimizer_state,
        replication_factor=options.replication_factor,
        sharded_optimizer_state=options.sharded_optimizer_state,
        head_placement=options.head_placement,
        update_regex=None if options.update_regex == DEFAULT_UPDATE_REGEX else options.update_regex,
        optimizer_state_regex=options.optimizer_state_regex,
        requested="auto" if requested == "auto" else None,
    )


def training_of(analysis: Analysis, requested_recompute: RecomputeRequest | None = None) -> ConfigTraining | None:
    """The record of the training options an analysis applied (None in inference); ``auto`` noted as asked.

    A profile compiled with its optimizer state off chip is recorded ``off-chip`` whatever was asked: its
    figures already hold the state only around the update, and the configs must ask the framework for it.
    """
    if analysis.mode != "training":
        return None
    options = analysis.options.training
    if options.optimizer_state == "on-chip" and analysis.base.state_off_chip:
        options = dataclasses.replace(options, optimizer_state="off-chip")
    return config_training(options, analysis.facts.view.recompute, requested_recompute)
