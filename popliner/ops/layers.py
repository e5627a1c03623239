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

The layer regex comes from a named preset (:data:`LAYER_PRESETS`); the presets,
how ``auto`` picks one and ``--layer-name-regex`` overriding them: README
('Layer names'). A tie goes to more layers because they are finer stages to split between.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from popliner.errors import UsageProblem
from popliner.ops.operations import OperationTable
from popliner.regexes import Searcher, compile_bounded

__all__ = [
    "AUTO_PRESET",
    "DEFAULT_INPUTS_REGEX_LAYER_0",
    "DEFAULT_LAYER_NAME_REGEX",
    "LAYER_PRESETS",
    "LayerAssignment",
    "LayerPreset",
    "announce_layers",
    "assign_layers",
    "choose_layers",
    "layers_key",
    "natural_key",
    "ops_of_layers",
    "preset_names",
]

log = logging.getLogger(__name__)

DEFAULT_LAYER_NAME_REGEX = r"(?:^|\/)(?:[L|l]ayer|blocks|encoder)[\/_\.]?(\d+)"
DEFAULT_INPUTS_REGEX_LAYER_0 = r"(word_embeddings|Embedding_Dict)"
LayerOrder = Literal["steps", "natural"]
AUTO_PRESET = "auto"


def _module_path(block: str) -> str:
    """A dot-separated module path ending in ``<block>.<index>``; group 1 is that path.

    The path starts at the beginning of the name or after a ``/`` scope, may
    have any prefix of modules (``bert.encoder.``), and must end at a module
    boundary so that ``layer.1`` never matches inside ``layer.12``.
    """
    return rf"(?:^|/)((?:\w+\.)*?{block}\.\d+)(?=[./:]|$)"


@dataclass(frozen=True)
class LayerPreset:
    """A named layer rule: the regex on operation names and how input names are joined."""

    name: str
    regex: str
    #: Input names are joined by ``/`` and their dots turned into ``/`` first
    #: (PopART scopes); module-path presets keep the dots.
    dots_to_slashes: bool
    example: str  # an operation name and the layer it gets, for help and docs


#: Tried in this order by ``auto``; on equal coverage and layer count the first one wins.
LAYER_PRESETS: tuple[LayerPreset, ...] = (
    LayerPreset("popart", DEFAULT_LAYER_NAME_REGEX, True, "bert/encoder/layer_3/attention/MatMul -> 3"),
    LayerPreset("huggingface", _module_path("(?:layer|layers|block)"), False,
                "bert.encoder.layer.3.attention.self.query -> bert.encoder.layer.3"),
    LayerPreset("gpt2", _module_path("h"), False, "transformer.h.3.mlp.c_fc -> transformer.h.3"),
    LayerPreset("llama", _module_path("layers"), False, "model.layers.3.self_attn.q_proj -> model.layers.3"),
    LayerPreset("timm", _module_path("blocks"), False, "blocks.3.attn.qkv -> blocks.3"),
    LayerPreset("torchvision", _module_path(r"layer\d+"), False, "layer3.1.conv2 -> layer3.1"),
)


def preset_names() -> tuple[str, ...]:
    """The preset names, in the order ``auto`` tries them."""
    return tuple(p.name for p in LAYER_PRESETS)


def _preset(name: str) -> LayerPreset:
    for preset in LAYER_PRESETS:
        if preset.name == name:
            return preset
    raise UsageProblem(f"--layer-preset {name!r}: expected {AUTO_PRESET} or one of {', '.join(preset_names())}")


@dataclass(frozen=True, eq=False)
class LayerAssignment:
    """The layer of every operation and the layers in their chosen order."""

    layer_of_op: np.ndarray  # int64 index into ``names``, -1 for no layer
    note: tuple[str, ...]  # how each operation's layer was found
    names: tuple[str, ...]  # layers in order
    #: The preset that gave the layer regex, or ``"regex"`` for --layer-name-regex.
    rule: str = "regex"

    def ops_of(self, layer: int) -> np.ndarray:
        return np.flatnonzero(self.layer_of_op == layer)

    def name_of_op(self, op: int) -> str | None:
        k = int(self.layer_of_op[op])
        return self.names[k] if k >= 0 else None

    @property
    def layered_ops(self) -> int:
        return int((self.layer_of_op >= 0).sum())

    @property
    def coverage(self) -> float:
        n = len(self.layer_of_op)
        return self.layered_ops / n if n else 1.0


def ops_of_layers(layer_of_op: np.ndarray, layers: Sequence[int], first_stage: bool) -> np.ndarray:
    """Operations of the given layers, plus the unlayered ones for the first stage (where PopLiner put them)."""
    mask = np.isin(layer_of_op, np.asarray(layers, np.int64))
    if first_stage:
        mask |= layer_of_op < 0
    return np.flatnonzero(mask)


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``layer2`` before ``layer10``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def _match(regex: Searcher, text: str) -> str | None:
    m = regex.search(text)
    if m is None:
        return None
    found: str | None = m.group(1) if regex.groups else m.group(0)
    return found


