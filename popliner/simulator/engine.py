"""Run a pipeline schedule against a time and memory model (pure; no I/O).

Time model, per pipeline cycle (all figures in IPU clock cycles):

* **compute phase**: every IPU runs the ``M`` fragments of its participating
  stages one after the other; the phase lasts as long as the slowest IPU.
  ``D``/``H`` (host streams) take no time in this model.
* **sync**: one fixed cost; the IPUs must meet before the copy program.
* **copy phase**: the ``C`` fragments of all stages; an IPU needs
  ``bytes it sends / link bandwidth`` for its stages' copies; the phase lasts
  as long as the slowest IPU. Copies run in every cycle (see the schedule).

The phases are sequential because the copy program involves sender and
receiver at once: a copy cannot overlap the other IPU's compute.

Memory model, per IPU, on each tile: the resident memory of its stages
(summed; every stage's code and variables stay on the IPU for the whole
run), plus the stash entries in flight times the per-entry stash bytes, plus
the copy buffers (bytes the IPU sends and receives per micro-batch, spread
evenly over its tiles). The peak is taken over the run on the worst tile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from popliner.errors import UsageProblem
from popliner.pipeline import spread_over_tiles
from popliner.simulator.schedule import (
    Fragment,
    Schedule,
    check_pipeline,
    phase_of_cycle,
    schedule,
    sharded_schedule,
)

__all__ = [
    "DEFAULT_LINK_BANDWIDTH",
    "DEFAULT_SYNC_CYCLES",
    "SIM_KINDS",
    "CycleTiming",
    "FragmentTiming",
    "IpuSummary",
    "MemoryPoint",
    "SimResult",
    "SimStage",
    "memory_over_time",
    "simulate",
]

#: Bytes/s between neighbouring IPUs: one IPU-Link, 512 Gbit/s as Graphcore
#: quotes it for Bow-2000/IPU-M2000 systems. A GC200 has several links; this
#: is the conservative figure for a copy that uses one.
DEFAULT_LINK_BANDWIDTH = 64e9
#: Clock cycles of the inter-IPU sync before each copy phase; a rough
#: estimate of a hardware sync plus exchange set-up; calibrate it against a
#: real profile of the pipelined model when you have one.
DEFAULT_SYNC_CYCLES = 1000

SIM_KINDS: tuple[str, ...] = ("forward", "backward", "forward+backward")


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
    bytes on the worst tile at the peak (None when no memory was given).
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


def simulate(
    stages: Sequence[SimStage],
    micro_batches: int,
    *,
    clock_hz: float,
    link_bandwidth: float = DEFAULT_LINK_BANDWIDTH,
    sync_cycles: float = DEFAULT_SYNC_CYCLES,
    budget_bytes: int | None = None,
    micro_batch_size: int = 1,
    tiles_per_ipu: int | None = None,
    sharded: bool = False,
) -> SimResult:
    """Simulate one step (G = ``micro_batches``) of the pipeline ``stages``.

    ``tiles_per_ipu`` spreads copy buffers over the tiles; by default the
    length of the IPU's memory arrays. ``sharded`` runs the stages one at a
    time instead of pipelined (:func:`popliner.simulator.schedule.sharded_schedule`):
    each cycle has one stage's compute, then only its own copy.
    """
    stages = tuple(stages)
    _check_inputs(stages, micro_batches, clock_hz, link_bandwidth, sync_cycles, micro_batch_size, sharded)
    plan = sharded_schedule if sharded else schedule
    sched = plan(len(stages), micro_batches, to_host_stage=_to_host_stage(stages))
    ipus = tuple(sorted({s.ipu for s in stages}))
    copy_cycles = _copy_cycles(stages, ipus, clock_hz, link_bandwidth)
    # A single IPU has no one to sync with before copies (and no copies).
    sync = float(sync_cycles) if len(ipus) > 1 else 0.0
    cycles, fragments = _timeline(stages, sched, ipus, copy_cycles, sync, sharded)
    step = sum(c.duration for c in cycles)
    stash = _stash_in_flight(stages, sched)
    summaries = tuple(
        _ipu_summary(stages, u, k, cycles, step, stash, budget_bytes, tiles_per_ipu) for k, u in enumerate(ipus)
    )
    return SimResult(
        stages=stages,
        micro_batches=micro_batches,
        micro_batch_size=micro_batch_size,
        clock_hz=float(clock_hz),
        link_bandwidth=float(link_bandwidth),
        sync_cycles=float(sync_cycles),
        budget_bytes=budget_bytes,
        schedule=sched,
        cycles=cycles,
        fragments=fragments,
        ipus=summaries,
        step_cycles=step,
        execution="sharded" if sharded else "pipelined",
    )


# ----------------------------------------------------------------- validation


def _check_inputs(stages: tuple[SimStage, ...], g: int, clock_hz: float, bandwidth: float, sync: float,
                  mbs: int, sharded: bool = False) -> None:
    if not sharded:  # sharded execution has no pipeline to fill: any number of micro-batches runs
        check_pipeline(len(stages), g)
    elif g < 1 or not stages:
        raise UsageProblem(f"sharded execution needs a stage and a micro-batch, got {len(stages)} and {g}")
    if not clock_hz > 0 or not bandwidth > 0:
        raise UsageProblem("clock and link bandwidth must be positive")
    if sync < 0 or mbs < 1:
        raise UsageProblem("sync cycles must be >= 0 and the micro-batch size >= 1")
    for position, s in enumerate(stages):
        if s.index != position:
            raise UsageProblem(f"simulator stage {position} has index {s.index}; give the stages in pipeline order")
        if s.kind not in SIM_KINDS:
            raise UsageProblem(f"stage {position}: kind {s.kind!r} is not one of {', '.join(SIM_KINDS)}")
        if s.ipu < 0 or s.cycles < 0 or s.send_bytes < 0:
            raise UsageProblem(f"stage {position}: IPU, cycles and send bytes must be >= 0")
        if s.recompute_cycles < 0 or s.recompute_after < 0 or s.recompute_after + s.recompute_cycles > s.cycles:
            raise UsageProblem(f"stage {position}: the recompute cycles must lie within the stage's cycles")
    _check_arrays(stages)


def _check_arrays(stages: tuple[SimStage, ...]) -> None:
    """Per-tile arrays must be 1-D and of one length per IPU (they are added up)."""
    length: dict[int, int] = {}
    for s in stages:
        for arr in (s.memory_per_tile, s.stash_entry_per_tile):
            if arr is None:
                continue
            if np.ndim(arr) != 1:
                raise UsageProblem(f"stage {s.index}: per-tile arrays must be 1-D (one value per tile)")
            if length.setdefault(s.ipu, len(arr)) != len(arr):
                raise UsageProblem(f"stage {s.index}: per-tile arrays on IPU {s.ipu} differ in length")


def _to_host_stage(stages: tuple[SimStage, ...]) -> int:
    """The stage with the loss in training, else the last forward stage."""
    for s in stages:
        if s.kind == "forward+backward":
            return s.index
    forwards = [s.index for s in stages if s.kind == "forward"]
    return forwards[-1] if forwards else len(stages) - 1


# ----------------------------------------------------------------------- time


def _copy_cycles(stages: tuple[SimStage, ...], ipus: tuple[int, ...], clock_hz: float,
                 bandwidth: float) -> dict[int, list[tuple[int, float]]]:
    """Per IPU, (stage, cycles) of each of its stages' copies to another IPU."""
    out: dict[int, list[tuple[int, float]]] = {u: [] for u in ipus}
    for s in stages:
        if _sends_off_ipu(stages, s):
            out[s.ipu].append((s.index, s.send_bytes / bandwidth * clock_hz))
    return out


