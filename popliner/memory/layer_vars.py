"""Every layer's counted variables, split into private and shared, from one pass over the variables.

:class:`popliner.memory.running.LayerParts` needs, per layer, the counted
variables its operations use, split into the ones no other layer uses
(private: most of them, some 150,000 per BERT-Large layer) and the others
(shared). Taking the union of the layer's operations' variable lists and
then looking each up in the boundaries' multi-layer flags sorts some 330,000
entries per layer. But the layer span of every variable
(:attr:`popliner.memory.boundaries.Boundaries.variable_layer_span`, which
the facts have anyway) says it already: a variable is private to layer
``j`` exactly when its first and last layer are both ``j``. Variables are
numbered in long runs of one layer (tensors laid out tile by tile), so one
pass finds the runs, and a layer's private variables are its runs expanded:
sorted, with no union. Only the shared ones still come from the layer's
operations: the multi-layer variables among their entries, a few thousand,
picked from all the operations' entries once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from popliner.arrays import content_key, expand_ranges, gather_csr, sorted_unique
from popliner.memory.boundaries import multi_layer_entries

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts

__all__ = ["LayerVariables"]


class LayerVariables:
    """Per layer of one layering (the operations' layers and counted flags): private and shared variables.

    ``layer_ops[j]`` must be the facts' operations of layer ``j``
    (:func:`popliner.memory.stages.range_ops` of ``j..j``),
    with the unlayered ones in layer 0, as the layer span counts them.
    """

    def __init__(self, facts: MemoryFacts) -> None:
        lo, hi = facts.boundaries.variable_layer_span
        self.multi = facts.boundaries.multi_layer_var
        self.counted = facts.model.counted_vars
        # Each operation's multi-layer variables (its entries of them, in order): a few percent of the entries,
        # picked in one pass, so that a layer's shared variables read only those.
        var_ptr, var_idx = facts.ops.var_ptr, facts.ops.var_idx
        core = facts.layer_of_op if facts.layer_core is None else facts.layer_core
        some = multi_layer_entries(facts.ops, core, self.counted, facts.num_layers, facts.memo)
        at = some[self.multi[var_idx[some]]]
        self.var_idx = var_idx[at]
        self.var_ptr = np.searchsorted(at, var_ptr)
        # Each variable's layer if it is private (-1: shared or unused), then the runs of one such layer.
        label = lo.copy()
        np.putmask(label, lo != hi, -1)  # half np.where's time over 18 M variables (2 % of them shared)
        n = label.size
        cut = np.flatnonzero(label[1:] != label[:-1]) + 1
        starts = np.concatenate(([0], cut)).astype(np.int64) if n else np.zeros(0, np.int64)
        stops = np.concatenate((cut, [n])).astype(np.int64) if n else np.zeros(0, np.int64)
        run_layer = label[starts]
        mine = run_layer >= 0
        starts, stops, run_layer = starts[mine], stops[mine], run_layer[mine]
        # Stable: a layer's runs stay in variable order, so its expanded runs are sorted.
        order = np.argsort(run_layer, kind="stable")
        self.starts, self.lengths = starts[order], (stops - starts)[order]
        self.ptr = np.searchsorted(run_layer[order], np.arange(facts.num_layers + 1))
        self.index = facts.boundaries.multi_layer_index
        self._ranks = _rank_words(self.multi)
        self._made: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    @classmethod
    def of(cls, facts: MemoryFacts) -> LayerVariables:
        """The facts', shared with the other option sets of its profile and layering (head placements, plans)."""
        # What the split reads besides the operation table (the same for every option set of the profile).
        key = content_key(b"layer-variables:", facts.layer_of_op, facts.model.counted_vars,
                          facts.num_layers.to_bytes(8, "little"))
        found: LayerVariables | None = facts.memo.get(key)
        if found is None:
            found = facts.memo[key] = cls(facts)
        return found

    def split(self, j: int, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(private, shared) variables of layer ``j``, whose operations are ``ops``, and the shared ones'
        positions in the boundaries' ``multi_layer_index``.

        The shared ones are made once per layer; the private ones are expanded from their runs at each call
        (all 120 layers of a 120-layer BERT-Large in 0.03 s), not kept: every layering's, kept for a plan,
        were 120 MB each.
        """
        return (self.private(j), *self._shared_of(j, ops))

    def shared_of(self, j: int, ops: np.ndarray) -> np.ndarray:
        """Layer ``j``'s shared variables (its operations ``ops``), as :meth:`split` gives them."""
        return self._shared_of(j, ops)[0]

    def _shared_of(self, j: int, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = self._made.get(j)
        if found is None:
            shared = self.shared(ops)
            found = self._made[j] = (shared, self.positions(shared))
        return found

    def positions(self, var: np.ndarray) -> np.ndarray:
        """Positions of multi-layer variables in the sorted ``multi_layer_index``: how many come before each."""
        if self._ranks is None:
            return np.searchsorted(self.index, var)
        words, before = self._ranks
        word = var >> 6
        below = words[word] & ((np.uint64(1) << (var & 63).astype(np.uint64)) - np.uint64(1))
        return np.asarray(before[word] + np.bitwise_count(below), np.int64)

    def private(self, j: int) -> np.ndarray:
        """Layer ``j``'s counted variables that no other layer uses, sorted (int64: the index type, which gathers
        at them read without converting them first; they are made again at each call, never kept)."""
        return expand_ranges(*self.private_runs(j))

    def private_runs(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """The runs of :meth:`private` (first variable and length of each; none adjacent to the next: a run holds
        every variable of one layer from its first to the next of another layer or none)."""
        a, b = int(self.ptr[j]), int(self.ptr[j + 1])
        return self.starts[a:b], self.lengths[a:b]

    def shared(self, ops: np.ndarray) -> np.ndarray:
        """The counted variables of the layer's operations ``ops`` that other layers use too, sorted (int64)."""
        entries = gather_csr(self.var_ptr, self.var_idx, ops[self.counted[ops]])
        return np.asarray(sorted_unique(entries, nearly_sorted=True), np.int64)


def _rank_words(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The flags packed 64 to a word and the number set before each word (None: no ``np.bitwise_count``).

    A set flag's rank among the set ones is then two reads and a popcount,
    where a binary search over the sorted set (some 10**5 to 10**6 entries)
    misses the cache at every step.
    """
    if not hasattr(np, "bitwise_count"):  # numpy < 2.0
        return None
    packed = np.packbits(flags, bitorder="little")
    padded = np.zeros(-(-packed.size // 8) * 8, np.uint8)
    padded[: packed.size] = packed
    words = padded.view("<u8")
    before = np.zeros(words.size + 1, np.int64)
    np.cumsum(np.bitwise_count(words), out=before[1:])
    return words, before[:-1]
