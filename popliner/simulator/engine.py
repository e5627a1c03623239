"""Run a pipeline schedule against a time and memory model (pure; no I/O).

The time model is docs/simulator.md's ("Time model"): per pipeline cycle a
compute phase, a sync and a copy phase, one after the other; ``D``/``H``
(host streams) take no time. The memory model (stash in flight, peaks,
bytes over time) is in :mod:`popliner.simulator.memory`, the plain values
in :mod:`popliner.simulator.types`; both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popliner.errors import UsageProblem
from popliner.hardware import DEFAULT_LINK_BANDWIDTH, DEFAULT_SYNC_CYCLES
from popliner.simulator.memory import (
    StashTrace,
    memory_over_time,
    memory_peak,
    sends_off_ipu,
    stash_in_flight,
)
from popliner.simulator.schedule import (
    Fragment,
    Schedule,
    check_fragments,
    phase_of_cycle,
    schedule,
    sharded_schedule,
)
from popliner.simulator.types import (
    SIM_KINDS,
    CycleTiming,
    FragmentTiming,
    IpuSummary,
    SimResult,
    SimStage,
)

__all__ = [
    "DEFAULT_LINK_BANDWIDTH",
    "DEFAULT_SYNC_CYCLES",
    "SIM_KINDS",
    "CycleTiming",
    "FragmentTiming",
    "IpuSummary",
    "SimResult",
    "SimStage",
    "memory_over_time",
    "simulate",
]


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
    _check_inputs(stages, clock_hz, link_bandwidth, sync_cycles, micro_batch_size)
    check_fragments(len(stages), micro_batches, sharded)
    plan = sharded_schedule if sharded else schedule
    sched = plan(len(stages), micro_batches, to_host_stage=_to_host_stage(stages))
    ipus = tuple(sorted({s.ipu for s in stages}))
    copy_cycles = _copy_cycles(stages, ipus, clock_hz, link_bandwidth)
    # A single IPU has no one to sync with before copies (and no copies).
    sync = float(sync_cycles) if len(ipus) > 1 else 0.0
    cycles, fragments = _timeline(stages, sched, ipus, copy_cycles, sync, sharded)
    step = sum(c.duration for c in cycles)
    stash = stash_in_flight(stages, sched)
    summaries = tuple(
        _ipu_summary(stages, u, k, cycles, step, stash, budget_bytes, tiles_per_ipu) for k, u in enumerate(ipus)
    )
    return SimResult(stages, micro_batches, micro_batch_size, float(clock_hz), float(link_bandwidth),
                     float(sync_cycles), budget_bytes, sched, cycles, fragments, summaries, step,
                     "sharded" if sharded else "pipelined")


# ----------------------------------------------------------------- validation


def _check_inputs(stages: tuple[SimStage, ...], clock_hz: float, bandwidth: float, sync: float, mbs: int) -> None:
    """The stages and figures; the schedule checks the pipeline (stages and micro-batches)."""
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
        if sends_off_ipu(stages, s):
            out[s.ipu].append((s.index, s.send_bytes / bandwidth * clock_hz))
    return out


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


# -------------------------------------------------------------------- summary


def _ipu_summary(stages: tuple[SimStage, ...], u: int, k: int, cycles: tuple[CycleTiming, ...], step: float,
                 trace: StashTrace, budget: int | None, tiles_per_ipu: int | None) -> IpuSummary:
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
    peak = memory_peak(stages, u, trace, tiles_per_ipu)
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
        figures=next((s.figures for s in stages if s.ipu == u and s.figures is not None), None),
    )


