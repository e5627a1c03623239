"""Lowering: operations -> debug contexts, programs and liveness steps.

The contexts and programs are docs/synthetic-profiles.md's ("Debug
contexts", "Programs", "Outlining and serialisation"). Leaves are appended
to the step list as they are created, which is execution order; a shared
body is lowered once, at its first call, and later calls append its leaves
to the steps again.

Per-leaf amounts (control code, exchange code, vertex instances, cycles) are
divided over the phases actually generated, so ``scale`` changes how finely
the work is cut, not how much there is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popliner.synth.catalog import KERNELS, Kernel, Phase, VertexType
from popliner.synth.graph import ALWAYS_LIVE, Graph, Op
from popliner.synth.layout import Layout
from popliner.synth.tilevec import (
    Runs,
    dense_to_runs,
    encode_runs,
    span_runs,
    stride_runs,
    sum_runs,
)

__all__ = ["Calibration", "Lowered", "lower", "plan_phases"]

#: FLOPs per cycle per tile a matmul or convolution reaches (half AMP, ~50% of peak).
FLOPS_PER_CYCLE = 64
#: Bytes per cycle per tile an element-wise vertex streams through.
BYTES_PER_CYCLE = 8
#: Bytes per cycle per tile of internal exchange, and the cost of its sync.
EXCHANGE_BYTES_PER_CYCLE = 4
SYNC_CYCLES = 100
#: Bytes per cycle per tile of a host stream copy.
HOST_BYTES_PER_CYCLE = 1
#: Control code bytes per tile of one leaf program at scale 1, by program type.
CONTROL = {"OnTileExecute": 10, "DoExchange": 12, "Copy": 6, "Sync": 4, "Stream": 16}
#: Tiles between two vertices of a "strided" coverage.
STRIDE = 8


@dataclass(frozen=True)
class Calibration:
    """Multipliers of the catalog's vertex code and state sizes, exchange code and control code."""

    vertex_code: float = 1.0
    vertex_state: float = 1.0
    exchange_code: float = 1.0
    control_code: float = 1.0
    #: Exchange code per tile follows the bytes an operation moves per tile (:func:`size_scale`).
    exchange_by_size: bool = False

    def vertex_type(self, vt: VertexType) -> VertexType:
        if self.vertex_code == 1.0 and self.vertex_state == 1.0:
            return vt
        size = max(1, round(vt.size * self.vertex_state))
        return VertexType(vt.name, size, max(1, round(vt.code * self.vertex_code)), vt.per_tile)


@dataclass
class Lowered:
    programs: list[dict[str, Any]]
    control_programs: list[int]
    steps: list[int]
    contexts: list[dict[str, Any]]
    ranges: list[list[tuple[int, int]]]  # per operation: [first step, stop step) of each execution
    vertex_types: list[VertexType]  # in id order
    control: list[Runs]  # control code of every leaf program, once each
    exchange: list[Runs]  # exchange code of every DoExchange, once each
    vertex_runs: list[tuple[int, Runs]]  # (vertex type id, instance counts) of every compute set
    leaf_types: list[str] = field(default_factory=list)  # program type of each entry of ``control``


#: Bytes per tile an operation moves at which the size rule leaves the catalog's exchange code as it is.
EXCHANGE_REFERENCE_BYTES = 16384


def size_scale(bytes_per_tile: float) -> float:
    """How much more exchange code than the catalog's an operation moving ``bytes_per_tile`` has (size rule).

    A tile's exchange program has about one instruction sequence per contiguous
    region it sends or receives. Its share of a tensor cut in two dimensions
    (rows x channels) meets the neighbouring shares along its edges, whose
    length grows with the square root of the share's area: so the code grows
    with the square root of the bytes the operation has per tile.
    """
    return math.sqrt(max(1.0, bytes_per_tile) / EXCHANGE_REFERENCE_BYTES)


def plan_phases(k: Kernel, n: int) -> list[Phase]:
    """``n`` phases of kernel ``k``: the main phase repeated or thinned out."""
    full = [*k.pre, *([k.main] * k.repeats), *k.post]
    if n >= len(full):
        return [*k.pre, *([k.main] * (n - len(k.pre) - len(k.post))), *k.post]
    # Evenly spaced picks, centred, keep the order (pre, main..., post).
    picks = sorted({min(len(full) - 1, int((i + 0.5) * len(full) / n)) for i in range(n)})
    return [full[i] for i in picks]


