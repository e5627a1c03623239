"""A scenario's compute cycles as plain facts, and the pure functions that read them.

Cycles come from the profile's programs alone (each step's maximum over
tiles, summed per operation): the training options change which
operations a stage runs again (``rerun_ops``), never a program's cycles.
:func:`cycle_facts` makes the frozen value once per scenario;
:func:`range_cycles` is what a range table reads for ``i..j``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile

__all__ = ["CycleFacts", "cycle_facts", "op_cycles", "range_cycles"]


@dataclass(frozen=True, eq=False)
class CycleFacts:
    """Cycles per operation and per layer (layer 0 with the unlayered operations), and what a re-run adds."""

    #: Cycles per operation: the sum over the steps it runs at.
    op_cycles: np.ndarray
    #: Cycles per layer.
    layer_cycles: np.ndarray
    #: Per layer, the forward cycles a recomputing stage runs again.
    rerun_layer_cycles: np.ndarray
    #: Does the profile give cycles at all (and do its layers run any)?
    has_cycles: bool
    #: ``--recompute pipeline``: the last stage (and a wrapped head's) re-runs nothing.
    pipeline: bool
    #: Running sums of :attr:`layer_cycles` and :attr:`rerun_layer_cycles` from 0 (Python integers): a range's
    #: cycles are two differences, not a sum over its layers (a plan reads tens of thousands of ranges).
    layer_prefix: tuple[int, ...] = (0,)
    rerun_prefix: tuple[int, ...] = (0,)

    @property
    def num_layers(self) -> int:
        return len(self.layer_cycles)


def op_cycles(profile: Profile, ops: OperationTable) -> np.ndarray:
    """Cycles per operation: the sum, over the steps it runs at, of each step's program's maximum over tiles."""
    per_program = profile.programs.cycles.row_max()
    step = per_program[profile.steps] if profile.num_steps else np.zeros(0, np.int64)
    owner = ops.op_of_step
    keep = owner >= 0
    return np.bincount(owner[keep], weights=step[keep], minlength=ops.count).astype(np.int64)


def cycle_facts(profile: Profile, per_op: np.ndarray, layer_of_op: np.ndarray, num_layers: int,
                rerun_ops: np.ndarray, pipeline: bool) -> CycleFacts:
    """The cycle facts of one layering and recomputation (``per_op``: :func:`op_cycles`)."""
    if not num_layers:
        empty = np.zeros(0, np.int64)
        return CycleFacts(per_op, empty, empty, False, pipeline)
    layer = np.where(layer_of_op < 0, 0, layer_of_op)
    per_layer = np.bincount(layer, weights=per_op, minlength=num_layers).astype(np.int64)
    rerun = np.bincount(layer, weights=np.where(rerun_ops, per_op, 0), minlength=num_layers).astype(np.int64)
    return CycleFacts(per_op, per_layer, rerun, bool(profile.programs.has_cycles and per_layer.any()), pipeline,
                      _prefix(per_layer), _prefix(rerun))


def _prefix(per_layer: np.ndarray) -> tuple[int, ...]:
    """``out[k]``: the sum of the first ``k`` values, in Python integers (exact, as the int64 sums they replace)."""
    return tuple(itertools.accumulate(per_layer.tolist(), initial=0))


def range_cycles(facts: CycleFacts, i: int, j: int, with_head: bool = False) -> int:
    """Cycles of one micro-batch through layers ``i..j``, ``i <= j`` (with re-run forward work).

    ``with_head``: the IPU also holds a wrapped head (``i..j`` then index the
    layers before it). The head is a stage of its own, whose forward work
    ``pipeline`` does not re-run; with every layer on one IPU nothing is.
    """
    last = facts.num_layers - 1
    if with_head:
        if facts.pipeline and i == 0 and j == last - 1:
            return int(facts.layer_cycles.sum())
        return range_cycles(facts, i, j) + range_cycles(facts, last, last)
    layer, rerun = facts.layer_prefix, facts.rerun_prefix
    base = layer[j + 1] - layer[i]
    if facts.pipeline and j == last:
        return base
    return base + rerun[j + 1] - rerun[i]