def choose_layers(
    ops: OperationTable,
    preset: str = AUTO_PRESET,
    layer_name_regex: str | None = None,
    inputs_regex_layer_0: str = DEFAULT_INPUTS_REGEX_LAYER_0,
    layer_order: LayerOrder = "steps",
) -> LayerAssignment:
    """Layers from ``layer_name_regex`` when given, else from the preset (``auto``: the best one)."""
    if layer_name_regex is not None:
        layers = assign_layers(ops, layer_name_regex, inputs_regex_layer_0, layer_order)
    else:
        best: LayerAssignment | None = None
        for candidate in LAYER_PRESETS if preset == AUTO_PRESET else (_preset(preset),):
            trial = assign_layers(ops, candidate.regex, inputs_regex_layer_0, layer_order, rule=candidate.name,
                                  dots_to_slashes=candidate.dots_to_slashes)
            if best is None or (trial.layered_ops, len(trial.names)) > (best.layered_ops, len(best.names)):
                best = trial
        assert best is not None
        layers = best
    announce_layers(layers, preset, layer_name_regex)
    return layers


def layers_key(preset: str, layer_name_regex: str | None, inputs_regex_layer_0: str, layer_order: LayerOrder) -> str:
    """What :func:`choose_layers` depends on besides the operations: a stored assignment is reused under it."""
    return json.dumps(["layers", 1, preset, layer_name_regex, inputs_regex_layer_0, layer_order])


def announce_layers(layers: LayerAssignment, preset: str, layer_name_regex: str | None) -> None:
    """Log how the layers were chosen (and warn when few operations got one), as :func:`choose_layers` does.

    Also said for an assignment read back from the cache, so a cached run logs the same.
    """
    if layer_name_regex is not None:
        _warn_low_coverage(layers, f"check --layer-name-regex (now {layer_name_regex!r})")
        _said(layers, "--layer-name-regex")
    elif preset != AUTO_PRESET:
        _warn_low_coverage(layers, f"check --layer-preset {layers.rule}")
        _said(layers, f"preset {layers.rule}")
    else:
        _warn_low_coverage(layers, f"the best preset, {layers.rule}; try --layer-preset or --layer-name-regex")
        _said(layers, f"preset {layers.rule} (auto)")


def _said(layers: LayerAssignment, how: str) -> None:
    log.info("layers by %s: %d layers, %d of %d operations (%.0f%%) have one", how, len(layers.names),
             layers.layered_ops, len(layers.layer_of_op), 100 * layers.coverage)


def assign_layers(
    ops: OperationTable,
    layer_name_regex: str = DEFAULT_LAYER_NAME_REGEX,
    inputs_regex_layer_0: str = DEFAULT_INPUTS_REGEX_LAYER_0,
    layer_order: LayerOrder = "steps",
    *,
    rule: str = "regex",
    dots_to_slashes: bool = True,
) -> LayerAssignment:
    if layer_order not in ("steps", "natural"):
        raise UsageProblem(f"--layer-order {layer_order!r}: expected 'steps' or 'natural'")
    # A preset's pattern (and the default inputs pattern) is the project's own: searched unbounded.
    name_re = compile_bounded(layer_name_regex, "--layer-name-regex",
                              layer_name_regex if rule != "regex" else DEFAULT_LAYER_NAME_REGEX)
    layer0_re = compile_bounded(inputs_regex_layer_0, "--inputs-regex-layer-0", DEFAULT_INPUTS_REGEX_LAYER_0)
    n = ops.count
    found: list[str | None] = [None] * n
    notes = ["none"] * n
    next_layer: str | None = None
    for op in range(n - 1, -1, -1):
        joined = _joined_inputs(ops.inputs[op], dots_to_slashes)
        layer, note = _layer_of(ops, op, name_re, next_layer, joined)
        found[op], notes[op] = layer, note
        if layer is not None:
            next_layer = layer
        if layer is None and not ops.is_tensor[op]:
            if joined and layer0_re.search(joined):
                notes[op] = "inputs-layer-0"
    names = _order_layers(found, layer_order)
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
    return LayerAssignment(layer_of_op, tuple(notes), tuple(names), rule)


def _warn_low_coverage(result: LayerAssignment, advice: str) -> None:
    n = len(result.layer_of_op)
    if n and result.coverage < 0.5:
        log.warning("only %d of %d operations (%.0f%%) got a layer; %s", result.layered_ops, n,
                    100 * result.coverage, advice)


def _joined_inputs(inputs: tuple[str, ...], dots_to_slashes: bool) -> str:
    joined = "/".join(inputs)
    return joined.replace(".", "/") if dots_to_slashes else joined


def _layer_of(
    ops: OperationTable, op: int, name_re: Searcher, next_layer: str | None, joined: str
) -> tuple[str | None, str]:
    if ops.is_tensor[op]:
        return None, "tensor"
    layer = _match(name_re, ops.names[op])
    if layer is not None:
        return layer, "name"
    layer = _match(name_re, joined) if joined else None
    if layer is not None:
        return layer, "inputs"
    if ops.is_call[op] and next_layer is not None:
        return next_layer, "call"
    return None, "none"


def _order_layers(found: list[str | None], order: LayerOrder) -> list[str]:
    # Operations are already in order of first step: first appearance wins.
    distinct = list(dict.fromkeys(name for name in found if name is not None))
    return sorted(distinct, key=natural_key) if order == "natural" else distinct