def _sends_off_ipu(stages: tuple[SimStage, ...], s: SimStage) -> bool:
    return s.index + 1 < len(stages) and stages[s.index + 1].ipu != s.ipu and s.send_bytes > 0


def _timeline(stages: tuple[SimStage, ...], sched: Schedule, ipus: tuple[int, ...],
              copies: dict[int, list[tuple[int, float]]], sync: float, sharded: bool = False,
              ) -> tuple[tuple[CycleTiming, ...], tuple[FragmentTiming, ...]]:
    p, g = len(stages), len(sched) - len(stages) + 1
    copy_phase = max((sum(c for _, c in copies[u]) for u in ipus), default=0.0)
    timings: list[CycleTiming] = []
    placed: list[FragmentTiming] = []
    start = 0.0
    for c, frags in enumerate(sched):
        busy = _place_compute(stages, c, frags, start, placed)
        per_ipu = tuple(busy.get(u, 0.0) for u in ipus)
        compute = max(per_ipu, default=0.0)
        phase, cycle_copies, cycle_sync = "main", copy_phase, sync
        if sharded:
            # Only the stage that ran sends; an IPU that sends nothing off-IPU syncs with no one.
            ran = {f.stage for f in frags if f.kind == "C"}
            copies_now = {u: [(st, d) for st, d in items if st in ran] for u, items in copies.items()}
            cycle_copies = max((sum(d for _, d in items) for items in copies_now.values()), default=0.0)
            cycle_sync = sync if any(copies_now.values()) else 0.0
            _place_copies(stages, c, frags, start + compute + cycle_sync, copies_now, placed)
        else:
            phase = phase_of_cycle(c, p, g)
            _place_copies(stages, c, frags, start + compute + sync, copies, placed)
        timings.append(CycleTiming(c, phase, start, compute, cycle_sync, cycle_copies, per_ipu))
        start += compute + cycle_sync + cycle_copies
    return tuple(timings), tuple(placed)


