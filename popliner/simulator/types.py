"""The simulator's plain values: a pipeline stage going in, the timings and per-IPU figures coming out."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from popliner.simulator.schedule import Schedule

__all__ = ["SIM_KINDS", "CycleTiming", "FragmentTiming", "IpuFigures", "IpuSummary", "SimResult", "SimStage"]

SIM_KINDS: tuple[str, ...] = ("forward", "backward", "forward+backward")


@dataclass(frozen=True, eq=False)
class IpuFigures:
    """One IPU as the simulator reads it: what its pipeline stages are built from.

    Built only by :func:`popliner.simulator.inputs.ipu_figures`, from the
    IPU's :class:`~popliner.config.model.ConfigStage` (itself built from the
    IPU's :class:`~popliner.pipeline.StageFigure`), whether the config was
    just planned or read back from a file: both simulate alike.
    """

    forward_cycles: int
    backward_cycles: int
    memory_per_tile: np.ndarray
    stash_entry_per_tile: np.ndarray | None
    bytes_in: int  # bytes crossing the boundary into this IPU per micro-batch, both ways
    label: str
    recompute_cycles: int = 0  # part of backward_cycles: forward work run again (recomputation)
    #: Training: the part of ``bytes_in`` sent back (gradients); None for a config that does not record it,
    #: whose whole ``bytes_in`` is then sent each way (as configs were simulated before it was recorded).
    gradient_bytes_in: int | None = None
    #: Cycles of a head wrapped onto this IPU (IPU 0): its own pipeline stage; 0 elsewhere.
    head_cycles: int = 0

    @property
    def received(self) -> int:
        """Bytes sent forwards into this IPU per micro-batch (activations)."""
        return self.bytes_in - self.gradient_bytes_in if self.gradient_bytes_in is not None else self.bytes_in

    @property
    def returned(self) -> int:
        """Bytes this IPU sends back over the same boundary per micro-batch (gradients)."""
        return self.gradient_bytes_in if self.gradient_bytes_in is not None else self.bytes_in


@dataclass(frozen=True, eq=False)
class SimStage:
    """One pipeline stage as the simulator sees it.

    ``cycles``: compute cycles per micro-batch. ``send_bytes``: bytes sent to
    the next pipeline stage per micro-batch (activations forward, gradients
    backward); ignored when the next stage is on the same IPU or there is
    none. ``memory_per_tile``: bytes per tile resident for the whole run
    (stages on one IPU are summed, so give an IPU's memory once).
    ``stash_entry_per_tile``: bytes per tile of one stash entry, on the
    forward stage that stashes (training). ``recompute_cycles``: the part of
    ``cycles`` that re-runs forward work (recomputation), drawn as its own
    ``R`` fragment after the first ``recompute_after`` cycles of the stage's
    work (0 for a backward stage; the forward part for the loss stage).
    """

    index: int
    ipu: int
    kind: str
    cycles: int
    send_bytes: int
    memory_per_tile: np.ndarray | None = None
    stash_entry_per_tile: np.ndarray | None = None
    label: str = ""
    recompute_cycles: int = 0
    recompute_after: int = 0
    #: The IPU's figures the stage was expanded from (None for stages given by hand).
    figures: IpuFigures | None = field(default=None, repr=False)


@dataclass(frozen=True)
class CycleTiming:
    """One pipeline cycle: when it starts and how long each phase lasts (clock cycles)."""

    index: int
    phase: str  # fill / main / flush
    start: float
    compute: float
    sync: float
    copy: float
    ipu_compute: tuple[float, ...]  # per IPU, in SimResult.ipus order

    @property
    def duration(self) -> float:
        return self.compute + self.sync + self.copy


@dataclass(frozen=True)
class FragmentTiming:
    """A fragment placed in time (clock cycles from the start of the step)."""

    cycle: int
    stage: int
    kind: str
    microbatch: int | None
    ipu: int
    start: float
    duration: float


@dataclass(frozen=True)
class IpuSummary:
    """One IPU over the whole step.

    Time figures are clock cycles; the four time parts (busy, fill/flush,
    imbalance, communication) add up to the step time. Memory figures are
    bytes on the worst tile at the peak (None when no memory was given):
    the simulation's own, with the stash entries it found in flight.
    ``figures`` are the IPU's figures it was simulated from (None for
    stages given by hand): the record holds them rather than a copy.
    """

    ipu: int
    stages: tuple[int, ...]
    busy_cycles: float
    fill_flush_cycles: float
    imbalance_cycles: float
    communication_cycles: float
    utilisation: float
    max_stash_entries: int
    worst_tile: int | None
    base_bytes: int | None
    stash_bytes: int | None
    copy_buffer_bytes: int | None
    peak_bytes: int | None
    fits: bool | None
    figures: IpuFigures | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Everything :func:`simulate` found; plain data for the writers."""

    stages: tuple[SimStage, ...]
    micro_batches: int
    micro_batch_size: int
    clock_hz: float
    link_bandwidth: float
    sync_cycles: float
    budget_bytes: int | None
    schedule: Schedule
    cycles: tuple[CycleTiming, ...]
    fragments: tuple[FragmentTiming, ...]
    ipus: tuple[IpuSummary, ...]
    step_cycles: float
    #: ``pipelined`` (PopART's pipeline) or ``sharded`` (one stage at a time: optimum-graphcore's inference).
    execution: str = "pipelined"

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def num_cycles(self) -> int:
        return len(self.cycles)

    @property
    def step_seconds(self) -> float:
        return self.step_cycles / self.clock_hz

    @property
    def throughput(self) -> float | None:
        """Samples per second; None when the step takes no time (no cycle figures)."""
        if self.step_cycles <= 0:
            return None
        return self.micro_batches * self.micro_batch_size / self.step_seconds

    def _share(self, attr: str) -> float:
        total = self.step_cycles * len(self.ipus)
        return sum(getattr(u, attr) for u in self.ipus) / total if total > 0 else 0.0

    @property
    def compute_share(self) -> float:
        """Mean utilisation over IPUs."""
        return self._share("busy_cycles")

    @property
    def fill_flush_share(self) -> float:
        return self._share("fill_flush_cycles")

    @property
    def imbalance_share(self) -> float:
        return self._share("imbalance_cycles")

    @property
    def communication_share(self) -> float:
        return self._share("communication_cycles")

    @property
    def bubble_share(self) -> float:
        """Idle share from pipeline fill/flush and stage imbalance (copies/sync excluded)."""
        return self.fill_flush_share + self.imbalance_share

    @property
    def fits(self) -> bool | None:
        verdicts = [u.fits for u in self.ipus]
        return None if any(v is None for v in verdicts) else all(verdicts)

    @property
    def ipu_of_stage(self) -> tuple[int, ...]:
        return tuple(s.ipu for s in self.stages)
