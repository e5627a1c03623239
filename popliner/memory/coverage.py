"""Coverage: how much of the compiler's own per-tile total popliner's model accounts for (docs/profile-format.md,
'TileMemory'): the whole program's figure (:func:`popliner.memory.model.whole_program_memory`) over the compiler's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from popliner.memory.types import StageMemory
from popliner.profile.model import Profile

__all__ = ["Coverage", "compiler_per_tile", "coverage_line", "coverage_of", "measured_headroom"]


@dataclass(frozen=True)
class Coverage:
    """Model against compiler over a whole one-IPU profile."""

    model_total: int  # summed over tiles
    compiler_total: int
    lowest_tile: int  # the tile where model / compiler is lowest
    lowest_model: int
    lowest_compiler: int
    fullest_tile: int  # the compiler's worst tile
    fullest_model: int
    fullest_compiler: int

    @property
    def overall(self) -> float:
        return self.model_total / self.compiler_total if self.compiler_total else 1.0

    @property
    def lowest(self) -> float:
        return self.lowest_model / self.lowest_compiler if self.lowest_compiler else 1.0

    @property
    def fullest(self) -> float:
        return self.fullest_model / self.fullest_compiler if self.fullest_compiler else 1.0

    @property
    def shortfall(self) -> float:
        """The most the model is below the compiler on any tile, as a fraction of that tile's figure (>= 0)."""
        return max(0.0, 1.0 - self.lowest)


def measured_headroom(cov: Coverage) -> float:
    """The headroom a profile's measured coverage asks for: its shortfall on the lowest tile, rounded up to 0.1%."""
    return math.ceil(cov.shortfall * 1000 - 1e-9) / 1000


def compiler_per_tile(profile: Profile) -> np.ndarray | None:
    """The compiler's own total per tile (None when ``tileMemory`` lacks ``alwaysLive`` or ``notAlwaysLivePeak``)."""
    truth = profile.tile_memory or {}
    if "alwaysLive" not in truth or "notAlwaysLivePeak" not in truth:
        return None
    return np.asarray(truth["alwaysLive"] + truth["notAlwaysLivePeak"], np.int64)


def coverage_of(profile: Profile, whole: StageMemory) -> Coverage | None:
    """Coverage of the model's whole-program figure ``whole`` (None when the profile has no compiler totals)."""
    compiler = compiler_per_tile(profile)
    if compiler is None or not compiler.size:
        return None
    model = whole.total_per_tile
    ratio = np.where(compiler > 0, model / np.maximum(compiler, 1), np.inf)
    low = int(np.argmin(ratio)) if np.isfinite(ratio).any() else 0
    full = int(np.argmax(compiler))
    return Coverage(int(model.sum()), int(compiler.sum()), low, int(model[low]), int(compiler[low]),
                    full, int(model[full]), int(compiler[full]))


def coverage_line(cov: Coverage) -> str:
    """One sentence for logs and summaries."""
    return (f"the model accounts for {cov.overall:.2%} of the compiler's bytes ({cov.model_total:,} of "
            f"{cov.compiler_total:,}), {cov.lowest:.2%} on its lowest tile {cov.lowest_tile} "
            f"({cov.lowest_model:,} of {cov.lowest_compiler:,}) and {cov.fullest:.2%} on the compiler's fullest "
            f"tile {cov.fullest_tile}")
