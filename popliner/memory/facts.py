"""A scenario's memory facts: one frozen value, made once, that every memory figure reads.

:func:`memory_facts` makes it from the profile, its operations and layers
and the training options: the what-if profile and the training view
(:mod:`popliner.memory.training`), the memory model, the layout. The facts
the figures share (cycles, liveness steps of each variable, always-live
and stash-candidate variables, boundary figures, the forward-cut profiles
of ``--recompute pipeline``) are worked out from its own fields when first
read: a command that never needs one does not pay for it, and nothing
outside writes them.

The figures of a set of operations are pure functions of the facts
(:mod:`popliner.memory.stages`); the range tables (:mod:`popliner.memory.ranges`)
take the facts too. ``memo`` is the profile's option-free memo, which
every option set's facts of the same profile and operations share
(``popliner plan`` makes one per option set): keyed by content, each
entry written once and read only from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from popliner.arrays import content_key
from popliner.layout import Layout
from popliner.memory.boundaries import Boundaries, build_boundaries
from popliner.memory.cycles import CycleFacts, cycle_facts, op_cycles
from popliner.memory.liveness import class_steps
from popliner.memory.model import MemoryModel
from popliner.memory.training import TrainingOptions, TrainingView, build_training_view, profiled_always_live
from popliner.memory.types import StageMemory
from popliner.memory.whatif import PROFILED, Delta, Spread, with_live_steps
from popliner.ops.layers import ops_of_layers
from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile

__all__ = ["MemoryFacts", "memory_facts"]


@dataclass(frozen=True, eq=False)
class MemoryFacts:
    """The memory facts of one profile's operations and layers under one set of training options.

    ``layer_of_op`` gives each operation's layer (an index into
    ``layer_names``, -1 for none; the unlayered operations go with the
    first stage). Made by :func:`memory_facts`.
    """

    #: The what-if profile of the training options (bytes and live steps of variables).
    profile: Profile
    #: The profile as given, before the options' what-if.
    base_profile: Profile
    ops: OperationTable
    layer_of_op: np.ndarray
    layer_names: tuple[str, ...]
    #: Is the profile a training step?
    training: bool
    #: Where the embedding and the head go.
    layout: Layout
    #: What the training options change (backward part, stash entry, re-run cycles, pipeline recomputation).
    view: TrainingView
    model: MemoryModel
    #: The profile's option-free memo (see the module's docstring).
    memo: dict[bytes, Any] = field(repr=False)
    #: The core of the layering: each operation's layer in every layering of the profile this one is of (-1: the
    #: operations they place differently), or None (the layering alone): what its layer span is made from
    #: (:func:`popliner.memory.boundaries.counted_layer_span`).
    layer_core: np.ndarray | None = field(default=None, repr=False)
    #: ``--recompute pipeline``: the figures of re-run sets, by their operations (the model memoises the rest);
    #: read and filled by :meth:`rerun_figure` alone.
    _rerun_memo: dict[bytes, StageMemory] = field(default_factory=dict, init=False, repr=False)

    def __repr__(self) -> str:
        return (f"<memory facts of {self.base_profile.path}: {'training' if self.training else 'inference'}, "
                f"{self.num_layers} layers, recompute {self.view.recompute}>")

    @property
    def tiles(self) -> int:
        return self.profile.tiles

    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def has_unlayered(self) -> bool:
        """Are there operations without a layer (they go with the first stage)?"""
        return bool((self.layer_of_op < 0).any())

    @property
    def head_wraps(self) -> bool:
        """``--head-placement wrap`` with a head: the last layer (``head``) is a stage of its own on IPU 0."""
        return self.layout.wraps

    @property
    def head_layer(self) -> int:
        """Index of the ``head`` layer (the last one; meaningful when :attr:`head_wraps`)."""
        return self.num_layers - 1

    @property
    def is_backward(self) -> np.ndarray:
        """Bool per operation: backward (call sites of backward bodies and recompute clones included)."""
        return self.view.is_backward

    # -- facts worked out when first read ------------------------------------------

    @cached_property
    def cycles(self) -> CycleFacts:
        """Cycles per operation and per layer, and what a re-run adds (:mod:`popliner.memory.cycles`)."""
        return cycle_facts(self.profile, op_cycles(self.profile, self.ops), self.layer_of_op, self.num_layers,
                           self.view.rerun_ops, self.view.recompute == "pipeline")

    @cached_property
    def class_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """First and last live step of each liveness class (:func:`popliner.memory.liveness.class_steps`)."""
        return class_steps(self.profile)

    @cached_property
    def always_live_var(self) -> np.ndarray:
        profiled = profiled_always_live(self.base_profile, self.memo)
        if self.profile is self.base_profile:
            return profiled  # no option changed the variables: the same for every such option set
        # A what-if profile: the head placements of one option set share it (and this column), one after another.
        last: list[tuple[Profile, np.ndarray]] = self.memo.setdefault(b"whatif-always-live", [])
        if last and last[0][0] is self.profile:
            return last[0][1]
        # Only the variables it changes can differ from the profile as loaded: read at those alone.
        at = np.flatnonzero(self.view.delta.changed)
        made = profiled.copy()
        made[at] = self.profile.always_live_classes()[self.profile.variables.klass[at]]
        made.flags.writeable = False
        last[:] = [(self.profile, made)]  # the last one only: an earlier what-if profile may be gone from the memo
        return made

    @cached_property
    def stash_candidate(self) -> np.ndarray:
        """Variables a stash entry may hold: not always live, not recomputed by ``every-layer``."""
        always, never = self.always_live_var, self.view.never_stash
        # The head placements of an option set, and the sets without every-layer's cuts (their never-stashed
        # column is one constant column), share both columns: the last one made serves them (forgotten with the
        # what-if profiles, key "whatif...").
        last: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = self.memo.setdefault(b"whatif-stash-candidate", [])
        if last and last[0][0] is always and last[0][1] is never:
            return last[0][2]
        out: np.ndarray = np.logical_or(always, never)
        np.logical_not(out, out=out)  # in place: one column over every variable, not three
        out.flags.writeable = False
        last[:] = [(always, never, out)]
        return out

    @cached_property
    def boundaries(self) -> Boundaries:
        """What crosses a boundary between stages (see :mod:`popliner.memory.boundaries`).

        The layer span (and a wrapped head's) reads the layering and the counted operations only, the
        constants the operations only: the same for every option set, so worked out once per profile.
        """
        key = content_key(b"", self.layer_of_op, self.model.counted_vars, self.num_layers.to_bytes(8, "little"))
        span_key, wrapped_key = b"layer-span:" + key, b"wrapped-hi:" + key
        multi_key = (b"multi-layer-wrapped:" if self.head_wraps else b"multi-layer:") + key
        made = build_boundaries(self.profile, self.ops, self.model, self.layer_of_op, self.num_layers,
                                self.head_wraps, self.is_backward, self.always_live_var,
                                span=self.memo.get(span_key), constant=self.memo.get(b"constant-var"),
                                wrapped_hi=self.memo.get(wrapped_key) if self.head_wraps else None,
                                multi=self.memo.get(multi_key), memo=self.memo, core=self.layer_core)
        self.memo.setdefault(span_key, made.variable_layer_span)
        self.memo.setdefault(multi_key, made.multi)
        self.memo.setdefault(b"constant-var", made.constant_var)
        if made.wrapped_hi is not None:
            self.memo.setdefault(wrapped_key, made.wrapped_hi)
        return made

    def rerun_figure(self, ops: np.ndarray, make: Callable[[], StageMemory]) -> StageMemory:
        """The figure of a re-run set of operations: ``make()``'s (a pure function of these facts), made once."""
        key = np.unique(np.asarray(ops, np.int64)).tobytes()
        found = self._rerun_memo.get(key)
        if found is None:
            found = self._rerun_memo[key] = make()
        return found

    def forward_cut_profile(self, head_kept: bool = False) -> Profile:
        """``pipeline``: the what-if profile with every recomputed variable live only up to its last forward read.

        ``head_kept`` (IPU 0 with a wrapped head): the head's variables not cut.
        """
        return self.forward_cut(head_kept)[0]

    def forward_cut(self, head_kept: bool = False) -> tuple[Profile, Delta]:
        """:meth:`forward_cut_profile`, and what it changes of the profile as loaded."""
        return self._forward_cut_head_kept if head_kept else self._forward_cut

    @cached_property
    def _forward_cut(self) -> tuple[Profile, Delta]:
        return self._cut_profile(self.view.forward_cut, self.view.forward_cut_key)

    @cached_property
    def _forward_cut_head_kept(self) -> tuple[Profile, Delta]:
        cut = self.view.forward_cut
        head = self.model.counted_variables(ops_of_layers(self.layer_of_op, [self.head_layer], False))
        in_head = np.zeros(self.profile.variables.count, bool)
        in_head[head] = True
        kept = ~in_head[cut.at]
        key = content_key(b"head kept", self.view.forward_cut_key, head)
        return self._cut_profile(Spread(cut.at[kept], cut.lo[kept], cut.hi[kept], key), key)

    def _cut_profile(self, keep: Spread, key: bytes) -> tuple[Profile, Delta]:
        # Option sets that cut the same variables of the same what-if profile (the head placements, often)
        # share one forward-cut profile, found by the cut's key (equal keys, equal cuts: no copy of it is kept).
        made: list[tuple[Profile, bytes, tuple[Profile, Delta]]] = self.memo.setdefault(b"cut-profiles", [])
        for what_if, known, found in made:
            if what_if is self.profile and known == key:
                return found
        # The cut variables' classes are those of the profile as loaded unless the what-if profile changes one of
        # them: the rows' ranking is then the same whatever else it changes (the optimizer state off chip).
        delta = self.view.delta
        classes = delta.key if delta.changed[keep.at].any() else PROFILED
        cut, changed = with_live_steps(self.profile, self.profile.variables.bytes, Spread.none(), keep, delta.changed,
                                       self.memo, classes)
        # Made from the what-if profile (its delta's key) and the cut (its key).
        found = (cut, Delta.of(changed, b"forward cut:" + self.view.delta.key + key))
        made.append((self.profile, key, found))
        return found


def memory_facts(profile: Profile, ops: OperationTable, layer_of_op: np.ndarray, layer_names: Sequence[str],
                 counted_vars: np.ndarray, is_backward: np.ndarray, training: bool, options: TrainingOptions,
                 memo: dict[bytes, Any], *, layout: Layout | None = None,
                 core: np.ndarray | None = None) -> MemoryFacts:
    """The memory facts of ``profile`` (as loaded) under ``options``: the one place the options change figures.

    ``counted_vars``: which operations' variables count; ``is_backward``:
    which operations' names mark the backward pass; ``memo``: the profile's
    option-free memo (:attr:`MemoryFacts.memo`); ``layout``: the
    scenario's (made here from the names and the head placement when not given); ``core``: the layering's core
    (:attr:`MemoryFacts.layer_core`).
    """
    layer_of_op = np.asarray(layer_of_op, np.int64)
    names = tuple(layer_names)
    view = build_training_view(profile, ops, layer_of_op, len(names), np.asarray(is_backward, bool), options,
                               training, memo, counted=counted_vars, core=core)
    return MemoryFacts(view.profile, profile, ops, layer_of_op, names, training,
                       layout if layout is not None else Layout.of(names, options.head_placement), view,
                       MemoryModel(view.profile, ops, counted_vars, memo.setdefault(b"program-rows", {})), memo,
                       core)