def _place_compute(stages: tuple[SimStage, ...], c: int, frags: tuple[Fragment, ...], start: float,
                   placed: list[FragmentTiming]) -> dict[int, float]:
    """Lay out D, M, H of one cycle; stages on one IPU run in program order.

    The re-run forward work of a recomputing stage is its own ``R`` fragment
    inside the stage's ``M`` work (see :class:`SimStage`).
    """
    clock: dict[int, float] = {}
    for f in frags:
        if f.kind == "C":
            continue
        u = stages[f.stage].ipu
        t = clock.get(u, 0.0)
        for kind, dur in _parts(stages[f.stage], f.kind):
            placed.append(FragmentTiming(c, f.stage, kind, f.microbatch, u, start + t, dur))
            t += dur
        clock[u] = t
    return clock


def _parts(stage: SimStage, kind: str) -> list[tuple[str, float]]:
    """(kind, cycles) of what a fragment runs: an M fragment of a recomputing stage is M, R, M."""
    if kind != "M":
        return [(kind, 0.0)]
    if stage.recompute_cycles <= 0:
        return [("M", float(stage.cycles))]
    before = float(stage.recompute_after)
    after = float(stage.cycles - stage.recompute_after - stage.recompute_cycles)
    parts = [("M", before)] if before > 0 else []
    parts.append(("R", float(stage.recompute_cycles)))
    return parts + ([("M", after)] if after > 0 else [])


def _place_copies(stages: tuple[SimStage, ...], c: int, frags: tuple[Fragment, ...], start: float,
                  copies: dict[int, list[tuple[int, float]]], placed: list[FragmentTiming]) -> None:
    microbatch = {f.stage: f.microbatch for f in frags if f.kind == "C"}
    for u, items in copies.items():
        t = start
        for stage, dur in items:
            placed.append(FragmentTiming(c, stage, "C", microbatch.get(stage), u, t, dur))
            t += dur


# --------------------------------------------------------------------- memory


def _stash_pairs(stages: tuple[SimStage, ...]) -> dict[int, int]:
    """backward stage -> forward stage whose activations it restores.

    PopART stashes only between two stages on one IPU; the backward stage of
    forward stage f is its mirror P-1-f. A forward+backward stage needs none.
    """
    p = len(stages)
    pairs: dict[int, int] = {}
    for b in stages:
        f = p - 1 - b.index
        if b.kind == "backward" and 0 <= f < b.index and stages[f].kind == "forward" and stages[f].ipu == b.ipu:
            pairs[b.index] = f
    return pairs


