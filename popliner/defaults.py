"""What each framework builds when the user says nothing: the defaults a split is planned with.

popliner's figures must describe the pipeline the framework will run, so three choices follow the
framework unless the user overrides them: recomputation, where the head goes, and a head tied to the
embedding, which no framework builds on another IPU than the embedding's (:func:`tie_refusal`).
docs/pipeline-config.md ('What the framework builds') gives each framework's rules with their sources
(PopTorch's ``Compiler.cpp``, PopART's pipeline transform, graphcore/examples' BERT configs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from popliner.framework import framework_title
from popliner.layout import HeadPlacement
from popliner.memory.training import Recompute

if TYPE_CHECKING:
    from popliner.ops.head import TiedWeight

__all__ = ["HeadPlacementRequest", "PlannedDefaults", "buildable_placements", "framework_defaults", "placement_order",
           "tie_refusal"]

#: What a user may ask for the head: a placement, or ``auto`` (the one that fits on the fewest IPUs).
HeadPlacementRequest = Literal["first", "last", "wrap", "auto"]


@dataclass(frozen=True)
class PlannedDefaults:
    """The recomputation and head placement a framework builds, and what to say of each."""

    recompute: Recompute
    head_placement: HeadPlacementRequest
    #: Where the head goes, and (training) what is recomputed, as phrases.
    where: str = ""
    redo: str = ""


def framework_defaults(framework: str, num_ipus: int, tied_head: bool, training: bool = True,
                       checkpointed: bool = False) -> PlannedDefaults:
    """The defaults of ``framework`` for a split over ``num_ipus`` IPUs (``tied_head``: LM/MLM head;
    ``checkpointed``: the model carries a recomputation checkpoint in every layer).

    In inference only the head placement applies (nothing is recomputed).
    """
    pipelined = num_ipus > 1
    if framework in ("poptorch", "optimum"):
        recompute: Recompute = ("every-layer" if checkpointed else "pipeline") if pipelined else "none"
        if not pipelined:
            redo = "no recomputation (one IPU)"
        elif checkpointed:
            redo = ("recomputation from the checkpoint in every layer (pipeline recomputation is on by itself "
                    "when pipelining, and the model checkpoints each layer)")
        else:
            redo = "pipeline recomputation (on by itself when pipelining)"
    else:
        recompute, redo = "none", "no recomputation (autoRecomputation is off unless set)"
    head: HeadPlacementRequest
    if framework == "optimum":
        head = "wrap" if tied_head else "last"
        where = ("the tied head wrapped back onto IPU 0" if tied_head
                 else "the head on the last IPU (classification and QA models)")
    elif framework == "poptorch":
        head, where = "auto", "the head last or wrapped, where it fits best (popliner writes its block)"
    elif tied_head and pipelined:
        head, where = "wrap", ("the tied head back on IPU 0 after the last layer (Graphcore's PopART BERT and "
                               "TensorFlow 2 BERT pretraining pipelines run it there)")
    else:
        head, where = "first", "the operations without a layer on IPU 0"
    if not training:
        return PlannedDefaults("none", head, where)
    return PlannedDefaults(recompute, head, where, redo)


def buildable_placements(framework: str, tied: TiedWeight | None = None,
                         num_ipus: int = 1) -> tuple[HeadPlacement, ...]:
    """The head placements ``framework`` can build over ``num_ipus`` IPUs, in the order ``auto`` breaks ties.

    PopTorch (and optimum on it) runs what comes after the last ``BeginBlock``
    on that block's IPU, so a head that runs after the last layer cannot sit
    in IPU 0's first stage: ``first`` is not built as planned there. PopART
    places every operation by its own ``virtualGraph``: all three are built.
    A head tied to the embedding (``tied``) is not built on an IPU of its own
    (:func:`tie_refusal`). With an untied head ``last`` comes first: where
    ``last`` and ``wrap`` tie, ``auto`` does what optimum-graphcore's models
    do with a classification or QA head (the last IPU).
    """
    found: tuple[HeadPlacement, ...] = ("last", "wrap") if framework in ("poptorch", "optimum") else (
        "first", "last", "wrap")
    return tuple(p for p in found if tie_refusal(framework, p, tied, num_ipus) is None)


def placement_order(framework: str, tied: TiedWeight | None, num_ipus: int) -> tuple[HeadPlacement, ...]:
    """The placements ``auto`` tries, in the order it breaks ties: those the framework builds, a tied head's
    ``wrap`` first (optimum-graphcore's pretraining and LM models), an untied head's ``last`` first (its
    classification and QA models)."""
    found = buildable_placements(framework, tied, num_ipus)
    if tied is not None and "wrap" in found:
        found = ("wrap", *(p for p in found if p != "wrap"))
    return found


#: Why each framework does not build a weight read on two IPUs of a pipeline (docs/pipeline-config.md, "Tied heads").
_TIE_SOURCE = {
    "tensorflow": "TensorFlow's IPU pipeline lets a variable feed one pipeline stage only",
}
_POPART_TIE = "PopART's pipelining refuses to copy a weight between IPUs"


def tie_refusal(framework: str, placement: str, tied: TiedWeight | None, num_ipus: int) -> str | None:
    """Why ``framework`` cannot build ``placement`` over ``num_ipus`` IPUs for a head tied by ``tied``; None if it can.

    ``last`` over two IPUs or more puts the head and the embedding, both reading
    one weight, on two IPUs, which no framework builds: docs/pipeline-config.md
    ('Tied heads') cites each. ``first`` and ``wrap`` keep the head on IPU 0.
    """
    if tied is None or placement != "last" or num_ipus < 2:
        return None
    why = _TIE_SOURCE.get(framework, _POPART_TIE)
    others = " or first" if "first" in buildable_placements(framework) else ""
    return (f"the head reads the embedding's weight {tied.text()}, which would then be read on IPU 0 and on the "
            f"last IPU: {framework_title(framework)} does not build that ({why}); ask for wrap (the head back on "
            f"IPU 0, as optimum-graphcore's pretraining and LM models place it){others}")
