"""The planner's choices fitted to a real profile: EfficientNet-EdgeTPU-L's per-block figures.

Poplar's convolution planner picks, per convolution shape, how to cut the
work over tiles (how many regions each tile exchanges, how many vertices,
how many serial slices, how far to split the input channels). Its choices
are not public, but their effect is: Graphcore's PopLiner tests give every
block's vertex state, exchange code, control code and variables. Each
group of blocks of one shape (a stage's first block, the stage's other
blocks) gets one :class:`~popliner.synth.graph.Plan`, fitted to that
group's real figures by ``scripts/fit_plans.py``; docs/synthetic-profiles.md
lists each value with the figure it was fitted to. No other model uses them.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from popliner.synth.graph import Plan

__all__ = ["EDGETPU_L_PLANS"]

_PLANS: dict[str, Plan] = {
    "stem+head": Plan(exchange=3.28, vertices=3.43, programs=1.6, split=1),
    "stage0/first": Plan(exchange=4.21, vertices=1.54, programs=0.675, split=0.942),
    "stage0/rest": Plan(exchange=3.48, vertices=1.52, programs=0.953, split=0.731),
    "stage1/first": Plan(exchange=2.8, vertices=1.31, programs=0.615, split=0.721),
    "stage1/rest": Plan(exchange=4.79, vertices=0.661, programs=0.456, split=1.54),
    "stage2/first": Plan(exchange=2.1, vertices=0.755, programs=0.336, split=1.82),
    "stage2/rest": Plan(exchange=3.32, vertices=0.693, programs=0.815, split=1.75),
    "stage3/first": Plan(exchange=1.98, vertices=0.879, programs=0.97, split=0.641),
    "stage3/rest": Plan(exchange=1.21, vertices=1.89, programs=1.7, split=0.876),
    "stage4/first": Plan(exchange=1.47, vertices=1.59, programs=1.48, split=0.746),
    "stage4/rest": Plan(exchange=9.37, vertices=5.34, programs=2.76, split=0.799),
    "stage5/first": Plan(exchange=1.71, vertices=1.47, programs=1.16, split=0.449),
    "stage5/rest": Plan(exchange=3.46, vertices=8.92, programs=2.07, split=0.935),
}
#: group (``stem+head`` or :func:`popliner.synth.effnet.plan_group`) -> the planner's choices.
EDGETPU_L_PLANS: Final = MappingProxyType(_PLANS)