@dataclass(frozen=True)
class _StashTrace:
    """Entries in flight per forward stage at each moment the stash grows."""

    snapshots: dict[int, list[dict[int, int]]]  # ipu -> states right after each push
    max_entries: dict[int, int]  # ipu -> max entries summed over its stages


def _stash_in_flight(stages: tuple[SimStage, ...], sched: Schedule) -> _StashTrace:
    """Walk the M fragments in program order: a forward pushes, its backward pops."""
    pairs = _stash_pairs(stages)
    stashing = set(pairs.values())
    entries = {f: 0 for f in stashing}
    snapshots: dict[int, list[dict[int, int]]] = {s.ipu: [] for s in stages}
    max_entries = {s.ipu: 0 for s in stages}
    for frags in sched:
        for fr in frags:
            if fr.kind != "M":
                continue
            if fr.stage in stashing:
                entries[fr.stage] += 1
                u = stages[fr.stage].ipu
                state = {f: n for f, n in entries.items() if stages[f].ipu == u}
                snapshots[u].append(state)
                max_entries[u] = max(max_entries[u], sum(state.values()))
            elif fr.stage in pairs:
                entries[pairs[fr.stage]] -= 1
    return _StashTrace(snapshots, max_entries)


@dataclass(frozen=True)
class _Peak:
    worst_tile: int
    base: int
    stash: int
    copy_buffer: int
    total: int


def _memory_peak(stages: tuple[SimStage, ...], u: int, trace: _StashTrace,
                 tiles_per_ipu: int | None) -> _Peak | None:
    mine = [s for s in stages if s.ipu == u]
    arrays = [a for s in mine for a in (s.memory_per_tile, s.stash_entry_per_tile) if a is not None]
    tiles = len(arrays[0]) if arrays else tiles_per_ipu
    if not tiles:
        return None
    base = np.zeros(tiles, dtype=np.int64)
    for s in mine:
        if s.memory_per_tile is not None:
            base += np.asarray(s.memory_per_tile, dtype=np.int64)
    buffer = _copy_buffer_per_tile(stages, u, tiles_per_ipu or tiles)
    best = _Peak(int(np.argmax(base)), int(base.max()), 0, buffer, int(base.max()) + buffer)
    for state in trace.snapshots[u]:
        stash = np.zeros(tiles, dtype=np.int64)
        for f, n in state.items():
            if stages[f].stash_entry_per_tile is not None:
                stash += n * np.asarray(stages[f].stash_entry_per_tile, dtype=np.int64)
        total = base + stash
        tile = int(np.argmax(total))
        if int(total[tile]) + buffer > best.total:
            best = _Peak(tile, int(base[tile]), int(stash[tile]), buffer, int(total[tile]) + buffer)
    return best


def _copy_buffer_per_tile(stages: tuple[SimStage, ...], u: int, tiles: int) -> int:
    """Bytes per tile for what the IPU sends and receives per micro-batch (even spread)."""
    total = 0
    for s in stages:
        if not _sends_off_ipu(stages, s):
            continue
        if s.ipu == u or stages[s.index + 1].ipu == u:
            total += s.send_bytes
    return spread_over_tiles(total, tiles)


# -------------------------------------------------------------------- summary


