"""The logical model: tensors and operations, before lowering to programs.

A model builder (:mod:`popliner.synth.models`) declares forward operations
with :meth:`GraphBuilder.op`. For training, :meth:`GraphBuilder.backward`
walks the forward operations in reverse and emits, for each, the gradient
operations its :class:`GradRule` list describes; operations declared with
``share=KEY`` become PopART-style outlined calls of one shared body. What
that gives, and how :class:`Compiled` (recomputation, off-chip or sharded
optimizer state, a half first moment) changes it before lowering, is
docs/synthetic-profiles.md's "What it models" and "Compiled-with options".
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence

import numpy as np

from popliner.synth.catalog import KERNELS
from popliner.synth.choices import NO_PLAN, Plan
from popliner.synth.graph_types import ALWAYS_LIVE, RECOMPUTED, Compiled, GradRule, Graph, Op, Tensor, TKind

__all__ = ["ALWAYS_LIVE", "RECOMPUTED", "Compiled", "GradRule", "Graph", "GraphBuilder", "Op", "TKind", "Tensor"]


GOLDEN = 0.6180339887498949
#: A graph compiled with no training options (no recomputation, state on chip).
_AS_IS = Compiled()
#: The layer number in an operation's group, as the project's default layer regex finds it.
_LAYER = re.compile(r"(?:^|/)(?:[L|l]ayer|blocks|encoder)[/_.]?(\d+)")
#: An input that puts an operation without a layer in the first one (the default ``inputs_regex_layer_0``).
_LAYER0_INPUT = re.compile(r"word_embeddings|Embedding_Dict")


class GraphBuilder:
    """Collects tensors and operations; see the module docstring."""

    #: A tensor occupies at least this many bytes per tile of its span.
    GRAIN = 256

    def __init__(self, tiles: int, rng: np.random.Generator, optimizer: str,
                 compiled: Compiled = _AS_IS, plans: Mapping[str, Plan] | None = None) -> None:
        self.tiles = tiles
        self.rng = rng
        self.optimizer = optimizer
        self.compiled = compiled
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.setup: list[int] = []
        self.main: list[int] = []
        self.phase = "fwd"
        self.bodies: dict[str, int] = {}
        self.counter = 0  # suffix of generic names (Transpose_<n>, GradSum_<n>)
        self.instances = 0  # Call instance ids
        #: The planner's choices by row: a layer number, or "no layer" (calibrated presets; see :class:`Plan`).
        self.plans: Mapping[str, Plan] = plans or {}
        #: Tensors smaller than every tile are mapped from tile 0 (Poplar's linear mapping), not from seeded starts.
        self.linear_mapping = False
        #: While set, operations keep the generator's own lowering (only the partials split is planned).
        self.unplanned = False

    # -- tensors --------------------------------------------------------------

    def span(self, nbytes: int) -> tuple[int, int]:
        """Tiles for a tensor: as many as its size needs, from a seeded start.

        Small tensors start on low tiles more often (Poplar maps them from
        tile 0 upwards), which makes the first tiles a little hotter.
        Tensors spanning every tile start at well spread positions.
        """
        count = int(min(self.tiles, max(1, -(-nbytes // self.GRAIN))))
        if count >= self.tiles:
            # Golden-ratio starts: whatever subset of its tiles a tensor uses
            # (scale < 1 uses every k-th), consecutive tensors use different ones.
            return int((len(self.tensors) * GOLDEN) % 1.0 * self.tiles), self.tiles
        if self.linear_mapping:
            # A contiguous range that never wraps past the last tile, as Poplar's linear mappings are.
            return int(self.rng.integers(0, self.tiles - count + 1)), count
        hi = self.tiles if count * 8 > self.tiles else max(1, self.tiles // 4)
        return int(self.rng.integers(0, hi)), count

    def tensor(self, name: str, nbytes: int, kind: TKind, group: str = "",
               span: tuple[int, int] | None = None) -> int:
        start, count = span if span is not None else self.span(nbytes)
        t = Tensor(len(self.tensors), name, int(nbytes), kind, start, count, group=group)
        t.requires_grad = kind == TKind.WEIGHT
        self.tensors.append(t)
        return t.index

    def weight(self, name: str, nbytes: int, group: str) -> int:
        return self.tensor(name, nbytes, TKind.WEIGHT, group)

    def state(self, name: str, nbytes: int, group: str) -> int:
        return self.tensor(name, nbytes, TKind.STATE, group)

    def generic(self, stem: str) -> str:
        """A name like ``Transpose_17``: no layer in it, only in its inputs."""
        self.counter += 1
        return f"{stem}_{self.counter}"

    def plan_of(self, group: str, inputs: Sequence[int] = ()) -> Plan:
        """The planner's choices for an operation of ``group`` reading ``inputs``, by its row (:meth:`row_of`)."""
        if not self.plans:
            return NO_PLAN
        plan = self.plans.get(self.row_of(group, inputs), NO_PLAN)
        return Plan(split=plan.split) if self.unplanned else plan

    def row_of(self, group: str, inputs: Sequence[int] = ()) -> str:
        """The layer PopLiner counts an operation in, or "no layer".

        As PopLiner (and popliner) layer operations: the layer number in the
        name, else the first in its inputs' names, else the first layer when
        it reads the word embedding's table.
        """
        m = _LAYER.search(group)
        if m is None and inputs:
            joined = "/".join(self.tensors[t].name for t in inputs)
            m = _LAYER.search(joined)
            if m is None and _LAYER0_INPUT.search(joined):
                return "0"
        return m.group(1) if m else "no layer"

    # -- setup operations -------------------------------------------------------

    def stream_in(self, tensor_id: str, nbytes: int) -> int:
        """A host-to-device stream: a ``Tensor/<id>`` operation and its tensor."""
        t = self.tensor(tensor_id, nbytes, TKind.INPUT)
        self._setup_op(tensor_id, "stream", [], [t], nbytes)
        return t

    def const(self, tensor_id: str, nbytes: int) -> int:
        """A tensor initialised on the device (``Tensor/<id>``, a Fill)."""
        t = self.tensor(tensor_id, nbytes, TKind.INPUT)
        self._setup_op(tensor_id, "fill", [], [t], nbytes)
        return t

    def stream_out(self, t: int) -> None:
        """An anchor: the tensor is copied back to the host at the end."""
        op = self._new_op("", "", "HostStore", "stream", "", [t], [], self.tensors[t].nbytes)
        op.tensor_id = self.tensors[t].name
        self.main.append(op.index)

    def _setup_op(self, tensor_id: str, kind: str, inputs: list[int], outputs: list[int], work: float) -> None:
        op = self._new_op("", "", "Init" if kind == "fill" else "HostLoad", kind, "", inputs, outputs, work)
        op.tensor_id = tensor_id
        op.phase = "setup"
        self.setup.append(op.index)

    # -- operations -------------------------------------------------------------

    def op(self, name: str, op_type: str, kind: str, group: str, inputs: Sequence[int],
           outputs: Sequence[tuple[str, int]], work: float, *, grads: Sequence[GradRule] = (),
           share: str | None = None, out_kind: TKind = TKind.ACT, calls: int = 1,
           temp: int | None = None) -> list[int]:
        """Declare an operation; returns the indices of its output tensors.

        ``outputs`` are (suffix, bytes): the tensor is named ``name + suffix``.
        ``calls`` > 1 serialises the operation (as PopART serialises a large
        matmul): one body, called that many times, each doing a slice.
        ``temp`` sets its temporaries' bytes (else the kernel's ``temp_factor``
        times its largest output); not for shared bodies.
        """
        if temp is not None and calls > 1:
            raise ValueError("temp is for an operation called once, not a serialised body")
        if calls > 1 and share is None:
            share = f"{name}/serialised"
        outs = [self.tensor(f"{name}{suffix}", nbytes, out_kind, group) for suffix, nbytes in outputs]
        if share is None:
            op = self._new_op(name, name, op_type, kind, group, list(inputs), outs, work, temp)
        else:
            op = self._call_op(share, name, op_type, kind, group, list(inputs), outs, work, calls, temp)
        op.grads = tuple(grads)
        op.share = share
        needs = any(self.tensors[i].requires_grad for i in inputs)
        for o in outs:
            self.tensors[o].requires_grad = needs
        self.main.append(op.index)
        return outs

    def _new_op(self, name: str, logical: str, op_type: str, kind: str, group: str, inputs: list[int],
                outputs: list[int], work: float, temp: int | None = None) -> Op:
        op = Op(len(self.ops), name, logical, op_type, kind, self.phase, group, inputs, outputs, work=float(work),
                plan=self.plan_of(group, inputs))
        self.ops.append(op)
        for t in inputs:
            self.tensors[t].consumers.append(op.index)
        for t in outputs:
            self.tensors[t].producer = op.index
        op.start, op.count = self._op_span(inputs + outputs, op.plan)
        if temp is not None:
            self._add_temp(op, 0.0, [], temp)
        else:
            self._add_temp(op, KERNELS[kind].temp_factor if kind in KERNELS else 0.0, outputs or inputs)
        return op

    def _op_span(self, tensors: list[int], plan: Plan = NO_PLAN) -> tuple[int, int]:
        """The tiles an operation works on: its largest tensor's, times the plan's spread."""
        if not tensors:
            return 0, min(self.tiles, 4)
        big = max(tensors, key=lambda t: self.tensors[t].nbytes)
        count = self.tensors[big].count
        if plan.spread != 1.0:
            count = max(1, min(self.tiles, round(count * plan.spread)))
        return self.tensors[big].start, count

    def _add_temp(self, op: Op, factor: float, basis: list[int], extra: int = 0) -> None:
        nbytes = int(factor * max((self.tensors[t].nbytes for t in basis), default=0)) + extra
        if nbytes > 0:
            t = self.tensor(f"{op.logical or op.op_type}/tmp", nbytes, TKind.TEMP, op.group, (op.start, op.count))
            self.tensors[t].temp_of = op.index
            op.temps.append(t)

    def _call_op(self, key: str, name: str, op_type: str, kind: str, group: str, inputs: list[int],
                 outputs: list[int], work: float, calls: int, temp: int | None = None) -> Op:
        """A Call operation to the shared body ``key`` (created on first use; ``temp``: its scratch bytes)."""
        body = self.bodies.get(key)
        if body is None:
            body = self._body_op(name, op_type, kind, group, inputs, outputs, work / calls, calls, temp)
            self.bodies[key] = body
        self.instances += 1
        op = self._new_op("", name, "Call", "call", group, inputs, outputs, work)
        op.body = body
        op.instance_id = self.instances
        op.calls = calls
        return op

    def _body_op(self, name: str, op_type: str, kind: str, group: str, inputs: list[int], outputs: list[int],
                 work: float, calls: int, temp: int | None = None) -> int:
        """The shared body; with ``calls`` > 1 one call computes 1/calls of the outputs."""
        op = Op(len(self.ops), name, name, op_type, kind, self.phase, group, [], [], work=float(work),
                plan=self.plan_of(group, inputs))
        self.ops.append(op)
        op.start, op.count = self._op_span(inputs + outputs, op.plan)
        # A forward or backward body works on its own copies of the caller's
        # activations; weights and optimizer state are aliased, and optimizer
        # bodies update everything in place, so those are never copied.
        def copied(ts: list[int]) -> int:
            return sum(self.tensors[t].nbytes for t in ts if self.tensors[t].kind not in ALWAYS_LIVE)

        interface = 0 if self.phase == "upd" else copied(inputs) + copied(outputs) // calls
        if temp is not None:
            self._add_temp(op, 0.0, [], interface + temp)
        else:
            self._add_temp(op, KERNELS[kind].temp_factor / calls, outputs or inputs, interface)
        return op.index

    # -- training ---------------------------------------------------------------

    def backward(self, loss: int, seed: int) -> None:
        """Emit gradient and optimizer operations for everything declared so far."""
        forward = list(self.main)
        grads: dict[int, list[int]] = {loss: [seed]}
        pending: dict[int, int] = {}
        for i in forward:
            for t in self.ops[i].inputs:
                if self.tensors[t].kind == TKind.WEIGHT:
                    pending[t] = pending.get(t, 0) + 1
        self.phase = "bwd"
        segment_of = self._segments(forward)
        segments: dict[int, list[int]] = {}
        for i, seg in sorted(segment_of.items()):  # forward order
            segments.setdefault(seg, []).append(i)
        recomputed: dict[int, int] = {}  # original tensor -> its recomputed clone
        for i in reversed(forward):
            current = segment_of.get(i)
            if current is not None and current in segments:
                # The segment's last forward operation: re-run its forward before its backward.
                self._recompute(segments.pop(current), recomputed)
            self._backward_op(self.ops[i], grads, recomputed)
            for t in self.ops[i].inputs:
                if t in pending:
                    pending[t] -= 1
                    if pending[t] == 0 and t in grads:
                        self._update(t, self._final_grad(t, grads, self.ops[i].group))

    def _backward_op(self, op: Op, grads: dict[int, list[int]], recomputed: dict[int, int]) -> None:
        outs = [self._final_grad(t, grads, op.group) for t in op.outputs if t in grads]
        if not outs or not op.grads:
            return
        for rule in op.grads:
            target = op.inputs[rule.wrt]
            if not self.tensors[target].requires_grad:
                continue
            if rule.kind == "identity":  # the gradient passes through unchanged: no operation
                grads.setdefault(target, []).append(outs[0])
                continue
            saved = [recomputed.get(t, t) for t in (self._saved(op, s) for s in rule.saved)]
            nbytes = self.tensors[target].nbytes
            share = f"{op.group}{rule.suffix}/{nbytes}/{rule.calls}" if rule.share else None
            (g,) = self.op(f"{op.logical}{rule.suffix}", rule.op_type, rule.kind, op.group, outs + saved,
                           [(":0", nbytes)], op.work * rule.work, share=share, out_kind=TKind.GRAD,
                           calls=rule.calls)
            grads.setdefault(target, []).append(g)

    # -- recomputation ------------------------------------------------------------

    def _segment_of(self, op: Op) -> int | None:
        """The recomputation segment of a forward operation: its layer, or its pipeline stage."""
        if self.compiled.recompute == "none" or op.phase != "fwd":
            return None
        m = _LAYER.search(op.group)
        if m is None:
            return None  # embeddings, heads, the loss: never recomputed
        layer = int(m.group(1))
        if self.compiled.recompute == "every-layer":
            return layer
        stage = bisect.bisect_left(self.compiled.split_after, layer)
        # The last stage runs its backward right after its forward: PopART does not recompute it.
        return stage if stage < len(self.compiled.split_after) else None

    def _segments(self, forward: list[int]) -> dict[int, int]:
        """Forward operation -> its recomputation segment (operations in forward order)."""
        out: dict[int, int] = {}
        for i in forward:
            seg = self._segment_of(self.ops[i])
            if seg is not None:
                out[i] = seg
        if self.compiled.recompute == "pipeline" and self.compiled.split_after and out:
            # The first stage starts at the host streams: its embedding is re-run with its layers.
            first_layered = min(out)
            for i in forward:
                if i >= first_layered:
                    break
                if self.ops[i].phase == "fwd":
                    out[i] = 0
        return out

    def _recompute(self, ops: list[int], recomputed: dict[int, int]) -> None:
        """Clone, in forward order, the operations of a segment whose results its backward reads."""
        fwd = [self.ops[i] for i in ops]
        produced = {t for op in fwd for t in op.outputs}
        needed: set[int] = set()
        for op in fwd:
            for rule in op.grads:
                if rule.kind != "identity" and self.tensors[op.inputs[rule.wrt]].requires_grad:
                    needed.update(t for t in (self._saved(op, s) for s in rule.saved) if t in produced)
        chosen: list[Op] = []
        for op in reversed(fwd):
            if needed.intersection(op.outputs):
                chosen.append(op)
                needed.update(t for t in op.inputs if t in produced)
        saved_phase, self.phase = self.phase, "re"
        for op in reversed(chosen):
            self._clone(op, recomputed)
        self.phase = saved_phase

    def _clone(self, op: Op, recomputed: dict[int, int]) -> None:
        """A recompute clone: same name and work, inputs from earlier clones, outputs ``<name>__re``."""
        inputs = [recomputed.get(t, t) for t in op.inputs]
        outs = []
        for o in op.outputs:
            src = self.tensors[o]
            # Mapped where the original was: Poplar lays out a clone like its original.
            c = self.tensor(f"{src.name}{RECOMPUTED}", src.nbytes, src.kind, src.group, (src.start, src.count))
            self.tensors[c].requires_grad = src.requires_grad
            recomputed[o] = c
            outs.append(c)
        if op.kind == "call" and op.share is not None:
            # Clones are outlined among themselves, not with the forward operations (their recompute
            # setting differs), so a shared body never runs in both the forward and the backward pass.
            body = self.ops[op.body]
            new = self._call_op(op.share + RECOMPUTED, op.logical, body.op_type, body.kind, op.group, inputs, outs,
                                op.work, op.calls)
        else:
            new = self._new_op(op.name, op.logical, op.op_type, op.kind, op.group, inputs, outs, op.work)
        new.share = op.share
        self.main.append(new.index)

    def _saved(self, op: Op, ref: str) -> int:
        side = op.inputs if ref[0] == "i" else op.outputs
        return side[int(ref[1:])]

    def _final_grad(self, t: int, grads: dict[int, list[int]], group: str) -> int:
        """The gradient of ``t``, summing its contributions when there are several."""
        parts = grads[t]
        if len(parts) > 1:
            nbytes = self.tensors[t].nbytes
            name = self.generic("GradSum")
            (total,) = self.op(name, "Sum", "add", group, parts, [(":0", nbytes)], nbytes * len(parts),
                               out_kind=TKind.GRAD)
            grads[t] = [total]
        return grads[t][0]

    def _update(self, w: int, g: int) -> None:
        """Optimizer operations for weight ``w`` with gradient ``g``."""
        saved_phase, self.phase = self.phase, "upd"
        t = self.tensors[w]
        c = self.compiled
        key = f"{t.group}/{self.optimizer}/{t.nbytes}"
        shard = -(-t.nbytes // c.state_shards)  # this replica's part of the weight, in bytes
        adam = self.optimizer == "adam"
        # fp32 state (2 bytes per byte of fp16 weight); Adam's first moment may be fp16.
        names = ("Accl1", "Accl2") if adam else ("Accl",)
        factors = (1 if c.half_first_moment else 2, 2) if adam else (2,)
        kind = TKind.ACT if c.off_chip_state else TKind.STATE
        state = [self.tensor(f"{n}___{t.name}", f * shard, kind, t.group, (t.start, t.count))
                 for n, f in zip(names, factors)]
        if c.off_chip_state:
            self._remote(f"{t.name}/OptimizerState/RemoteLoad", "RemoteLoad", t.group, [], state)
        if adam:
            (u,) = self.op(f"{t.name}/AdamUpdater", "AdamUpdater", "adam_updater", t.group, [g, *state, w],
                           [(":0", shard)], 10 * shard, share=key)
            self.op(f"{t.name}/AdamVarUpdate", "AdamVarUpdate", "var_update", t.group, [w, u], [], 4 * shard)
        else:
            self.op(f"{t.name}/SGD_update", "SGD1Combo", "sgd_update", t.group, [g, *state, w], [], 8 * shard,
                    share=key)
        if c.off_chip_state:
            self._remote(f"{t.name}/OptimizerState/RemoteStore", "RemoteStore", t.group, state, [])
        self.phase = saved_phase

    def _remote(self, name: str, op_type: str, group: str, inputs: list[int], outputs: list[int]) -> None:
        """A copy between streaming memory and the tiles (lowered like a host stream)."""
        moved = sum(self.tensors[i].nbytes for i in inputs + outputs)
        op = self._new_op(name, name, op_type, "stream", group, inputs, outputs, moved)
        self.main.append(op.index)

    def build(self) -> Graph:
        return Graph(self.tiles, self.tensors, self.ops, self.setup, self.main)
