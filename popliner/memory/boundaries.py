"""What crosses a boundary between stages: the variables several layers use, and their bytes.

A split cuts the layer order; every variable used on both sides of a cut
must be sent over the IPU link (activations forwards, their gradients
backwards in training), unless it is always live (each IPU holds its own
weights) or a constant each IPU makes itself. These figures depend on the
layers and the variables only, not on a stage's memory, so they live apart
from the memory model; the memory facts make them once (:attr:`popliner.memory.facts.MemoryFacts.boundaries`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from popliner.arrays import content_key, csr_span, flagged_entries, gather_csr, span_at, widen_span
from popliner.memory.model import MemoryModel
from popliner.ops.layers import ops_of_layers
from popliner.ops.operations import OperationTable
from popliner.profile.model import PROGRAM_TYPES, Profile

__all__ = ["Boundaries", "MultiLayer", "build_boundaries", "constant_vars", "core_span", "counted_layer_span",
           "multi_layer", "multi_layer_entries", "span_dtype", "variable_layer_span", "wrapped_head_hi"]

#: Program types that move data between the host and the IPU.
_STREAM_TYPES = ("StreamCopyBegin", "StreamCopyMid", "StreamCopyEnd")


@dataclass(frozen=True, eq=False)
class MultiLayer:
    """The variables more than one layer uses (a few percent of all), with what the crossings read of them that no
    option changes: the layering's, the same for every option set of it (:func:`multi_layer`)."""

    #: The variables, sorted (a compact numbering of them).
    index: np.ndarray
    #: Their first layer, and their last (a wrapped head's use left out of those the embedding uses too).
    lo: np.ndarray
    hi: np.ndarray
    #: Made by each IPU that reads them (:func:`constant_vars`).
    constant: np.ndarray
    #: The operation that uses each at the earliest step (-1: none runs).
    first_user: np.ndarray


def multi_layer(span: tuple[np.ndarray, np.ndarray], wrapped_hi: np.ndarray | None, constant: np.ndarray,
                first_user: np.ndarray) -> MultiLayer:
    """:class:`MultiLayer` of a layer span (``wrapped_hi``: its ``hi`` with a wrapped head, else None)."""
    lo, hi = span
    index = np.flatnonzero(hi > lo)  # a variable one layer uses crosses no boundary
    return MultiLayer(index, lo[index], (hi if wrapped_hi is None else wrapped_hi)[index], constant[index],
                      first_user[index])


