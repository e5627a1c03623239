"""The planner's choices fitted to a real profile: EfficientNet-EdgeTPU-L's per-block figures.

Poplar's convolution planner picks, per convolution shape, how to cut the
work over tiles (how many regions each tile exchanges, how many vertices,
how many serial slices, how far to split the input channels). Its choices
are not public, but their effect is: Graphcore's PopLiner tests give every
block's vertex state, exchange code, control code and variables. Each
group of blocks of one shape (a stage's first block, the stage's other
blocks) gets one :class:`~popliner.synth.choices.Plan`, fitted to that
group's real figures by ``scripts/fit_plans.py``; docs/synthetic-profiles.md
lists each value with the figure it was fitted to. No other model uses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from popliner.synth.choices import Plan
from popliner.synth.effnet import REPEATS
from popliner.synth.models import stage_of

__all__ = ["PRESET_PLANS", "plan_group", "preset_plans"]

#: EfficientNet-EdgeTPU-L: one plan per group of blocks of one shape (:func:`plan_group`) and for the stem and head
#: ("no layer"), fitted by ``scripts/fit_plans.py`` to the real per-block figures.
EDGETPU_L: Final[Mapping[str, Plan]] = MappingProxyType({
    "no layer": Plan(vertices=3.43, code=0.671, exchange=3.28, programs=1.56),
    "stage0/first": Plan(exchange=4.1),
    "stage0/rest": Plan(exchange=3.36),
    "stage1/first": Plan(exchange=2.44),
    "stage1/rest": Plan(exchange=4.71, programs=0.58, split=1.54),
    "stage2/first": Plan(exchange=2.1, programs=0.39, split=1.84),
    "stage2/rest": Plan(exchange=3.29, split=1.75),
    "stage3/first": Plan(exchange=1.98, split=0.641),
    "stage4/first": Plan(split=0.729),
    "stage4/rest": Plan(vertices=4, exchange=8.94, programs=2.26, split=0.756),
    "stage5/first": Plan(exchange=1.69, split=0.538),
    "stage5/rest": Plan(vertices=6.47, exchange=3.24, programs=1.7),
})
#: PopTorch's BERT demo_tiny_128 (SQuAD training): the operations without a layer, and layer 1's exchange code.
POPTORCH_BERT_TINY: Final[Mapping[str, Plan]] = MappingProxyType({
    "no layer": Plan(vertices=2.11, spread=6.51, exchange=5.33, programs=2.29),
    "1": Plan(exchange=0.649),
})
#: BERT-Large SQuAD-128 inference by the older SDK: the operations without a layer (embeddings, mask, head).
BERT_LARGE_SDK_OLD: Final[Mapping[str, Plan]] = MappingProxyType({
    "no layer": Plan(vertices=2.96, code=1.25),
})

#: Preset -> its plans, keyed by group (``scripts/fit_plans.py`` swaps a table in while it fits).
_TABLES: dict[str, Mapping[str, Plan]] = {"efficientnet-edgetpu-l": EDGETPU_L, "poptorch-bert-tiny": POPTORCH_BERT_TINY,
                                          "bert-large-sdk-old": BERT_LARGE_SDK_OLD}
PRESET_PLANS: Final[Mapping[str, Mapping[str, Plan]]] = MappingProxyType(_TABLES)


def plan_group(stage: int, first: bool) -> str:
    """The planner group of an EfficientNet block: its stage, and whether it is the stage's first."""
    return f"stage{stage}/{'first' if first else 'rest'}"


def preset_plans(model: str, layers: int) -> dict[str, Plan]:
    """The planner's choices of preset ``model`` by row (a layer number, or "no layer"); empty for other models.

    EfficientNet's groups are spread over its ``layers`` blocks as its stages are.
    """
    table = PRESET_PLANS.get(model, {})
    if model != "efficientnet-edgetpu-l":
        return dict(table)
    rows = {"no layer": table["no layer"]} if "no layer" in table else {}
    for i in range(layers):
        s = stage_of(i, layers, REPEATS)
        group = plan_group(s, i == 0 or stage_of(i - 1, layers, REPEATS) != s)
        if group in table:
            rows[str(i)] = table[group]
    return rows
