"""A simulated step as a Chrome/Perfetto trace (JSON trace events).

pid = IPU, tid = pipeline stage; one counter track per IPU for the memory on its peak tile.
"""

from __future__ import annotations

import json
from typing import IO, Any

from popliner.simulator.engine import SimResult, memory_over_time
from popliner.writers.simulation import Simulation
from popliner.writers.writer import Functions

__all__ = ["TRACE", "trace_document", "write_trace"]


def trace_document(result: SimResult) -> dict[str, Any]:
    """Chrome trace-event JSON: pid = IPU, tid = pipeline stage, times in microseconds.

    Times are whole nanoseconds (the trace's display unit), and a slice that ends within a nanosecond
    of the next one on its track ends where that one starts: the viewers nest overlapping slices.
    """
    ns = 1e9 / result.clock_hz
    sync_tid = result.num_stages  # its own row below the stages
    events = _track_names(result, sync_tid)
    slices: list[tuple[dict[str, Any], int, int]] = []  # (event, start ns, end ns)
    for f in result.fragments:
        mb = "" if f.microbatch is None else f"({f.microbatch})"
        start = round(f.start * ns)
        ev: dict[str, Any] = {
            "name": f"PS{f.stage} {f.kind}{mb}", "cat": _CATEGORY[f.kind], "pid": f.ipu, "tid": f.stage,
            "ts": _us(start), "args": {"cycle": f.cycle, "microbatch": f.microbatch},
        }
        events.append(ev)
        if f.kind in ("D", "H"):
            ev.update(ph="i", s="t")
        else:
            ev["ph"] = "X"
            slices.append((ev, start, round((f.start + f.duration) * ns)))
    for c in result.cycles:
        if c.sync > 0:
            for u in result.ipus:
                start = round((c.start + c.compute) * ns)
                ev = {"name": "sync", "cat": "sync", "ph": "X", "pid": u.ipu, "tid": sync_tid, "ts": _us(start),
                      "args": {"cycle": c.index, "phase": c.phase}}
                events.append(ev)
                slices.append((ev, start, round((c.start + c.compute + c.sync) * ns)))
    _set_durations(slices)
    # Memory over time: a counter track per IPU (its peak tile), drawn as a graph by Perfetto.
    for ipu, points in memory_over_time(result).items():
        events.extend({"name": "memory on the peak tile (bytes)", "cat": "memory", "ph": "C", "pid": ipu, "tid": 0,
                       "ts": _us(round(p.time * ns)), "args": {"bytes": p.bytes, "stash_entries": p.entries}}
                      for p in points)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"generator": "popliner simulate", "step_seconds": result.step_seconds}}


def _track_names(result: SimResult, sync_tid: int) -> list[dict[str, Any]]:
    """The metadata events: a process per IPU, a thread per pipeline stage and one for the syncs."""
    events = []
    for u in result.ipus:
        events.append(_meta("process_name", u.ipu, 0, {"name": f"IPU{u.ipu}"}))
        events.append(_meta("process_sort_index", u.ipu, 0, {"sort_index": u.ipu}))
        for s in u.stages:
            events.append(_meta("thread_name", u.ipu, s, {"name": f"PS{s} {result.stages[s].kind}"}))
            events.append(_meta("thread_sort_index", u.ipu, s, {"sort_index": s}))
        events.append(_meta("thread_name", u.ipu, sync_tid, {"name": "sync"}))
    return events


def _set_durations(slices: list[tuple[dict[str, Any], int, int]]) -> None:
    """Each slice's ``dur``, its end cut back to the next slice's start on the same track (pid, tid).

    Readers add ``ts + dur`` in floating point, or truncate each to whole nanoseconds (Perfetto), so a
    slice that meets the next one loses the one nanosecond either reading would overlap by.
    """
    following: dict[tuple[int, int], tuple[int, float]] = {}  # track -> (start ns, ts) of the slice after
    for ev, start, end in sorted(slices, key=lambda s: (s[1], s[2]), reverse=True):
        track = (ev["pid"], ev["tid"])
        nxt = following.get(track)
        ns = max(0, end - start if nxt is None else min(end, nxt[0]) - start)
        while ns > 0 and nxt is not None and _overlaps(ev["ts"], _us(ns), nxt[1]):
            ns -= 1
        ev["dur"] = _us(ns)
        following[track] = (start, ev["ts"])


def _overlaps(ts: float, dur: float, next_ts: float) -> bool:
    return ts + dur > next_ts or int(ts * 1000) + int(dur * 1000) > int(next_ts * 1000)


_CATEGORY = {"D": "host", "H": "host", "M": "compute", "R": "recompute", "C": "copy"}


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _us(ns: int) -> float:
    """Whole nanoseconds as microseconds (the trace format's unit)."""
    return ns / 1000


def write_trace(result: SimResult, stream: IO[str]) -> None:
    json.dump(trace_document(result), stream, indent=None, separators=(",", ":"), allow_nan=False)
    stream.write("\n")


def _write_simulation(sim: Simulation, stream: IO[str]) -> None:
    write_trace(sim.result, stream)


#: ``--trace FILE`` writes this whatever FILE's name; ``-o`` wants ``.trace.json`` (``.json`` is the summary).
TRACE: Functions = {"Simulation": _write_simulation}
