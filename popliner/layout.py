"""Where each part of the model goes: the one layout value.

A profile's layers are the model's own layers, and, with ``--head-placement
last`` or ``wrap``, two groups popliner makes of the operations that have no
layer: ``embedding`` (first) and ``head`` (last). :class:`Layout` says which
of the layer names are those groups and whether the head wraps round onto
IPU 0 as a pipeline stage of its own. It is the only place that reads this
from names: the memory facts build it once from its layers, a pipeline
config from its recorded stages, and every other part (range tables,
breakdowns, pipeline rules, solvers, configs, check, simulate, report) asks
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["EMBEDDING_GROUP", "HEAD_GROUP", "HEAD_PLACEMENTS", "HeadPlacement", "Layout"]

HeadPlacement = Literal["first", "last", "wrap"]
#: Where the operations without a layer go (docs/solvers.md, "--head-placement").
HEAD_PLACEMENTS: tuple[str, ...] = ("first", "last", "wrap")
#: Names given to the unlayered groups when they become layers of their own.
EMBEDDING_GROUP = "embedding"
HEAD_GROUP = "head"


@dataclass(frozen=True)
class Layout:
    """The layer names in model order and where the embedding and the head go.

    ``head`` is the index of popliner's head group in ``names`` (None when the placement is ``first``, or
    when no operation was left without a layer); the embedding group is then layer 0. The groups exist only
    as the first and the last layer: a model's own layer that happens to be called ``head`` is a layer.
    """

    names: tuple[str, ...]
    placement: HeadPlacement = "first"
    head: int | None = None

    @classmethod
    def of(cls, names: Sequence[str], placement: HeadPlacement) -> Layout:
        """The layout of layers named ``names`` (model order) under ``placement``: the one rule."""
        names = tuple(names)
        grouped = (placement != "first" and len(names) >= 2 and names[0] == EMBEDDING_GROUP
                   and names[-1] == HEAD_GROUP)
        return cls(names, placement, len(names) - 1 if grouped else None)

    @classmethod
    def of_stages(cls, stages: Sequence[Sequence[str]], placement: HeadPlacement | None,
                  model_order: Sequence[str] | None = None) -> Layout:
        """The layout of a placement read back from a config: ``stages[k]`` are the layers of IPU k.

        An inference config (or an older training one) records no placement:
        it is then read from where the groups are, ``embedding`` leading IPU 0
        with ``head`` also there being ``wrap``, ``head`` last on the last IPU
        ``last``. ``model_order``: the layers in model order when the config
        lists them; else IPU by IPU, a head wrapped onto IPU 0 last.
        """
        leads = len(stages) >= 1 and tuple(stages[0][:1]) == (EMBEDDING_GROUP,)
        on_first = leads and len(stages) >= 2 and HEAD_GROUP in stages[0]
        if placement is None:
            placement = "wrap" if on_first else "last" if leads and tuple(stages[-1][-1:]) == (HEAD_GROUP,) else "first"
        if model_order is None:
            flat = [name for stage in stages for name in stage]
            if placement == "wrap" and on_first:
                flat = [name for name in flat if name != HEAD_GROUP] + [HEAD_GROUP]
            model_order = flat
        return cls.of(model_order, placement)

    @property
    def grouped(self) -> bool:
        """Are the embedding and the head layers of their own?"""
        return self.head is not None

    @property
    def wraps(self) -> bool:
        """Does the head go back onto IPU 0 after the last layer (``--head-placement wrap``)?"""
        return self.placement == "wrap" and self.head is not None

    @property
    def head_name(self) -> str | None:
        return self.names[self.head] if self.head is not None else None

    @property
    def placed_names(self) -> tuple[str, ...]:
        """The layers a solver places in order: all of them but a wrapped head (it goes with IPU 0)."""
        return self.names[:-1] if self.wraps else self.names

    def wraps_at(self, num_ipus: int) -> bool:
        """Is the head a pipeline stage of its own over ``num_ipus`` IPUs? (On one IPU nothing wraps.)"""
        return self.wraps and num_ipus >= 2

    def wraps_in(self, stages: Sequence[Sequence[str]]) -> bool:
        """Does this placement (layer names per IPU) wrap the head: two IPUs or more, the head on IPU 0?"""
        return self.wraps_at(len(stages)) and self.head_name in stages[0]

    def model_layer_counts(self, stages: Sequence[Sequence[str]]) -> list[int]:
        """How many of the model's own layers each IPU holds: the ``embedding`` and ``head`` groups are not layers.

        optimum-graphcore's ``layers_per_ipu`` counts the model's layers (for
        BERT its encoder layers, summing to ``num_hidden_layers``); an IPU
        that holds only the embedding counts 0 (``[0, 4, 4, 4]`` for BERT-Base).
        """
        skip = (EMBEDDING_GROUP, HEAD_GROUP) if self.grouped else ()
        return [sum(1 for name in stage if name not in skip) for stage in stages]
