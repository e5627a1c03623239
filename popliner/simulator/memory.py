"""The simulator's memory model (docs/simulator.md, "Memory model"): stash entries in flight, each IPU's peak on
its worst tile, and its bytes over the step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.pipeline import spread_over_tiles
from popliner.simulator.schedule import Schedule
from popliner.simulator.types import FragmentTiming, IpuSummary, SimResult, SimStage

__all__ = ["MemoryPoint", "StashTrace", "memory_over_time", "memory_peak", "sends_off_ipu", "stash_in_flight"]


def sends_off_ipu(stages: tuple[SimStage, ...], s: SimStage) -> bool:
    """Does stage ``s`` send bytes to a stage on another IPU?"""
    return s.index + 1 < len(stages) and stages[s.index + 1].ipu != s.ipu and s.send_bytes > 0


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
class StashTrace:
    """Entries in flight per forward stage at each moment the stash grows."""

    snapshots: dict[int, list[dict[int, int]]]  # ipu -> states right after each push
    max_entries: dict[int, int]  # ipu -> max entries summed over its stages


def stash_in_flight(stages: tuple[SimStage, ...], sched: Schedule) -> StashTrace:
    """Walk the M fragments in program order: a forward pushes, its backward pops."""
    pairs = _stash_pairs(stages)
    entries = dict.fromkeys(pairs.values(), 0)  # per stashing forward stage
    snapshots: dict[int, list[dict[int, int]]] = {s.ipu: [] for s in stages}
    max_entries = {s.ipu: 0 for s in stages}
    for frags in sched:
        for fr in frags:
            if fr.kind != "M":
                continue
            if fr.stage in entries:
                entries[fr.stage] += 1
                u = stages[fr.stage].ipu
                state = {f: n for f, n in entries.items() if stages[f].ipu == u}
                snapshots[u].append(state)
                max_entries[u] = max(max_entries[u], sum(state.values()))
            elif fr.stage in pairs:
                entries[pairs[fr.stage]] -= 1
    return StashTrace(snapshots, max_entries)


@dataclass(frozen=True)
class Peak:
    worst_tile: int
    base: int
    stash: int
    copy_buffer: int
    total: int


def memory_peak(stages: tuple[SimStage, ...], u: int, trace: StashTrace,
                 tiles_per_ipu: int | None) -> Peak | None:
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
    best = Peak(int(np.argmax(base)), int(base.max()), 0, buffer, int(base.max()) + buffer)
    for state in trace.snapshots[u]:
        stash = np.zeros(tiles, dtype=np.int64)
        for f, n in state.items():
            if stages[f].stash_entry_per_tile is not None:
                stash += n * np.asarray(stages[f].stash_entry_per_tile, dtype=np.int64)
        total = base + stash
        tile = int(np.argmax(total))
        if int(total[tile]) + buffer > best.total:
            best = Peak(tile, int(base[tile]), int(stash[tile]), buffer, int(total[tile]) + buffer)
    return best


def _copy_buffer_per_tile(stages: tuple[SimStage, ...], u: int, tiles: int) -> int:
    """Bytes per tile for what the IPU sends and receives per micro-batch (even spread)."""
    total = 0
    for s in stages:
        if not sends_off_ipu(stages, s):
            continue
        if s.ipu == u or stages[s.index + 1].ipu == u:
            total += s.send_bytes
    return spread_over_tiles(total, tiles)


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
    entries = dict.fromkeys(pairs.values(), 0)  # per stashing forward stage
    points: dict[int, list[MemoryPoint]] = {}
    tile_of = {u.ipu: u for u in result.ipus}
    for summary in result.ipus:
        if summary.worst_tile is not None:
            points[summary.ipu] = [MemoryPoint(0.0, 0, _bytes_at(stages, summary.ipu, summary.worst_tile, entries,
                                                                 summary))]
    for stage, start, end in _compute_runs(result.fragments):
        if stage in entries:
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
