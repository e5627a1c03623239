"""Head grouping: the operations without a layer, split into the embedding and the head.

An engineer puts the embedding lookup on the first IPU and the head (a tied
LM or MLM head, a classifier) after the last layer, or back on IPU 0
(``--head-placement last``/``wrap``, docs/solvers.md). The layer rules of
:mod:`popliner.ops.layers` leave both without a layer; :func:`head_groups`
tells them apart by when they run, and :func:`place_unlayered` makes them
layers of their own (``embedding`` first, ``head`` last).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from popliner.arrays import gather_csr, sorted_unique
from popliner.layout import EMBEDDING_GROUP, HEAD_GROUP, HeadPlacement
from popliner.ops.layers import LayerAssignment
from popliner.ops.operations import OperationTable
from popliner.ops.roles import operation_roles, through_calls, unit_backward_start
from popliner.profile.model import Profile

__all__ = ["TiedWeight", "UnlayeredGroups", "head_groups", "place_unlayered", "regroup_layers", "tied_variables",
           "tied_weight", "unlayered_groups"]

#: (groups, backward, is_update) of :func:`head_groups` (:func:`unlayered_groups`), None when no operation is left
#: without a layer.
UnlayeredGroups = tuple[np.ndarray, np.ndarray, np.ndarray] | None


def head_groups(ops: OperationTable, layer_of_op: np.ndarray, num_layers: int, backward_named: np.ndarray,
                is_update: np.ndarray, notes: Sequence[str] | None = None,
                called: np.ndarray | None = None) -> np.ndarray:
    """For each operation: 0 = embedding, 1 = head, -1 = it stays in its layer.

    The head runs after the last layer's forward part and before its backward
    part; every other unlayered operation belongs to the embedding. Unlayered
    updates of a weight that only the head (not the embedding) uses join the head.

    With ``notes`` (how each operation's layer was found) two more rules
    apply, so that the groups hold what an engineer would put there:

    - an operation the ``inputs-layer-0`` rule put in the first layer (the
      word embedding's gather and update, a tied LM head's matmuls) counts as
      unlayered: it joins the head inside the head's window, else the embedding;
    - the window is bounded by the last layer's operations found by ``name``
      (and the call sites of such bodies, through ``called``), and the last
      layer's other operations inside it (found by ``inputs``, e.g. GPT-2's
      ``ln_f``, or by ``call``, e.g. the LM head's serialised matmuls) join the head.

    Without ``notes`` every operation of the last layer bounds the window and none moves.
    """
    loose = layer_of_op < 0
    if notes is not None:
        loose = loose | (np.asarray(notes, dtype=object) == "inputs-layer-0")
    out = np.where(loose, 0, -1).astype(np.int64)
    if num_layers == 0:
        return out
    mine = (layer_of_op == num_layers - 1) & ~loose
    bounds = mine & _found_by_name(layer_of_op, notes, called, num_layers - 1) if notes is not None else mine
    e, s = _head_window(bounds, ops.first_step, ops.last_step, backward_named)
    if e < 0:
        # No operation found by name runs in the layer's forward part: the window would open at the
        # start of the step. All of the layer's operations bound it, and none moves.
        bounds = mine
        e, s = _head_window(bounds, ops.first_step, ops.last_step, backward_named)
    window = (ops.first_step > e) & (ops.first_step < s)
    head = loose & window
    if notes is not None:
        head |= mine & ~bounds & window
    out[head] = 1
    _head_only_updates(ops, out, loose & ~head, is_update)
    return out


def _found_by_name(layer_of_op: np.ndarray, notes: Sequence[str], called: np.ndarray | None, layer: int) -> np.ndarray:
    """Operations of ``layer`` found by their own name, and the call sites of such operations."""
    named = (np.asarray(notes, dtype=object) == "name") & (layer_of_op == layer)
    return named if called is None else through_calls(named, called)


def _head_window(bounds: np.ndarray, first: np.ndarray, last: np.ndarray,
                 backward_named: np.ndarray) -> tuple[int, int]:
    """(e, s): the last step of the bounding operations' forward part and the first of their backward part."""
    unit = np.where(bounds, 0, -1).astype(np.int64)
    s = int(unit_backward_start(unit, first, backward_named, 1)[0])
    fwd = bounds & (first >= 0) & (first < s)
    return (int(last[fwd].max()) if fwd.any() else -1), s


def _head_only_updates(ops: OperationTable, out: np.ndarray, candidates: np.ndarray, is_update: np.ndarray) -> None:
    """Move to the head (in ``out``) the candidate updates of weights the head uses and the embedding does not."""
    head_vars = np.zeros(ops.num_variables, bool)
    emb_vars = np.zeros(ops.num_variables, bool)
    for op in np.flatnonzero((out >= 0) & ~is_update).tolist():
        (head_vars if out[op] == 1 else emb_vars)[ops.vars_of(op)] = True
    for op in np.flatnonzero(candidates & is_update).tolist():
        var = ops.vars_of(op)
        if head_vars[var].any() and not emb_vars[var].any():
            out[op] = 1


def regroup_layers(layers: LayerAssignment, groups: np.ndarray, placement: HeadPlacement) -> LayerAssignment:
    """The layer assignment with the embedding and head as layers of their own (``last``/``wrap``)."""
    if placement == "first" or EMBEDDING_GROUP in layers.names:
        return layers
    names = list(layers.names)
    shift = np.where(layers.layer_of_op >= 0, layers.layer_of_op + 1, -1)
    layer_of_op = shift.copy()
    layer_of_op[groups == 0] = 0
    layer_of_op[groups == 1] = len(names) + 1
    notes = tuple(EMBEDDING_GROUP if g == 0 else HEAD_GROUP if g == 1 else n
                  for g, n in zip(groups.tolist(), layers.note))
    return LayerAssignment(layer_of_op, notes, (EMBEDDING_GROUP, *names, HEAD_GROUP), layers.rule)


def unlayered_groups(profile: Profile, ops: OperationTable, layers: LayerAssignment, backward_named: np.ndarray,
                     update_regex: str, memo: dict[bytes, Any] | None = None) -> UnlayeredGroups:
    """(groups, backward, is_update) of :func:`head_groups`, or None when no operation is left without a layer.

    It reads the update regex and no other option: the head placements and the tie share it (the caller keeps it,
    :meth:`popliner.base.ProfileBase.layers_for`; 38 ms at 1x BERT-Large, mostly the regex and the call sites).
    ``memo``: :func:`popliner.ops.roles.operation_roles`'s (the training views read the same roles).
    """
    loose = (layers.layer_of_op < 0) | (np.asarray(layers.note, dtype=object) == "inputs-layer-0")
    if not loose.any() or not layers.names:
        return None
    called, is_update, backward, clones = operation_roles(profile, ops, backward_named, update_regex, memo)
    backward = backward | clones
    groups = head_groups(ops, layers.layer_of_op, len(layers.names), backward, is_update, layers.note, called)
    return groups, backward, is_update


def place_unlayered(layers: LayerAssignment, found: UnlayeredGroups, placement: HeadPlacement) -> LayerAssignment:
    """The layer assignment for ``--head-placement``: with ``last``/``wrap`` the embedding and head become layers
    (``found``: :func:`unlayered_groups` of ``layers``)."""
    return layers if found is None or placement == "first" else regroup_layers(layers, found[0], placement)


def tied_variables(profile: Profile, ops: OperationTable, found: UnlayeredGroups) -> np.ndarray:
    """The always-live variables the head and the embedding both read (sorted indices; empty: no tie).

    The operations :func:`place_unlayered` would group as the head (forward
    ones, run after the last layer) and the embedding's forward operations
    read the same variable: a tied LM or MLM head. Found from the profile's
    operations and variables, whatever they are called (``found``: :func:`unlayered_groups`).
    """
    if found is None:
        return np.zeros(0, np.int64)
    groups, backward, is_update = found
    forward = np.flatnonzero((groups >= 0) & ~backward & ~is_update)
    # The variables of each group, as sorted arrays: masks over every variable cost a pass over millions.
    used = [sorted_unique(gather_csr(ops.var_ptr, ops.var_idx, forward[groups[forward] == g])) for g in (0, 1)]
    both = np.intersect1d(used[0], used[1], assume_unique=True)
    shared: np.ndarray = both[profile.always_live_classes()[profile.variables.klass[both]]].astype(np.int64)
    return shared


@dataclass(frozen=True)
class TiedWeight:
    """The weight a tied head shares with the embedding: its name, its pieces (variables) and its bytes."""

    name: str
    variables: int
    bytes: int

    def text(self) -> str:
        return f"{self.name} ({self.bytes:,} bytes)"


def tied_weight(profile: Profile, ops: OperationTable, groups: UnlayeredGroups) -> TiedWeight | None:
    """The weight the head shares with the embedding (:func:`tied_variables` of :func:`unlayered_groups`), or None."""
    found = tied_variables(profile, ops, groups)
    if not found.size:
        return None
    sizes = profile.variables.bytes[found]
    # Named by its largest piece: the pieces of one tensor carry its name.
    return TiedWeight(profile.variables.name(int(found[int(np.argmax(sizes))])), int(found.size), int(sizes.sum()))