def _ipu_summary(stages: tuple[SimStage, ...], u: int, k: int, cycles: tuple[CycleTiming, ...], step: float,
                 trace: _StashTrace, budget: int | None, tiles_per_ipu: int | None) -> IpuSummary:
    full = float(sum(s.cycles for s in stages if s.ipu == u))
    busy = fill = imbalance = comm = 0.0
    for c in cycles:
        mine = c.ipu_compute[k]
        busy += mine
        # Idle in the compute phase is fill/flush while the IPU lacks work it
        # would have in a full cycle, and imbalance beyond its full cycle's work.
        fill += min(c.compute, full) - mine
        imbalance += max(0.0, c.compute - full)
        comm += c.sync + c.copy
    peak = _memory_peak(stages, u, trace, tiles_per_ipu)
    return IpuSummary(
        ipu=u,
        stages=tuple(s.index for s in stages if s.ipu == u),
        busy_cycles=busy,
        fill_flush_cycles=fill,
        imbalance_cycles=imbalance,
        communication_cycles=comm,
        utilisation=busy / step if step > 0 else 0.0,
        max_stash_entries=trace.max_entries.get(u, 0),
        worst_tile=peak.worst_tile if peak else None,
        base_bytes=peak.base if peak else None,
        stash_bytes=peak.stash if peak else None,
        copy_buffer_bytes=peak.copy_buffer if peak else None,
        peak_bytes=peak.total if peak else None,
        fits=None if peak is None or budget is None else peak.total <= budget,
    )


# ------------------------------------------------------------ memory over time


@dataclass(frozen=True)
class MemoryPoint:
    """An IPU's bytes on its peak tile from ``time`` (clock cycles) on, with ``entries`` stash entries in flight."""

    time: float
    entries: int
    bytes: int


def memory_over_time(result: SimResult) -> dict[int, tuple[MemoryPoint, ...]]:
    """Per IPU, its bytes on its peak tile (:attr:`IpuSummary.worst_tile`) over the step.

    The bytes are the resident memory, the stash entries in flight and the
    copy buffers, as for the peak: a point where the step starts, one where a
    stashing forward fragment starts (one more entry) and one where its
    backward stage's work for that micro-batch ends (one fewer). The largest
    point of an IPU is its peak. Empty for an IPU without memory figures.
    """
    stages = result.stages
    pairs = _stash_pairs(stages)
    stashing = set(pairs.values())
    entries = {f: 0 for f in stashing}
    points: dict[int, list[MemoryPoint]] = {}
    tile_of = {u.ipu: u for u in result.ipus}
    for summary in result.ipus:
        if summary.worst_tile is not None:
            points[summary.ipu] = [MemoryPoint(0.0, 0, _bytes_at(stages, summary.ipu, summary.worst_tile, entries,
                                                                 summary))]
    for stage, start, end in _compute_runs(result.fragments):
        if stage in stashing:
            entries[stage] += 1
            at = start
        elif stage in pairs:
            entries[pairs[stage]] -= 1
            at = end
        else:
            continue
        ipu = stages[stage].ipu
        mine = tile_of[ipu]
        if ipu in points and mine.worst_tile is not None:
            count = sum(n for g, n in entries.items() if stages[g].ipu == ipu)
            points[ipu].append(MemoryPoint(at, count, _bytes_at(stages, ipu, mine.worst_tile, entries, mine)))
    return {u: tuple(p) for u, p in points.items()}


def _compute_runs(fragments: tuple[FragmentTiming, ...]) -> list[tuple[int, float, float]]:
    """(stage, start, end) of each stage's work on one micro-batch (its M and R parts together), in run order."""
    runs: list[tuple[int, float, float]] = []
    last: tuple[int, int, int | None] | None = None
    for f in fragments:
        if f.kind not in ("M", "R"):
            continue
        key = (f.cycle, f.stage, f.microbatch)
        if key == last:
            stage, start, _ = runs[-1]
            runs[-1] = (stage, start, f.start + f.duration)
        else:
            runs.append((f.stage, f.start, f.start + f.duration))
        last = key
    return runs


def _bytes_at(stages: tuple[SimStage, ...], u: int, tile: int, entries: dict[int, int], summary: IpuSummary) -> int:
    total = summary.copy_buffer_bytes or 0
    for s in stages:
        if s.ipu != u:
            continue
        if s.memory_per_tile is not None:
            total += int(np.asarray(s.memory_per_tile)[tile])
        if s.stash_entry_per_tile is not None and s.index in entries:
            total += entries[s.index] * int(np.asarray(s.stash_entry_per_tile)[tile])
    return total
