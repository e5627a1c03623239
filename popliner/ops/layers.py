"""Layers: operations grouped by a regex on their names, the way PopLiner did.

Rules, in order, for each operation (visited last to first so that a call
can see the layer of the operation after it):

1. ``tensor``: a tensor initialiser (``Tensor/<id>``) has no layer;
2. ``name``: the layer regex matches the operation name (group 1 is the layer);
3. ``inputs``: the regex matches the operation's input names, joined by ``/``
   with dots turned into ``/``;
4. ``call``: a call site takes the layer of the operation that follows it;
5. ``inputs-layer-0``: its inputs match ``inputs_regex_layer_0`` (the
   embedding) -> the first layer;
6. ``none``: no layer.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from popliner.errors import UsageProblem
from popliner.ops.operations import OperationTable

__all__ = [
    "DEFAULT_INPUTS_REGEX_LAYER_0",
    "DEFAULT_LAYER_NAME_REGEX",
    "LayerAssignment",
    "assign_layers",
    "compile_regex",
    "natural_key",
]

log = logging.getLogger(__name__)

DEFAULT_LAYER_NAME_REGEX = r"(?:^|\/)(?:[L|l]ayer|blocks|encoder)[\/_\.]?(\d+)"
DEFAULT_INPUTS_REGEX_LAYER_0 = r"(word_embeddings|Embedding_Dict)"
LayerOrder = Literal["steps", "natural"]


@dataclass(frozen=True, eq=False)
class LayerAssignment:
    """The layer of every operation and the layers in their chosen order."""

    layer_of_op: np.ndarray  # int64 index into ``names``, -1 for no layer
    note: tuple[str, ...]  # how each operation's layer was found
    names: tuple[str, ...]  # layers in order

    def ops_of(self, layer: int) -> np.ndarray:
        return np.flatnonzero(self.layer_of_op == layer)

    def name_of_op(self, op: int) -> str | None:
        k = int(self.layer_of_op[op])
        return self.names[k] if k >= 0 else None

    @property
    def coverage(self) -> float:
        n = len(self.layer_of_op)
        return float((self.layer_of_op >= 0).sum()) / n if n else 1.0


def compile_regex(pattern: str, option: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageProblem(f"{option} {pattern!r}: not a valid regular expression ({exc})") from None


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``layer2`` before ``layer10``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def _match(regex: re.Pattern[str], text: str) -> str | None:
    m = regex.search(text)
    if m is None:
        return None
    return m.group(1) if regex.groups else m.group(0)


def assign_layers(
    ops: OperationTable,
    layer_name_regex: str = DEFAULT_LAYER_NAME_REGEX,
    inputs_regex_layer_0: str = DEFAULT_INPUTS_REGEX_LAYER_0,
    layer_order: LayerOrder = "steps",
) -> LayerAssignment:
    if layer_order not in ("steps", "natural"):
        raise UsageProblem(f"--layer-order {layer_order!r}: expected 'steps' or 'natural'")
    name_re = compile_regex(layer_name_regex, "--layer-name-regex")
    layer0_re = compile_regex(inputs_regex_layer_0, "--inputs-regex-layer-0")
    n = ops.count
    found: list[str | None] = [None] * n
    notes = ["none"] * n
    next_layer: str | None = None
    for op in range(n - 1, -1, -1):
        layer, note = _layer_of(ops, op, name_re, next_layer)
        found[op], notes[op] = layer, note
        if layer is not None:
            next_layer = layer
        if layer is None and not ops.is_tensor[op]:
            joined = "/".join(ops.inputs[op]).replace(".", "/")
            if joined and layer0_re.search(joined):
                notes[op] = "inputs-layer-0"
    names = _order_layers(ops, found, layer_order)
    first = names[0] if names else None
    index = {name: i for i, name in enumerate(names)}
    layer_of_op = np.full(n, -1, np.int64)
    for op in range(n):
        if notes[op] == "inputs-layer-0":
            if first is None:
                notes[op] = "none"
                continue
            found[op] = first
        if found[op] is not None:
            layer_of_op[op] = index[found[op]]  # type: ignore[index]
    result = LayerAssignment(layer_of_op, tuple(notes), tuple(names))
    if n and result.coverage < 0.5:
        log.warning(
            "only %d of %d operations (%.0f%%) got a layer; check --layer-name-regex (now %r)",
            int((layer_of_op >= 0).sum()), n, 100 * result.coverage, layer_name_regex,
        )
    return result


def _layer_of(
    ops: OperationTable, op: int, name_re: re.Pattern[str], next_layer: str | None
) -> tuple[str | None, str]:
    if ops.is_tensor[op]:
        return None, "tensor"
    layer = _match(name_re, ops.names[op])
    if layer is not None:
        return layer, "name"
    joined = "/".join(ops.inputs[op]).replace(".", "/")
    layer = _match(name_re, joined) if joined else None
    if layer is not None:
        return layer, "inputs"
    if ops.is_call[op] and next_layer is not None:
        return next_layer, "call"
    return None, "none"


def _order_layers(ops: OperationTable, found: list[str | None], order: LayerOrder) -> list[str]:
    distinct = {name for name in found if name is not None}
    if order == "natural":
        return sorted(distinct, key=natural_key)
    # Operations are already in order of first step: first appearance wins.
    seen: dict[str, None] = {}
    for name in found:
        if name is not None and name not in seen:
            seen[name] = None
    return list(seen)
