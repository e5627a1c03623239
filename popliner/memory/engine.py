"""The memory engine of one analysed profile: stage memory, training stash, cycles and boundary bytes.

Everything popliner says about the memory of a set of operations comes from
here (or from :mod:`popliner.memory.ranges`, the incremental form of the same
figures for contiguous layer ranges). Callers give plain data: operation
indices, or layer indices into ``layer_names``; the unlayered operations go
with the first stage (``first_stage=True``), as PopLiner did. Boundary bytes
are worked out by :mod:`popliner.memory.boundaries`, and the state every
range table of the engine shares by :mod:`popliner.memory.range_state`: the
engine owns both.

Training-dependent figures each have one named method, so that a change to
the training model (:class:`popliner.memory.training.TrainingOptions`, held
as ``options``) changes them in one place:

- :meth:`MemoryEngine.backward_part`: which operations of a stage are backward;
- :meth:`MemoryEngine.stash_windows` and :mod:`popliner.memory.stash_rule`: what one stash
  entry holds; :meth:`MemoryEngine.stash_entry_per_tile` sums it per tile;
- :meth:`MemoryEngine.cycles_split`: forward and backward cycles of a stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from popliner.layout import Layout
from popliner.memory.boundaries import Boundaries, build_boundaries
from popliner.memory.cycles import CycleFacts, cycle_facts, op_cycles
from popliner.memory.liveness import class_steps, window_peak
from popliner.memory.model import MemoryModel
from popliner.memory.range_state import RangeState
from popliner.memory.ranges_shared import SharedParts
from popliner.memory.running import PIECES, Pieces
from popliner.memory.stash_rule import StashWindows, stash_positions, stash_select
from popliner.memory.training import TrainingOptions, build_training_view
from popliner.memory.types import StageMemory
from popliner.memory.whatif import with_live_steps
from popliner.ops.layers import ops_of_layers
from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile

__all__ = ["MemoryEngine"]

class MemoryEngine:
    """Per-tile memory and the other per-stage figures of one profile's operations and layers.

    ``layer_of_op`` gives each operation's layer (an index into
    ``layer_names``, -1 for none); ``counted_vars`` which operations'
    variables count; ``is_backward`` which operations' names mark the
    backward pass; ``training`` whether the profile is a training step.
    """

    def __init__(self, profile: Profile, ops: OperationTable, layer_of_op: np.ndarray, layer_names: Sequence[str],
                 counted_vars: np.ndarray, is_backward: np.ndarray, training: bool,
                 options: TrainingOptions, shared: SharedParts, *, layout: Layout | None = None) -> None:
        if shared.profile is not profile or shared.ops is not ops:
            raise ValueError("a memory engine takes the option-free parts of its own profile and operations only")
        self.ops = ops
        self.layer_of_op = np.asarray(layer_of_op, np.int64)
        self.layer_names = tuple(layer_names)
        self.training = training
        self.options = options
        #: Where the embedding and the head go: the scenario's layout (made here only for an engine built alone).
        self.layout = layout if layout is not None else Layout.of(self.layer_names, self.options.head_placement)
        # The one place the training options change figures: the what-if
        # profile (bytes and live steps of variables) and the view's rules
        # (backward part, stash entry, re-run cycles, pipeline recomputation).
        # ``shared``: the profile's option-free parts, which every option set's engine of the profile starts
        # from (popliner plan builds one per option set); each adds its options' delta.
        self.view = build_training_view(profile, ops, self.layer_of_op, len(self.layer_names),
                                        np.asarray(is_backward, bool), self.options, training, shared.view_memo)
        #: The profile as given, before the options' what-if (what :class:`SharedParts` are made of).
        self.base_profile = profile
        #: The profile's option-free layer parts, shared with every other engine of the same profile.
        self.shared_parts: SharedParts = shared
        self.profile = self.view.profile
        self.is_backward = self.view.is_backward
        self.model = MemoryModel(self.profile, ops, counted_vars)
        #: ``--recompute pipeline``: the figures of re-run sets, by their operations (the model memoises the rest).
        self._rerun_memo: dict[bytes, StageMemory] = {}
        self._range_states: dict[Pieces, RangeState] = {}

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

    def range_state(self, pieces: Pieces = PIECES) -> RangeState:
        """What every range table of this engine shares (in ``pieces``), built by the first that needs it.

        Owned here, not cached beside the engine: it goes when the engine goes.
        """
        found = self._range_states.get(pieces)
        if found is None:
            found = self._range_states[pieces] = RangeState(self, pieces)
        return found

    def release_range_state(self) -> None:
        """Drop the range state now: the running sets it keeps hold the engine, a cycle the collector frees later.

        Its grids' buffers go back to the shared parts, for the next option
        set's engine (no table of this engine may be read after this).
        """
        for state in {id(s): s for s in self._range_states.values()}.values():
            state.recycle(self.shared_parts)
        self._range_states.clear()

    # -- operations of a stage ---------------------------------------------------

    def stage_ops(self, layers: Sequence[int], first_stage: bool) -> np.ndarray:
        """Operations of the given layers, plus the unlayered ones for the first stage."""
        return ops_of_layers(self.layer_of_op, layers, first_stage)

    def range_ops(self, i: int, j: int) -> np.ndarray:
        """Operations of the contiguous layer range ``i..j``; range 0.. holds the unlayered ones."""
        return self.stage_ops(range(i, j + 1), first_stage=i == 0)

    # -- memory ----------------------------------------------------------------

    def stage_memory(self, ops: np.ndarray, variables: np.ndarray | None = None,
                     rerun_variables: np.ndarray | None = None) -> StageMemory:
        """Per-tile memory of a set of operations (the direct model, memoised).

        ``variables``: the set's variables peak per tile when already known
        exactly (see :meth:`popliner.memory.model.MemoryModel.stage`).

        With ``--recompute pipeline`` a stage that PopART re-runs
        (:meth:`pipeline_rerun_part`) re-runs its forward part when its
        backward starts: its variables peak is the larger of the forward
        window's (recomputed variables cut at their last forward read) and the
        backward part's (live steps as profiled). On IPU 0 with a wrapped head
        the head's own variables keep their live steps in the forward window
        too: the head runs forward and backward back to back, re-running nothing.
        ``rerun_variables``: that peak when already known exactly (a range
        table's running set, :mod:`popliner.memory.rerun`).
        """
        memory = self.model.stage(ops, variables)
        rerun = self.pipeline_rerun_window(ops)
        if rerun is None:
            return memory
        key = np.unique(np.asarray(ops, np.int64)).tobytes()
        hit = self._rerun_memo.get(key)
        if hit is None:
            if rerun_variables is None:
                b0, head_kept = rerun
                lo, hi = self.model.window(ops)
                var = self.model.counted_variables(ops)
                forward = window_peak(self.forward_cut_profile(head_kept), var, lo, b0 - 1)
                backward = window_peak(self.profile, var, b0, hi)
                rerun_variables = np.maximum(forward, backward)
            per_tile = memory.per_tile.copy()
            per_tile[0] = rerun_variables
            hit = self._rerun_memo[key] = StageMemory(per_tile)
        return hit

    def pipeline_rerun_window(self, ops: np.ndarray) -> tuple[int, bool] | None:
        """Under ``--recompute pipeline``, where the set's re-run part splits into forward and backward windows.

        ``(b0, head_kept)``: the first step of the re-run part's backward
        part, and whether the set also holds a wrapped head's operations
        (whose variables keep their live steps). None when the set's figure
        is the plain model's: nothing re-run (other modes, the last stage),
        or a re-run part that is all forward or all backward.
        """
        own = self.pipeline_rerun_part(ops)
        if not own.size:
            return None
        back = self.backward_part(own)
        if not back.any() or back.all():
            return None
        return int(self.model.window(own[back])[0]), own.size != len(ops)

    def is_last_stage(self, ops: np.ndarray) -> bool:
        """Does the set hold operations of the last layer (the last pipeline stage does)?"""
        return bool(self.num_layers and (self.layer_of_op[ops] == self.num_layers - 1).any())

    def pipeline_rerun_part(self, ops: np.ndarray) -> np.ndarray:
        """Under ``--recompute pipeline``, the operations of an IPU's set that PopART re-runs from the stash.

        PopART leaves alone the one stage whose forward and backward are back
        to back. Without a wrapped head that is the last IPU's stage (the set
        holding the last layer): nothing is re-run there. With a wrapped head
        it is the head's stage: a set holding ``head`` and ``embedding`` but not
        every layer is IPU 0 of a pipeline, whose first stage (the set without
        the head's operations) is re-run; a set holding every layer is one IPU,
        no pipeline. Empty for the other modes.
        """
        if self.view.recompute != "pipeline" or not self.num_layers:
            return ops[:0]
        layers = self.layer_of_op[ops]
        holds_last = layers == self.num_layers - 1
        if not holds_last.any():
            return ops
        if self.head_wraps and (layers == 0).any() and not np.isin(np.arange(self.num_layers), layers).all():
            return np.asarray(ops[~holds_last])
        return ops[:0]

    def forward_cut_profile(self, head_kept: bool = False) -> Profile:
        """``pipeline``: the what-if profile with every recomputed variable live only up to its last forward read.

        ``head_kept`` (IPU 0 with a wrapped head): the head's variables not cut.
        """
        return self._forward_cut_profile_head_kept if head_kept else self._forward_cut_profile

    @cached_property
    def _forward_cut_profile(self) -> Profile:
        return self._cut_profile(self.view.forward_cut)

    @cached_property
    def _forward_cut_profile_head_kept(self) -> Profile:
        cut = self.view.forward_cut.copy()
        cut[self.model.counted_variables(self.stage_ops([self.head_layer], first_stage=False))] = -1
        return self._cut_profile(cut)

    def _cut_profile(self, cut: np.ndarray) -> Profile:
        # Option sets that cut the same variables of the same what-if profile (the head placements, often)
        # share one forward-cut profile, found by content.
        made: list[tuple[Profile, np.ndarray, Profile]] = self.shared_parts.view_memo.setdefault(b"cut-profiles", [])
        for what_if, known, found in made:
            if what_if is self.profile and np.array_equal(known, cut):
                return found
        found = self._make_cut_profile(cut)
        made.append((self.profile, cut, found))
        return found

    def _make_cut_profile(self, cut: np.ndarray) -> Profile:
        pick = cut >= 0
        n = self.profile.variables.count
        keep_lo = np.where(pick, 0, -1).astype(np.int64)
        keep_hi = np.where(pick, cut, -1).astype(np.int64)
        none = np.full(n, -1, np.int64)
        return with_live_steps(self.profile, self.profile.variables.bytes, none, none, keep_lo, keep_hi)

    # -- training ----------------------------------------------------------------

    def backward_part(self, ops: np.ndarray) -> np.ndarray:
        """Bool per operation of a stage: in the stage's backward part.

        The backward part starts at the stage's first operation whose name marks
        it as backward; everything from that step on belongs to it. Names alone
        would leave out call sites and helpers of the backward pass that carry
        no gradient name.
        """
        named = self.is_backward[ops]
        if not named.any():
            return np.zeros(len(ops), bool)
        first = self.ops.first_step[ops]
        start = int(first[named & (first >= 0)].min(initial=np.iinfo(np.int64).max))
        return np.asarray(named | (first >= start))

    def stash_windows(self, ops: np.ndarray) -> StashWindows | None:
        """The steps of the stage's forward and backward parts; None when it has no stash (inference too)."""
        if not self.training:
            return None
        back = self.backward_part(ops)
        fwd_lo, fwd_hi = self.model.window(ops[~back])
        bwd_lo, bwd_hi = self.model.window(ops[back])
        if fwd_hi < fwd_lo or bwd_hi < bwd_lo:
            return None
        return fwd_lo, fwd_hi, bwd_lo, bwd_hi

    def stash_entry_per_tile(self, ops: np.ndarray) -> np.ndarray:
        """Bytes per tile of one activation stash entry of the stage (zero in inference)."""
        out = np.zeros(self.tiles, np.int64)
        windows = self.stash_windows(ops)
        if windows is None:
            return out
        var = self.model.counted_variables(ops)
        var = var[self.stash_candidate[var]]
        stash = var[self.stash_select(*self.steps_of(var), windows)]
        v = self.profile.variables
        # float64 bincount: exact while a tile's entry is below 2**53 bytes.
        return np.bincount(v.tile[stash], weights=v.bytes[stash], minlength=self.tiles).astype(np.int64)

    @cached_property
    def stash_candidate(self) -> np.ndarray:
        """Variables a stash entry may hold: not always live, not recomputed by ``every-layer``."""
        return np.asarray(~self.always_live_var & ~self.view.never_stash)

    def stash_select(self, first: np.ndarray, last: np.ndarray, windows: StashWindows) -> np.ndarray:
        """Which candidates (first and last live step) one stash entry of a stage holds (:func:`stash_select`)."""
        return stash_select(first, last, windows, self.view.stash_inputs, self.view.inputs_only)

    def stash_positions(self, first: np.ndarray, last: np.ndarray,
                        rows: Sequence[StashWindows | None]) -> np.ndarray | None:
        """For a stage that grows one layer at a time, the growth at which each candidate joins its stash.

        See :func:`popliner.memory.stash_rule.stash_positions`.
        """
        return stash_positions(first, last, rows, self.view.stash_inputs, self.view.inputs_only)

    def cycles_split(self, ops: np.ndarray) -> tuple[int, int]:
        """(forward, backward) cycles of one micro-batch through the stage, re-run forward work in the backward."""
        back = self.backward_part(ops)
        cyc = self.op_cycles[ops]
        return int(cyc[~back].sum()), int(cyc[back].sum()) + self.rerun_cycles(ops)

    def rerun_cycles(self, ops: np.ndarray) -> int:
        """Cycles of the forward work the stage runs again in its backward part (in :meth:`cycles_split`'s backward)."""
        if self.view.recompute == "pipeline":
            ops = self.pipeline_rerun_part(ops)
        return int(self.op_cycles[ops][self.view.rerun_ops[ops]].sum())

    @cached_property
    def cycles(self) -> CycleFacts:
        """Cycles per operation and per layer, and what a re-run adds (:mod:`popliner.memory.cycles`)."""
        return cycle_facts(self.profile, op_cycles(self.profile, self.ops), self.layer_of_op, self.num_layers,
                           self.view.rerun_ops, self.view.recompute == "pipeline")

    @property
    def op_cycles(self) -> np.ndarray:
        """Cycles per operation: the sum over the steps it runs at."""
        return self.cycles.op_cycles

    # -- variables -------------------------------------------------------------

    @cached_property
    def class_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """First and last live step of each liveness class (:func:`popliner.memory.liveness.class_steps`)."""
        return class_steps(self.profile)

    @cached_property
    def _variable_steps(self) -> tuple[np.ndarray, np.ndarray]:
        starts, ends, klass = *self.class_steps, self.profile.variables.klass
        return starts[klass], ends[klass]

    def steps_of(self, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:attr:`var_first_step` and :attr:`var_last_step` of some variables, through their classes."""
        starts, ends = self.class_steps
        klass = self.profile.variables.klass[var]
        return starts[klass], ends[klass]

    @property
    def var_first_step(self) -> np.ndarray:
        """First live step of each variable (its class's first interval start), -1 when never live."""
        return self._variable_steps[0]

    @property
    def var_last_step(self) -> np.ndarray:
        """Last live step of each variable (inclusive), -1 when never live."""
        return self._variable_steps[1]

    @cached_property
    def always_live_var(self) -> np.ndarray:
        return np.asarray(self.profile.always_live_classes()[self.profile.variables.klass])

    # -- boundaries ------------------------------------------------------------

    @cached_property
    def boundaries(self) -> Boundaries:
        """What crosses a boundary between stages (see :mod:`popliner.memory.boundaries`)."""
        shared = self.shared_parts
        span = shared.layer_span(self)
        # Constants read the operations and programs only: the same for every option set.
        constant = shared.view_memo.get(b"constant-var")
        # With a wrapped head, each variable's last layer before the head: read the layering only, like the span.
        wrapped_hi = shared.wrapped_hi(self) if self.head_wraps else None
        made = build_boundaries(self.profile, self.ops, self.model, self.layer_of_op, self.num_layers,
                                self.head_wraps, self.is_backward, self.always_live_var, span=span,
                                constant=constant, wrapped_hi=wrapped_hi)
        if span is None:
            shared.keep_layer_span(self, made.variable_layer_span)
        if constant is None:
            shared.view_memo[b"constant-var"] = made.constant_var
        if made.wrapped_hi is not None and wrapped_hi is None:
            shared.keep_wrapped_hi(self, made.wrapped_hi)
        return made

    # The figures every caller reads, named here so that the engine stays the one object to ask.

    @property
    def crossing(self) -> np.ndarray:
        """Bytes crossing the boundary after each layer but the last (:attr:`Boundaries.crossing`)."""
        return self.boundaries.crossing

    @property
    def gradient_crossing(self) -> np.ndarray:
        """The part of :attr:`crossing` sent backwards."""
        return self.boundaries.gradient_crossing

    @property
    def sent_var(self) -> np.ndarray:
        """Variables an IPU sends when a boundary cuts their users: neither always live nor constant."""
        return self.boundaries.sent_var

    @property
    def constant_var(self) -> np.ndarray:
        """Variables each IPU that reads one makes itself (:attr:`Boundaries.constant_var`)."""
        return self.boundaries.constant_var

    @property
    def multi_layer_var(self) -> np.ndarray:
        """Variables that more than one layer uses."""
        return self.boundaries.multi_layer_var

    @property
    def multi_layer_index(self) -> np.ndarray:
        """The variables that more than one layer uses, sorted (a compact numbering of them)."""
        return self.boundaries.multi_layer_index

    @property
    def always_live_spans(self) -> tuple[tuple[int, int], ...]:
        """(first, last) layer of every always-live variable several layers use (tied weights)."""
        return self.boundaries.always_live_spans

    def boundary_bytes(self, before: Sequence[int], after: Sequence[int], gradients_only: bool = False) -> int:
        """Bytes sent over a boundary between two sets of layers (:meth:`Boundaries.boundary_bytes`)."""
        return self.boundaries.boundary_bytes(before, after, gradients_only)
