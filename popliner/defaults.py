"""What each framework builds when the user says nothing: the defaults a split is planned with.

popliner's figures must describe the pipeline the framework will run. Two
choices are the framework's, not the user's, unless the user overrides them:

- **Recomputation.** PopTorch switches pipeline recomputation on by itself for
  any model pipelined over more than one IPU (``poptorch/source/Compiler.cpp``
  sets ``autoRecomputation`` to ``RecomputationType::Pipeline`` when pipelining,
  with the comment that pipelining wants recompute on by default);
  optimum-graphcore runs on PopTorch and never turns it off. PopART, PopXL and
  TensorFlow recompute nothing unless asked (``SessionOptions.autoRecomputation``
  defaults to ``RecomputationType::None``). When the model carries a
  recomputation checkpoint in every layer (``poptorch.recomputationCheckpoint``,
  as optimum-graphcore adds them for ``recompute_checkpoint_every_layer``; found
  by popliner.ops.checkpoints), PopART recomputes each stage from those
  checkpoints: recomputation per layer (``every-layer``).
- **Where the head goes.** optimum-graphcore's pretraining, masked-LM and causal-LM
  models (``PipelinedBertForPreTraining``, ``…ForMaskedLM``,
  ``PipelinedGPT2LMHeadModel``) put the tied head back on IPU 0 after the last
  layer (popliner's ``wrap``); its classification and question-answering models
  put the head on the last IPU (``last``). With PopTorch alone the emitted blocks
  decide: popliner writes a block for the head, so it picks the placement that
  fits best (``auto``). PopART takes each operation's ``virtualGraph`` from the
  config, so any placement is built as written; popliner keeps ``first`` there,
  but for a tied head over two IPUs or more, which Graphcore's own PopART and
  TensorFlow 2 BERT pretraining pipelines run on IPU 0 after the last layer
  (``applications/popart/bert/README.md``: "IPU0: Tied Token
  Embedding/Projection"; ``applications/tensorflow2/bert/configs``: the heads'
  stage mapped to IPU 0): ``wrap``.
- **A head tied to the embedding** (one weight read by both, found in the
  profile: :meth:`popliner.base.ProfileBase.tied_weight`) is never built on
  another IPU than the embedding's: PopART's pipeline transform stops with an
  error when a variable would be copied between IPUs
  (``willow/src/transforms/pipeline.cpp``), and PopTorch and optimum lower to
  PopART. So ``last`` over two IPUs or more is refused for such a head
  (:func:`tie_refusal`), and ``auto`` never picks it.

docs/pipeline-config.md lists the same rules with their sources.
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
    """The recomputation and head placement a framework builds, and one line saying so."""

    recompute: Recompute
    head_placement: HeadPlacementRequest
    why: str
    #: The two halves of ``why``: where the head goes, and (training) what is recomputed.
    where: str = ""
    redo: str = ""


def framework_defaults(framework: str, num_ipus: int, tied_head: bool, training: bool = True,
                       checkpointed: bool = False) -> PlannedDefaults:
    """The defaults of ``framework`` for a split over ``num_ipus`` IPUs (``tied_head``: LM/MLM head;
    ``checkpointed``: the model carries a recomputation checkpoint in every layer).

    In inference only the head placement applies (nothing is recomputed).
    """
    title = framework_title(framework)
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
        return PlannedDefaults("none", head, f"as {title} builds it: {where}", where)
    return PlannedDefaults(recompute, head, f"as {title} builds it: {where}, {redo}", where, redo)


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

    ``last`` over two IPUs or more puts the head on the last IPU and the
    embedding on IPU 0, both reading one weight. No framework copies a weight
    between the IPUs of a pipeline: PopART (so PopTorch and optimum-graphcore,
    which lower to it) stops the compilation, and TensorFlow's pipeline lets a
    variable feed one stage. ``first`` and ``wrap`` keep the head on IPU 0.
    """
    if tied is None or placement != "last" or num_ipus < 2:
        return None
    why = _TIE_SOURCE.get(framework, _POPART_TIE)
    others = " or first" if "first" in buildable_placements(framework) else ""
    return (f"the head reads the embedding's weight {tied.text()}, which would then be read on IPU 0 and on the "
            f"last IPU: {framework_title(framework)} does not build that ({why}); ask for wrap (the head back on "
            f"IPU 0, as optimum-graphcore's pretraining and LM models place it){others}")
