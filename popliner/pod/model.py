"""The step-time model of one pod configuration: plain numbers in, seconds out (no profile, no I/O).

docs/pod-planner.md ("The step-time model") writes the formulas out and works an example by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from popliner.hardware import DEFAULT_LINK_BANDWIDTH, DEFAULT_SYNC_CYCLES

__all__ = [
    "BOUNDS",
    "DEFAULT_CLOCK_HZ",
    "DEFAULT_LINK_BANDWIDTH",
    "DEFAULT_REPLICA_BANDWIDTH",
    "DEFAULT_STREAMING_BANDWIDTH",
    "DEFAULT_SYNC_CYCLES",
    "PodConstants",
    "StepTime",
    "allreduce_seconds",
    "pipeline_cycles",
    "step_time",
    "streaming_seconds",
]

#: The ring between replicas runs over the same IPU-Links in a POD16/POD64 (one link per hop).
DEFAULT_REPLICA_BANDWIDTH = DEFAULT_LINK_BANDWIDTH
#: IPU to Streaming Memory through the IPU-Gateway: one PCIe Gen4 x8 link (16 GT/s x 8 lanes, 128b/130b),
#: the link the published IPU-M2000 block diagram draws between the IPUs and the gateway.
DEFAULT_STREAMING_BANDWIDTH = 16e9 * 128 / 130
#: GC200 clock (1.33 GHz); a profile's own target clock is used when it has one.
DEFAULT_CLOCK_HZ = 1.33e9
#: What may bound a step, in the order ties are named.
BOUNDS: tuple[str, ...] = ("compute", "bubble", "copies", "all-reduce", "streaming")


@dataclass(frozen=True)
class PodConstants:
    """The hardware figures of the model; every one is a ``popliner plan`` option (docs/pod-planner.md)."""

    link_bandwidth: float = DEFAULT_LINK_BANDWIDTH  # bytes/s of an inter-IPU copy inside a replica
    replica_bandwidth: float = DEFAULT_REPLICA_BANDWIDTH  # bytes/s of a hop of the replicas' ring
    streaming_bandwidth: float = DEFAULT_STREAMING_BANDWIDTH  # bytes/s between an IPU and Streaming Memory
    sync_cycles: float = DEFAULT_SYNC_CYCLES  # clock cycles of the sync before each copy phase
    clock_hz: float | None = None  # None: the profile's clock

    def __post_init__(self) -> None:
        from popliner.errors import UsageProblem

        for name in ("link_bandwidth", "replica_bandwidth", "streaming_bandwidth"):
            if not getattr(self, name) > 0:
                raise UsageProblem(f"--{name.replace('_', '-')} {getattr(self, name)!r}: expected a positive number")
        if not self.sync_cycles >= 0:
            raise UsageProblem(f"--sync-cycles {self.sync_cycles!r}: expected a number >= 0")
        if self.clock_hz is not None and not self.clock_hz > 0:
            raise UsageProblem(f"--clock {self.clock_hz!r}: expected a positive frequency in Hz")


def pipeline_cycles(work: Sequence[float], ipu_of_stage: Sequence[int], micro_batches: int) -> tuple[float, float]:
    """(compute phases summed over the step, the busiest IPU's work per micro-batch), in clock cycles.

    Stage ``s`` has work ``work[s]`` per micro-batch, on IPU ``ipu_of_stage[s]``. The fill, main and flush
    cycles' sum of docs/pod-planner.md: O(P x IPUs), whatever G.
    """
    p = len(work)
    if p == 0:
        return 0.0, 0.0
    if micro_batches < p:
        raise ValueError(f"{micro_batches} micro-batches is fewer than the {p} pipeline stages")
    ipus = sorted(set(ipu_of_stage))
    slot = {u: k for k, u in enumerate(ipus)}

    def busiest(stages: range) -> float:
        per = [0.0] * len(ipus)
        for s in stages:
            per[slot[ipu_of_stage[s]]] += work[s]
        return max(per)

    full = busiest(range(p))
    fill = sum(busiest(range(c + 1)) for c in range(p - 1))
    flush = sum(busiest(range(d, p)) for d in range(1, p))
    return fill + (micro_batches - p + 1) * full + flush, full


def allreduce_seconds(gradient_bytes: float, replicas: int, bandwidth: float) -> float:
    """A ring all-reduce of ``gradient_bytes`` over ``replicas``: each sends 2(R-1)/R of them over one hop."""
    if replicas <= 1 or gradient_bytes <= 0:
        return 0.0
    return 2.0 * (replicas - 1) / replicas * gradient_bytes / bandwidth


def streaming_seconds(state_bytes: float, bandwidth: float) -> float:
    """Off-chip optimizer state of one IPU loaded for its update and stored back: 2 x bytes over the bandwidth."""
    return 2.0 * state_bytes / bandwidth if state_bytes > 0 else 0.0


@dataclass(frozen=True)
class StepTime:
    """One step of the pod, in seconds, split into the five parts of docs/pod-planner.md that add up to ``seconds``."""

    compute: float
    bubble: float
    copies: float
    allreduce: float
    streaming: float
    pipeline_cycles: float  # the pipeline part in clock cycles (what the simulator's step is)

    @property
    def seconds(self) -> float:
        return self.compute + self.bubble + self.copies + self.allreduce + self.streaming

    @property
    def parts(self) -> dict[str, float]:
        return dict(zip(BOUNDS, (self.compute, self.bubble, self.copies, self.allreduce, self.streaming)))

    @property
    def bound(self) -> str:
        """The largest part (the first of :data:`BOUNDS` on a tie)."""
        parts = self.parts
        return max(BOUNDS, key=lambda name: (parts[name], -BOUNDS.index(name)))


def step_time(work: Sequence[float], ipu_of_stage: Sequence[int], send_cycles: Sequence[float], micro_batches: int,
              *, clock_hz: float, sync_cycles: float, tail: Sequence[tuple[float, float]]) -> StepTime:
    """The step of a replica: the pipeline, then per IPU its (all-reduce, streaming) seconds in ``tail``.

    ``send_cycles[u]``: cycles IPU ``u`` spends on its copies in each cycle's
    copy phase (bytes it sends to other IPUs over the link bandwidth); the
    phase lasts as long as the slowest IPU's. A single IPU has no sync.
    """
    total, full = pipeline_cycles(work, ipu_of_stage, micro_batches)
    cycles = len(work) + micro_batches - 1
    sync = sync_cycles if len(set(ipu_of_stage)) > 1 else 0.0
    copies = cycles * (sync + max(send_cycles, default=0.0))
    last = max(tail, key=lambda pair: (pair[0] + pair[1], pair[0]), default=(0.0, 0.0))
    compute = micro_batches * full
    return StepTime(compute=compute / clock_hz, bubble=(total - compute) / clock_hz, copies=copies / clock_hz,
                    allreduce=last[0], streaming=last[1], pipeline_cycles=total + copies)
