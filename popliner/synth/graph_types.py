"""The logical model's values: tensors, operations, gradient rules and the compile options.

:class:`popliner.synth.graph.GraphBuilder` makes them; lowering
(:mod:`popliner.synth.lower`) and the ground truth (:mod:`popliner.synth.truth`)
read them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from popliner.synth.choices import NO_PLAN, Plan

__all__ = ["ALWAYS_LIVE", "RECOMPUTED", "Compiled", "GradRule", "Graph", "Op", "TKind", "Tensor"]


class TKind(enum.IntEnum):
    WEIGHT = 0  # trainable parameter: always live
    STATE = 1  # optimizer state, running statistics: always live
    INPUT = 2  # streamed from the host or initialised on the device
    ACT = 3  # produced by one operation, read by later ones
    GRAD = 4  # a gradient (an activation of the backward pass)
    TEMP = 5  # scratch of one operation: live only while it runs


ALWAYS_LIVE = (TKind.WEIGHT, TKind.STATE)
#: Suffix of a recomputed tensor's name (PopART's explicit recomputation).
RECOMPUTED = "__re"


@dataclass(frozen=True)
class Compiled:
    """Training options the profile is "compiled with" (see the module docstring)."""

    recompute: str = "none"  # none, every-layer, pipeline
    split_after: tuple[int, ...] = ()  # pipeline: last layer of every stage but the last
    off_chip_state: bool = False
    state_shards: int = 1
    half_first_moment: bool = False


@dataclass
class Tensor:
    index: int
    name: str
    nbytes: int
    kind: TKind
    start: int  # first tile of its span (the span wraps around the last tile)
    count: int  # tiles in its span
    producer: int = -1
    consumers: list[int] = field(default_factory=list)
    requires_grad: bool = False
    temp_of: int = -1  # TEMP: the operation whose executions bound its liveness
    group: str = ""


@dataclass(frozen=True)
class GradRule:
    """One backward operation of a forward one.

    ``wrt`` is the index of the forward input it produces the gradient of;
    ``saved`` names forward tensors it reads (``"i0"`` = input 0, ``"o1"`` =
    output 1); its name is the forward name plus ``suffix``.
    """

    suffix: str
    op_type: str
    kind: str
    wrt: int
    saved: tuple[str, ...] = ()
    work: float = 1.0
    share: bool = False
    calls: int = 1  # > 1: serialised into this many calls of one body


@dataclass
class Op:
    index: int
    name: str  # opName of its debug context ('' for Tensor and Call contexts)
    logical: str  # the name gradients and output tensors derive from
    op_type: str
    kind: str
    phase: str  # setup, fwd, loss, bwd, upd
    group: str  # layer prefix, e.g. bert/encoder/layer_3 (for Sync and sharing)
    inputs: list[int]
    outputs: list[int]
    temps: list[int] = field(default_factory=list)
    work: float = 0.0
    start: int = 0
    count: int = 1
    tensor_id: str | None = None  # Tensor/<id> operations
    instance_id: int | None = None  # Call operations
    body: int = -1  # Call operations: the shared body operation
    calls: int = 1  # Call operations: how many times the body is called in a row
    grads: tuple[GradRule, ...] = ()
    share: str | None = None  # outlining key of a Call operation
    #: Input names its debug context shows instead of the tensors' own (a tensor read through a view, e.g. a Reshape).
    shown_inputs: dict[int, str] = field(default_factory=dict)
    #: The planner's choices for it (calibrated presets; :class:`Plan`).
    plan: Plan = NO_PLAN


@dataclass
class Graph:
    tiles: int
    tensors: list[Tensor]
    ops: list[Op]
    setup: list[int]  # operations of the setup program, in order
    main: list[int]  # operations of the main program, in order (bodies excluded)
