"""What a compiler chose for an operation, where a calibrated preset knows it: :class:`Plan`.

The generator lowers every operation by its own recipe (popliner/synth/catalog.py).
A real compiler's planner makes other choices per operation shape; where the
public figures of a real profile show them, a preset carries them as plans
(popliner/synth/plans.py), looked up by the operation's layer.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_PLAN", "Plan"]


@dataclass(frozen=True)
class Plan:
    """What a compiler's planner chose for an operation, as multiples of the generator's own lowering.

    ``exchange``: exchange code per tile (more, smaller regions per tile);
    ``vertices``: vertex instances (the work cut into more, smaller vertices);
    ``programs``: control code (serial slices: more compute sets and exchanges);
    ``split``: the input-channel split of a convolution's fp32 partials;
    ``code``: its vertex types are its own specialisations, with this many
    times the catalog's code (not shared with other operations);
    ``spread``: it works on this many times the tiles of its largest tensor.
    Calibrated presets set them from public per-block figures
    (docs/synthetic-profiles.md lists each); everything else keeps 1.
    """

    exchange: float = 1.0
    vertices: float = 1.0
    programs: float = 1.0
    split: float = 1.0
    code: float = 1.0
    spread: float = 1.0


NO_PLAN = Plan()
