"""How the memory of a training pipeline is modelled: one frozen object, threaded from the CLI to the engine."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TrainingOptions"]


@dataclass(frozen=True)
class TrainingOptions:
    """Choices that change the training figures, and only those.

    The defaults are popliner's model as documented in docs/solvers.md: every
    activation that goes live in a stage's forward part and dies in its
    backward part is stashed, and all variables of the profile (weights,
    optimizer state) stay on the IPU. Options that change this (recomputation,
    optimizer state kept off chip, replicated tensor sharding, where the head
    goes) belong here, and are read only by the training-dependent functions
    of :class:`popliner.memory.engine.MemoryEngine` (stash entry, backward
    part, cycles split) and of :mod:`popliner.pipeline`.
    """