@dataclass(frozen=True, eq=False)
class Boundaries:
    """Boundary figures of one profile's layers (made by :func:`build_boundaries`).

    ``head_wraps``: the last layer is a head wrapped back onto IPU 0, beside
    the embedding (layer 0), which changes what a variable both use crosses.
    The figures read from it are worked out when first read, from its own
    fields alone.
    """

    profile: Profile
    ops: OperationTable
    model: MemoryModel
    layer_of_op: np.ndarray
    num_layers: int
    head_wraps: bool
    is_backward: np.ndarray
    always_live_var: np.ndarray
    #: Per variable: the first and last layer whose counted operations use it (:func:`variable_layer_span`).
    variable_layer_span: tuple[np.ndarray, np.ndarray]
    #: The variables that more than one layer uses, and what the crossings read of them.
    multi: MultiLayer
    #: Variables each IPU that reads one makes itself (:func:`constant_vars`).
    constant_var: np.ndarray
    #: With a wrapped head: the span's ``hi`` with the head's use left out of the variables the embedding uses
    #: too (:func:`wrapped_head_hi`); None without one.
    wrapped_hi: np.ndarray | None

    @property
    def head_layer(self) -> int:
        return self.num_layers - 1

    @property
    def multi_layer_index(self) -> np.ndarray:
        """The variables that more than one layer uses, sorted (a compact numbering of them)."""
        return self.multi.index

    def _used_by(self, layers: Sequence[int], first_stage: bool) -> np.ndarray:
        """The counted variables of the layers' operations (with the unlayered ones for the first stage)."""
        return self.model.counted_variables(ops_of_layers(self.layer_of_op, layers, first_stage))

    @property
    def first_user(self) -> np.ndarray:
        """Per variable, the operation that uses it at the earliest step (-1: none runs)."""
        return self.ops.first_user

    def sent(self, var: np.ndarray, gradients_only: bool = False) -> np.ndarray:
        """Which of the variables ``var`` an IPU sends when a boundary cuts their users: neither always live nor
        constant; ``gradients_only``: also first used by a backward operation (gradients; none in inference).

        Read at the variables asked about only: the crossings read the multi-layer ones, a few percent of all.
        """
        out = ~self.always_live_var[var] & ~self.constant_var[var]
        if gradients_only:
            first = self.first_user[var]
            out &= (first >= 0) & self.is_backward[np.maximum(first, 0)]
        return np.asarray(out)

    @cached_property
    def multi_layer_var(self) -> np.ndarray:
        """Variables that more than one layer uses."""
        lo, hi = self.variable_layer_span
        return np.asarray(hi > lo)

    @cached_property
    def crossing(self) -> np.ndarray:
        """Bytes crossing the boundary after each layer but the last (``num_layers - 1`` entries).

        The not-always-live variables used on both sides of the cut: what a
        stage must send on (activations forwards; in training their gradients
        come back over the same boundary).

        A wrapped head (the last layer) is on IPU 0 with the embedding (layer
        0): a variable both use crosses only where its other layers take it
        (the tied embedding's gradient, made by the head and summed into the
        embedding's, crosses nothing); a variable the head uses and the
        embedding does not goes on from its first layer round to the head.
        """
        return self._crossing()

    @cached_property
    def gradient_crossing(self) -> np.ndarray:
        """The part of :attr:`crossing` sent backwards: variables first used by a backward operation."""
        return self._crossing(gradients_only=True)

    @cached_property
    def _multi_sent(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sent` of the multi-layer variables (not gradients only), and their bytes: what both crossings
        read of this option set's variable columns, gathered once."""
        m = self.multi
        return np.asarray(~self.always_live_var[m.index] & ~m.constant), self.profile.variables.bytes[m.index]

    def _crossing(self, gradients_only: bool = False) -> np.ndarray:
        m = self.multi
        lo, hi = m.lo, m.hi
        sent, nbytes = self._multi_sent
        pick = sent.copy()
        if gradients_only:
            pick &= (m.first_user >= 0) & self.is_backward[np.maximum(m.first_user, 0)]
        if self.wrapped_hi is not None:
            pick &= hi > lo
        lo, hi, nbytes = lo[pick], hi[pick], nbytes[pick]
        # float64 bincounts: exact while the bytes of all variables are below 2**53.
        diff = np.bincount(lo, weights=nbytes, minlength=self.num_layers + 1).astype(np.int64)
        diff -= np.bincount(hi, weights=nbytes, minlength=self.num_layers + 1).astype(np.int64)
        return np.cumsum(diff)[: max(self.num_layers - 1, 0)]

    def _wrapped_head_variables(self, layers: Sequence[int]) -> np.ndarray:
        """The variables a set of layers uses; with a wrapped head in it, the head's alone that the embedding uses
        do not count (the head is on IPU 0 with the embedding: see :attr:`crossing`)."""
        own = [k for k in layers if not (self.head_wraps and k == self.head_layer)]
        used = self._used_by(own, 0 in own) if own else np.zeros(0, np.int64)
        if len(own) == len(layers):
            return used
        head = self._used_by([self.head_layer], False)
        head = np.setdiff1d(head, self._used_by([0], True), assume_unique=True)
        return np.union1d(used, head)

    @cached_property
    def always_live_spans(self) -> tuple[tuple[int, int], ...]:
        """(first, last) layer of every always-live variable several layers use (tied weights)."""
        lo, hi = self.variable_layer_span  # not a wrapped head's
        var = self.multi_layer_index
        var = var[self.always_live_var[var]]
        return tuple(zip(lo[var].tolist(), hi[var].tolist()))

    def boundary_bytes(self, before: Sequence[int], after: Sequence[int], gradients_only: bool = False) -> int:
        """Bytes sent over a boundary between two sets of layers: sent variables both sides use.

        ``before`` holds the first stage's layers when it is not empty, so the
        unlayered operations count on its side. ``gradients_only``: the part
        sent backwards (:attr:`gradient_crossing`).
        """
        b, a = sorted(before), sorted(after)
        cut = len(b)
        if not b or not a:
            return 0
        if b == list(range(cut)) and a == list(range(cut, self.num_layers)):
            # The usual case, a cut through the layer order.
            return int((self.gradient_crossing if gradients_only else self.crossing)[cut - 1])
        if self.head_wraps:
            used_before, used_after = self._wrapped_head_variables(b), self._wrapped_head_variables(a)
        else:
            used_before = self._used_by(b, True)
            used_after = self._used_by(a, False)
        both = np.intersect1d(used_before, used_after, assume_unique=True)
        both = both[self.sent(both, gradients_only)]
        return int(self.profile.variables.bytes[both].sum())


def build_boundaries(profile: Profile, ops: OperationTable, model: MemoryModel, layer_of_op: np.ndarray,
                     num_layers: int, head_wraps: bool, is_backward: np.ndarray, always_live_var: np.ndarray, *,
                     span: tuple[np.ndarray, np.ndarray] | None = None, constant: np.ndarray | None = None,
                     wrapped_hi: np.ndarray | None = None, multi: MultiLayer | None = None,
                     memo: dict[bytes, Any] | None = None, core: np.ndarray | None = None) -> Boundaries:
    """The boundary figures of one layering; ``span``, ``constant``, ``wrapped_hi`` and ``multi``
    (:func:`multi_layer`) when already known; ``memo`` and ``core``: :func:`counted_layer_span`'s.

    Each known part must be the one worked out for the same layers, head placement and counted operations
    (``constant``: the same operations); the others are worked out here, once.
    """
    if span is None:
        span = variable_layer_span(profile, ops, model, layer_of_op, num_layers, memo, core)
    if constant is None:
        constant = constant_vars(profile, ops)
    if head_wraps and wrapped_hi is None:
        entries = multi_layer_entries(ops, layer_of_op if core is None else core, model.counted_vars, num_layers, memo)
        wrapped_hi = wrapped_head_hi(profile, model, layer_of_op, num_layers, *span, entries)
    wrapped_hi = wrapped_hi if head_wraps else None
    if multi is None:
        multi = multi_layer(span, wrapped_hi, constant, ops.first_user)
    return Boundaries(profile, ops, model, layer_of_op, num_layers, head_wraps, is_backward, always_live_var,
                      span, multi, constant, wrapped_hi)


def constant_vars(profile: Profile, ops: OperationTable) -> np.ndarray:
    """Variables made on the device by an initialiser and sent nowhere: each IPU that reads one holds its own.

    A constant (an attention bias, a causal mask, a loss scale) is first
    used by a tensor initialiser (an operation ``Tensor/<id>`` with no
    layer) that streams nothing from the host: a host input is sent on
    like an activation, a constant is not.
    """
    first_user = ops.first_user
    streams = np.isin(profile.programs.type, [PROGRAM_TYPES.index(t) for t in _STREAM_TYPES])
    out = np.zeros(first_user.size, bool)
    # A variable an initialiser first uses is one of its own: read at those (a few), not a gather over every variable.
    for op in np.flatnonzero(ops.is_tensor).tolist():
        if not streams[ops.prog_idx[ops.prog_ptr[op]:ops.prog_ptr[op + 1]]].any():
            var = ops.var_idx[ops.var_ptr[op]:ops.var_ptr[op + 1]]
            out[var[first_user[var] == op]] = True
    return out


def variable_layer_span(profile: Profile, ops: OperationTable, model: MemoryModel, layer_of_op: np.ndarray,
                        num_layers: int, memo: dict[bytes, Any] | None = None,
                        core: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: the first and last layer whose counted operations use it.

    The unlayered operations count as layer 0 (they go with the first
    stage): :func:`counted_layer_span` (``memo``, ``core``: its own) with them taken in.
    Only compared, counted and listed, never added to.
    """
    counted = model.counted_vars
    return widen_span(counted_layer_span(ops, layer_of_op, counted, num_layers, memo, core), ops.var_ptr,
                      ops.var_idx, np.flatnonzero(counted & (layer_of_op < 0)), np.maximum(layer_of_op, 0))


def counted_layer_span(ops: OperationTable, layer_of_op: np.ndarray, counted: np.ndarray, num_layers: int,
                       memo: dict[bytes, Any] | None = None,
                       core: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: the first and last layer of the ``counted`` operations with a layer that use it (unused: the
    dtype's largest value and -1; int16 while the layers and two groups fit, else int32); memoised in ``memo``.

    The layer span and every-layer's unit span (:mod:`popliner.memory.whatif`) each widen it by a few operations:
    one pass over every operation's variables for both (0.6 s each at 10x BERT-Large).

    ``core``: per operation, its layer in every layering of the profile that ``layer_of_op`` is one of (-1: the
    few operations these layerings place differently; :meth:`popliner.base.ProfileBase.layer_core`); None:
    ``layer_of_op`` itself. ``layer_of_op`` numbers the core's operations all one amount above it: the span is
    the core's (one pass over the entries, made once in ``memo`` for every layering) shifted by that amount, with
    the other operations taken in (:func:`core_span`).
    """
    key = content_key(b"counted-layer-span:", layer_of_op, counted, num_layers.to_bytes(8, "little"))
    found: tuple[np.ndarray, np.ndarray] | None = None if memo is None else memo.get(key)
    if found is None:
        core = layer_of_op if core is None else np.asarray(core, np.int64)
        in_core = core >= 0
        shift = (layer_of_op - core)[in_core]
        if shift.size and not (shift == shift[0]).all():
            raise ValueError("a layering's core operations must all be numbered one amount above their core layer")
        lo, hi = core_span(ops, core, counted & in_core, num_layers, memo)
        if shift.size and shift[0]:
            # The unused keep their marks (the dtype's largest value, -1).
            lo = np.where(hi >= 0, lo + lo.dtype.type(shift[0]), lo)
            hi = np.where(hi >= 0, hi + hi.dtype.type(shift[0]), hi)
        found = widen_span((lo, hi), ops.var_ptr, ops.var_idx, np.flatnonzero(counted & (layer_of_op >= 0) & ~in_core),
                           layer_of_op)
        if memo is not None:
            memo[key] = found  # read only from here on
    return found


def span_dtype(num_layers: int) -> type[np.signedinteger]:
    """The type of a layer span: int16 while the layers and two groups fit, else int32 (else int64)."""
    return np.int16 if num_layers + 2 < 2**15 else np.int32 if num_layers + 2 < 2**31 else np.int64


def core_span(ops: OperationTable, core: np.ndarray, counted: np.ndarray, num_layers: int,
              memo: dict[bytes, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`csr_span` of the ``counted`` operations' ``core`` layers, in :func:`span_dtype` of ``num_layers``
    (unused: the dtype's largest value and -1); memoised in ``memo`` (read only): one per core, for its layerings."""
    dtype = span_dtype(num_layers)
    key = content_key(b"core-span:", core, counted, np.dtype(dtype).str.encode())
    found: tuple[np.ndarray, np.ndarray] | None = None if memo is None else memo.get(key)
    if found is None:
        found = csr_span(ops.var_ptr, ops.var_idx, np.flatnonzero(counted & (core >= 0)), core, ops.num_variables,
                         dtype, lo_none=int(np.iinfo(dtype).max))
        if memo is not None:
            memo[key] = found  # read only from here on
    return found


def wrapped_head_hi(profile: Profile, model: MemoryModel, layer_of_op: np.ndarray, num_layers: int,
                    lo: np.ndarray, hi: np.ndarray, entries: np.ndarray) -> np.ndarray:
    """``hi`` of the span with the wrapped head's use left out of the variables the embedding uses too.

    ``entries``: the positions of the operations' entries that hold every multi-layer variable's
    (:func:`multi_layer_entries`); the variables both the embedding and the head use are some.
    """
    head = num_layers - 1
    both = (lo == 0) & (hi == head)
    if not both.any():
        return hi
    # The last layer before the head that uses each variable (0: only the embedding and the head), found for those
    # variables alone (a few): one pass over the multi-layer variables' entries (a table of those alone), not a
    # scatter of every counted operation's variables.
    at = np.flatnonzero(both)
    ops = model.ops
    rows = np.flatnonzero(model.counted_vars & (layer_of_op >= 1) & (layer_of_op < head))
    before = span_at(np.searchsorted(entries, ops.var_ptr), ops.var_idx[entries], rows, layer_of_op, at,
                     profile.variables.count, hi.dtype.type)[1]
    out = hi.copy()
    out[at] = np.maximum(before, 0)
    return out


def multi_layer_entries(ops: OperationTable, core: np.ndarray, counted: np.ndarray, num_layers: int,
                        memo: dict[bytes, Any] | None = None) -> np.ndarray:
    """The entries (positions in the operations' variable lists) of every variable that more than one layer may use
    in a layering of ``core`` (:func:`counted_layer_span`) whose ``counted`` operations count: those the core's
    span puts in several layers, and those of the operations out of the core, whatever layer a layering gives them.

    A variable only core operations use is in several layers of such a layering exactly when it is in several of
    the core's (they number the core's layers all one amount higher). One pass over every entry per core, kept in
    ``memo`` (read only): the layerings of a plan pick their multi-layer entries from these.
    """
    counted = counted & (core >= 0)
    key = content_key(b"multi-layer-entries:", np.asarray(core, np.int64), counted)  # whatever the layering
    found: np.ndarray | None = None if memo is None else memo.get(key)
    if found is None:
        lo, hi = core_span(ops, core, counted, num_layers, memo)
        flags = hi > lo
        flags[gather_csr(ops.var_ptr, ops.var_idx, np.flatnonzero(core < 0))] = True
        found = flagged_entries(flags, ops.var_idx)
        found.flags.writeable = False
        if memo is not None:
            memo[key] = found  # read only from here on
    return found