def lower(graph: Graph, layout: Layout, scale: float, rng: np.random.Generator,
          calibration: Calibration = Calibration()) -> Lowered:
    return _Lowerer(graph, layout, scale, rng, calibration).run()


class _Lowerer:
    def __init__(self, graph: Graph, layout: Layout, scale: float, rng: np.random.Generator,
                 calibration: Calibration) -> None:
        self.g = graph
        self.calib = calibration
        self.layout = layout
        self.scale = scale
        self.rng = rng
        self.tiles = graph.tiles
        self.programs: list[dict[str, Any]] = []
        self.cycles: list[Runs] = []
        self.control_of: list[Runs] = []
        self.steps: list[int] = []
        self.contexts: list[dict[str, Any]] = []
        self.ranges: list[list[tuple[int, int]]] = [[] for _ in graph.ops]
        self.bodies: dict[int, tuple[int, int, int]] = {}  # body op -> (Sequence id, first step, stop step)
        self.vt_ids: dict[VertexType, int] = {}
        self.types: dict[str, VertexType] = {}  # the planned specialisations made so far
        self.leaf_control: list[Runs] = []
        self.leaf_types: list[str] = []
        self.exchange: list[Runs] = []
        self.vertex_runs: list[tuple[int, Runs]] = []

    def run(self) -> Lowered:
        setup = [self.op(self.g.ops[i]) for i in self.g.setup]
        roots = [self.composite("Sequence", "setup", None, setup)]
        roots.append(self.composite("Sequence", "main", None, self.main_children()))
        vts = sorted(self.vt_ids, key=self.vt_ids.__getitem__)
        return Lowered(self.programs, roots, self.steps, self.contexts, self.ranges,
                       [self.calib.vertex_type(vt) for vt in vts], self.leaf_control, self.exchange,
                       self.vertex_runs, self.leaf_types)

    def main_children(self) -> list[int]:
        """Operations of the main program, with an unattributed Sync where the layer changes."""
        children: list[int] = []
        group = None
        for i in self.g.main:
            op = self.g.ops[i]
            if op.group != group and group is not None:
                runs = span_runs(0, self.tiles, self.tiles, SYNC_CYCLES)
                children.append(self.leaf("Sync", "Sync", None, runs, self.control_runs("Sync", 0, self.tiles, 1.0)))
            group = op.group
            children.append(self.op(op))
        return children

    # -- programs and contexts ----------------------------------------------------

    def program(self, ptype: str, name: str, ctx: int | None, cycles: Runs, control: Runs,
                children: list[int] | None = None, extra: dict[str, Any] | None = None) -> int:
        pid = len(self.programs)
        p: dict[str, Any] = {"id": pid, "type": ptype, "name": name}
        if ctx is not None:
            p["debugContext"] = ctx
        if children:
            p["children"] = children
        code = encode_runs(control, self.tiles)
        if code is not None:
            p["controlCode"] = code
        if extra:
            p.update(extra)
        cyc = encode_runs(cycles, self.tiles)
        if cyc is not None:
            p["cycles"] = cyc
        self.programs.append(p)
        self.cycles.append(cycles)
        self.control_of.append(control)
        return pid

    def leaf(self, ptype: str, name: str, ctx: int | None, cycles: Runs, control: Runs,
             extra: dict[str, Any] | None = None) -> int:
        pid = self.program(ptype, name, ctx, cycles, control, extra=extra)
        self.steps.append(pid)
        self.leaf_control.append(control)
        self.leaf_types.append(ptype)
        return pid

    def composite(self, ptype: str, name: str, ctx: int | None, children: list[int], repeat: int = 1,
                  extra: dict[str, Any] | None = None) -> int:
        # Control code of a parent includes its children's; cycles are per execution.
        cycles = sum_runs((self.cycles[c], repeat) for c in children)
        control = sum_runs((self.control_of[c], 1) for c in children)
        return self.program(ptype, name, ctx, cycles, control, children, extra)

    def context(self, layer: str, name: str, parent: int | None, data: dict[str, Any] | None = None) -> int:
        cid = len(self.contexts) + 1  # ids start at 1: a reader must not take them for positions
        c: dict[str, Any] = {"id": cid, "parent": parent, "layer": layer, "name": name}
        if data:
            c["data"] = data
        self.contexts.append(c)
        return cid

    def names(self, tensors: list[int]) -> list[str]:
        return [self.g.tensors[t].name for t in tensors]

    def op_context(self, op: Op, caller: Op | None = None) -> int:
        if op.tensor_id is not None:
            return self.context("popart", "", None, {"tensorId": op.tensor_id})
        if op.kind == "call":
            # The subgraph's inputs: those of the caller's own layer first (weights, usually).
            first = sorted(op.inputs, key=lambda t: self.g.tensors[t].group != op.group)
            data = {"opType": "Call", "instanceId": str(op.instance_id), "inputs": self.names(first),
                    "outputs": self.names(op.outputs)}
            return self.context("popart", "", None, data)
        if caller is not None:  # a shared body: its tensors live in the subgraph
            sub = f"_subgraph({op.index})/"
            ins, outs = [sub + n for n in self.names(caller.inputs)], [sub + n for n in self.names(caller.outputs)]
        else:
            ins = [op.shown_inputs.get(t, self.g.tensors[t].name) for t in op.inputs]
            outs = self.names(op.outputs)
        parent = None
        if op.phase in ("fwd", "re") and caller is None:  # a recompute clone comes from the same ONNX node
            parent = self.context("onnx", op.op_type, None, {"category": "op", "opName": op.name,
                                                              "opType": op.op_type})
        data = {"opName": op.name, "opType": op.op_type, "inputs": ins, "outputs": outs}
        return self.context("popart", op.name, parent, data)

    def display(self, op: Op) -> str:
        if op.tensor_id is not None:
            return f"Tensor/{op.tensor_id}"
        if op.kind == "call":
            return f"Call({op.instance_id})"
        return op.name

    def specialised(self, vt: VertexType, code: float) -> VertexType:
        """The vertex type a planned operation uses: the catalog's, or its own specialisation with ``code`` x the code.

        Codelets are templates: an operation whose plan instantiates them with
        other parameters gets types of its own, whose code is not shared with
        the catalog's (a calibrated preset's fitted choice, see :class:`Plan`).
        """
        if code == 1.0:
            return vt
        special = f"{vt.name} [specialised x{code:g}]"
        if special not in self.types:
            self.types[special] = VertexType(special, vt.size, max(1, round(vt.code * code)), vt.per_tile)
        return self.types[special]

    def control_runs(self, ptype: str, start: int, count: int, ratio: float) -> Runs:
        return span_runs(start, count, self.tiles, max(1, round(CONTROL[ptype] * ratio * self.calib.control_code)))

    # -- operations ---------------------------------------------------------------

    def op(self, op: Op) -> int:
        """Lower one operation of the setup or main program; returns its top program."""
        first = len(self.steps)
        ctx = self.op_context(op)
        if op.kind == "stream":
            pid = self.stream(op, ctx)
        elif op.kind == "call":
            pid = self.call(op, ctx)
        else:
            pid = self.sequence(self.display(op), ctx, self.kernel(op, ctx))
        self.ranges[op.index].append((first, len(self.steps)))
        return pid

    def sequence(self, name: str, ctx: int, children: list[int]) -> int:
        """An operation's Sequence; a lone leaf stands for itself (its program is the leaf)."""
        if len(children) == 1 and "children" not in self.programs[children[0]]:
            return children[0]
        return self.composite("Sequence", name, ctx, children)

    def stream(self, op: Op, ctx: int) -> int:
        tensors = op.outputs or op.inputs
        t = self.g.tensors[tensors[0]]
        per_tile = -(-t.nbytes // t.count)
        name = self.display(op)
        ctl = self.control_runs("Stream", op.start, op.count, 1.0)
        leaves = [
            self.leaf("StreamCopyBegin", f"{name}/StreamCopyBegin", ctx, span_runs(op.start, op.count, self.tiles, 40),
                      ctl),
            self.leaf("StreamCopyMid", f"{name}/StreamCopyMid", ctx,
                      span_runs(op.start, op.count, self.tiles, per_tile // HOST_BYTES_PER_CYCLE + SYNC_CYCLES), ctl,
                      {"vars": self.layout.ids(tensors)}),
            self.leaf("StreamCopyEnd", f"{name}/StreamCopyEnd", ctx, span_runs(op.start, op.count, self.tiles, 30),
                      ctl),
        ]
        return self.composite("Sequence", name, ctx, leaves)

    def call(self, op: Op, ctx: int) -> int:
        """Copy the arguments in, call the shared body, copy the results out."""
        name = self.display(op)
        copies = self.context("poplar", "copy", ctx)
        body = self.g.ops[op.body]
        children = [self.copy(f"{name}/CopyIn", copies, op, op.inputs)] if op.inputs else []
        children += [self.call_body(body, op, ctx, name) for _ in range(op.calls)]
        if op.outputs:
            children.append(self.copy(f"{name}/CopyOut", copies, op, op.outputs))
        return self.composite("Sequence", name, ctx, children)

    def call_body(self, body: Op, caller: Op, ctx: int, name: str) -> int:
        """One Call program; the body is lowered at its first call, re-stepped at later ones."""
        first = len(self.steps)
        known = self.bodies.get(body.index)
        if known is None:
            seq = self.body(body, caller)
            self.bodies[body.index] = (seq, first, len(self.steps))
        else:
            seq, a, b = known
            self.steps.extend(self.steps[a:b])
        self.ranges[body.index].append((first, len(self.steps)))
        return self.composite("Call", name, ctx, [seq])

    def copy(self, name: str, ctx: int, op: Op, tensors: list[int]) -> int:
        moved = sum(self.g.tensors[t].nbytes for t in tensors if self.g.tensors[t].kind not in ALWAYS_LIVE)
        cycles = moved // max(1, op.count) // BYTES_PER_CYCLE + 20
        return self.leaf("Copy", name, ctx, span_runs(op.start, op.count, self.tiles, cycles),
                         self.control_runs("Copy", op.start, op.count, 1.0), {"vars": self.layout.ids(tensors)})

    def body(self, body: Op, caller: Op) -> int:
        ctx = self.op_context(body, caller)
        # Always a Sequence: the Call programs of every caller point at it.
        return self.composite("Sequence", f"{body.name}/subgraph", ctx, self.kernel(body, ctx))

    # -- kernels --------------------------------------------------------------------

    def kernel(self, op: Op, ctx: int) -> list[int]:
        """The children of an operation's Sequence: leaves, and a Repeat for looped kernels."""
        k = KERNELS[op.kind]
        phases = plan_phases(k, max(1, round(k.base_phases * self.scale)))
        ratio = k.base_phases / len(phases)
        lib = self.context("poplibs", k.context, ctx)
        xctx = self.context("poplar", "exchange", lib) if any(p.exchange for p in phases) else lib
        total = sum(p.weight for p in phases)
        busy = self.compute_cycles(op, k)
        computes = len(phases)
        io = sum(self.g.tensors[t].nbytes for t in op.inputs + op.outputs + op.temps)
        exchanges = max(1, sum(p.exchange for p in phases))
        x_cycles = io // max(1, op.count) // 2 // exchanges // EXCHANGE_BYTES_PER_CYCLE + SYNC_CYCLES
        size = size_scale(io / max(1, op.count)) if self.calib.exchange_by_size else 1.0
        size *= op.plan.exchange
        children: list[int] = []
        loop: list[int] = []
        for j, ph in enumerate(phases):
            looped = k.loop > 0 and ph is k.main
            repeat = k.loop if looped else 1
            out = loop if looped else children
            if not looped and loop:
                children.append(self.repeat(op, ctx, loop, k.loop))
                loop = []
            name = f"{self.display(op)}/{ph.label}_{j}"
            if ph.exchange:
                out.append(self.do_exchange(op, name, xctx, k, ratio, max(1, x_cycles // repeat), size))
            cycles = max(1, int(busy * ph.weight / total / repeat))
            out.append(self.compute(op, name, lib, ph, j, computes, ratio, cycles, k.jitter))
        if loop:
            children.append(self.repeat(op, ctx, loop, k.loop))
        return children

    def repeat(self, op: Op, ctx: int, body: list[int], count: int) -> int:
        seq = self.composite("Sequence", f"{self.display(op)}/loopBody", ctx, body)
        return self.composite("Repeat", f"{self.display(op)}/loop", ctx, [seq], repeat=count,
                              extra={"repeatCount": count})

    def compute_cycles(self, op: Op, k: Kernel) -> float:
        per = FLOPS_PER_CYCLE if k.bound == "flops" else BYTES_PER_CYCLE
        return max(50.0, op.work / (max(1, op.count) * per))

    def do_exchange(self, op: Op, name: str, ctx: int, k: Kernel, ratio: float, cycles: int,
                    size: float = 1.0) -> int:
        factor = self.calib.exchange_code
        code = max(max(1, round(4 * factor)), round(k.exchange_code * ratio * size * factor))
        # A few tiles gather partial results: more exchange code there (where, varies by operation).
        edge = min(8, op.count)
        hot = op.start + (op.index * 97) % (op.count - edge + 1)
        runs = sum_runs([(span_runs(op.start, op.count, self.tiles, code), 1),
                         (span_runs(hot, edge, self.tiles, code), 1)])
        self.exchange.append(runs)
        return self.leaf("DoExchange", f"{name}/Exchange", ctx, span_runs(op.start, op.count, self.tiles, cycles),
                         self.control_runs("DoExchange", op.start, op.count, ratio * op.plan.programs),
                         {"exchangeCode": encode_runs(
                             runs, self.tiles)})

    def compute(self, op: Op, name: str, ctx: int, ph: Phase, j: int, computes: int, ratio: float, cycles: int,
                jitter: bool) -> int:
        vertices = []
        for catalog_type, coverage in ph.vertices:
            vt = self.specialised(catalog_type, op.plan.code)
            vid = self.vt_ids.setdefault(vt, len(self.vt_ids))
            runs = self.coverage(op, coverage, vt.per_tile * ratio * op.plan.vertices, j)
            if runs:
                self.vertex_runs.append((vid, runs))
                vertices.append([vid, encode_runs(runs, self.tiles)])
        extra: dict[str, Any] = {"vertices": vertices}
        tensors = self.vars_of(op, j, computes)
        if tensors:
            extra["vars"] = self.layout.ids(tensors)
        return self.leaf("OnTileExecute", name, ctx, self.cycle_runs(op, cycles, jitter),
                         self.control_runs("OnTileExecute", op.start, op.count, ratio * op.plan.programs), extra)

    def vars_of(self, op: Op, j: int, computes: int) -> list[int]:
        """Inputs on the first compute set, temporaries in the middle, outputs on the last."""
        out: list[int] = []
        if j == 0:
            out += op.inputs
        if j == computes // 2:
            out += op.temps
        if j == computes - 1:
            out += op.outputs
        return list(dict.fromkeys(out))

    def coverage(self, op: Op, coverage: str, per_tile: float, j: int) -> Runs:
        """Instance counts of one vertex type: ``per_tile`` on average over its coverage."""
        count = {"all": op.count, "head": max(1, op.count // 2), "few": min(4, op.count)}.get(coverage, op.count)
        start = op.start
        if per_tile < 1:
            # Fewer instances than tiles: a rotating slice of the coverage.
            part = max(1, round(count * per_tile))
            start, count = op.start + (j * part) % count, part
        value = max(1, round(per_tile))
        if coverage == "strided":
            return stride_runs(start, count, self.tiles, value, STRIDE)
        if op.plan.vertices != 1.0 and per_tile >= 1:
            # A planned instance count: whole instances on every tile, one more on a share of them.
            base, extra = int(per_tile), per_tile - int(per_tile)
            more = round(count * extra)
            return sum_runs([(span_runs(start, count, self.tiles, base), 1),
                             (span_runs(start, more, self.tiles, 1), 1)]) if more else span_runs(
                start, count, self.tiles, base)
        return span_runs(start, count, self.tiles, value)

    def cycle_runs(self, op: Op, cycles: int, jitter: bool) -> Runs:
        if not jitter or op.count < 2:
            base = span_runs(op.start, op.count, self.tiles, cycles)
            # The last tiles of a span get the remainder of the work: a little less.
            tail = max(1, op.count // 16)
            less = span_runs(op.start + op.count - tail, tail, self.tiles, cycles // 4)
            return sum_runs([(base, 1), (less, -1)]) if op.count > 16 else base
        # Data-dependent work (gathers, losses): a different count on every tile.
        noise = self.rng.integers(cycles * 3 // 4, cycles * 5 // 4 + 2, size=op.count)
        dense = np.zeros(self.tiles, dtype=np.int64)
        dense[(op.start + np.arange(op.count)) % self.tiles] = noise
        return dense_to_runs(dense)
