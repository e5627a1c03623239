"""Writers for a :class:`SimResult`: text tables, JSON, Chrome/Perfetto trace, Gantt PNG.

Only formatting happens here; the numbers come from :func:`simulate`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from popliner.simulator.engine import SimResult, memory_over_time
from popliner.simulator.schedule import render_ipu_view, render_stage_view
from popliner.textsafe import shown

__all__ = [
    "BAR_COLOURS",
    "BAR_KINDS",
    "BAR_TITLES",
    "PHASE_COLOURS",
    "Bar",
    "bar_kind",
    "legend_entries",
    "render_text",
    "result_document",
    "schedule_bars",
    "schedule_title",
    "seconds_text",
    "trace_document",
    "write_gantt",
    "write_trace",
]


# ----------------------------------------------------------------------- text


def render_text(result: SimResult, *, max_columns: int | None = None) -> str:
    """The human report: both schedule views, a stage table, a per-IPU table, totals."""
    p, g = result.num_stages, result.micro_batches
    fill = p - 1
    parts = [
        (f"Pipeline: {_n(len(result.ipus), 'IPU')}, {_mode(result)}, {_n(p, 'pipeline stage')}, "
         f"{_n(g, 'micro-batch', 'micro-batches')} of {result.micro_batch_size} per step"),
        (f"Pipeline cycles: {result.num_cycles} = fill {fill} + main {g - fill} + flush {fill}"
         if result.execution != "sharded" else
         f"Sharded cycles: {result.num_cycles} = {p} stages x {g} micro-batches, one stage at a time "
         "(optimum-graphcore runs inference sharded; fill/flush below is an IPU waiting for the other shards)"),
        "",
        "Stage view (D host->IPU, M main, H IPU->host, C inter-IPU copies; number = micro-batch)",
        render_stage_view(result.schedule, p, max_columns=max_columns),
        "IPU view (PSs(m) = pipeline stage s on micro-batch m, in run order)",
        render_ipu_view(result.schedule, result.ipu_of_stage, max_columns=max_columns),
        "Pipeline stages",
        _stage_table(result),
        "",
        "Per IPU (time in % of the step; memory in bytes on the worst tile at the peak)",
        _ipu_table(result),
        "",
        *_totals(result),
    ]
    return "\n".join(parts) + "\n"


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _mode(result: SimResult) -> str:
    return "inference" if all(s.kind == "forward" for s in result.stages) else "training"


def _stage_table(result: SimResult) -> str:
    rows = [[str(s.index), str(s.ipu), s.kind, _int(s.cycles), _int(s.recompute_cycles), _int(s.send_bytes),
             shown(s.label)] for s in result.stages]
    return _table(["PS", "IPU", "kind", "cycles/mb", "of which recompute", "sends B/mb", "layers"], rows,
                  left=(2, 6))


def _ipu_table(result: SimResult) -> str:
    t = result.step_cycles
    rows = []
    for u in result.ipus:
        rows.append([
            str(u.ipu), ",".join(map(str, u.stages)), _pct(u.busy_cycles, t), _pct(u.fill_flush_cycles, t),
            _pct(u.imbalance_cycles, t), _pct(u.communication_cycles, t), str(u.max_stash_entries),
            _opt(u.worst_tile), _opt(u.base_bytes), _opt(u.stash_bytes), _opt(u.copy_buffer_bytes),
            _opt(u.peak_bytes), _opt(result.budget_bytes), _fits(u.fits),
        ])
    head = ["IPU", "stages", "busy", "fill/flush", "imbalance", "copy+sync", "stash entries", "worst tile",
            "resident", "stash", "copy buf", "peak", "budget", "fits"]
    return _table(head, rows, left=(1, 13))


def _totals(result: SimResult) -> list[str]:
    tp = result.throughput
    lines = [
        f"Step time: {seconds_text(result.step_seconds)} ({_int(round(result.step_cycles))} cycles at "
        f"{result.clock_hz / 1e9:.3f} GHz); throughput: "
        + (f"{tp:,.1f} samples/s" if tp is not None else "n/a (no cycle figures)"),
        (f"Time split: compute {result.compute_share:.1%}, bubble {result.bubble_share:.1%} "
         f"(fill/flush {result.fill_flush_share:.1%}, imbalance {result.imbalance_share:.1%}), "
         f"copies+sync {result.communication_share:.1%}"),
    ]
    over = [u for u in result.ipus if u.fits is False]
    if result.fits is None:
        lines.append("Memory: not checked (no per-tile memory or no budget)")
    elif over:
        worst = ", ".join(f"IPU{u.ipu} by {_int((u.peak_bytes or 0) - (result.budget_bytes or 0))} B" for u in over)
        lines.append(f"Memory: DOES NOT FIT the budget of {_int(result.budget_bytes or 0)} B/tile: {worst}")
    else:
        lines.append(f"Memory: fits the budget of {_int(result.budget_bytes or 0)} B/tile on every IPU")
    return lines


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = ()) -> str:
    """Columns padded to width; numbers right-aligned, columns in ``left`` left-aligned."""
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    out = []
    for r in [head, *rows]:
        cells = [v.ljust(w) if k in left else v.rjust(w) for k, (v, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def _int(v: float) -> str:
    return f"{int(v):,}"


def _opt(v: int | None) -> str:
    return "n/a" if v is None else _int(v)


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else "n/a"


def _fits(v: bool | None) -> str:
    return "n/a" if v is None else ("yes" if v else "NO")


def seconds_text(s: float) -> str:
    """A duration with three decimals in s, ms or us, as the simulator's text and the HTML report show it."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.3f} us"


# ----------------------------------------------------------------------- JSON


def result_document(result: SimResult) -> dict[str, Any]:
    """Summary as JSON-ready data (no schedule; see the trace for that)."""
    over_time = memory_over_time(result)
    return {
        "mode": _mode(result),
        "num_ipus": len(result.ipus),
        "pipeline_stages": result.num_stages,
        "micro_batches": result.micro_batches,
        "micro_batch_size": result.micro_batch_size,
        "execution": result.execution,
        "pipeline_cycles": result.num_cycles,
        "clock_hz": result.clock_hz,
        "link_bandwidth": result.link_bandwidth,
        "sync_cycles": result.sync_cycles,
        "step_cycles": result.step_cycles,
        "step_seconds": result.step_seconds,
        "throughput_samples_per_s": result.throughput,
        "shares": {
            "compute": result.compute_share,
            "fill_flush": result.fill_flush_share,
            "imbalance": result.imbalance_share,
            "communication": result.communication_share,
        },
        "budget_bytes": result.budget_bytes,
        "fits": result.fits,
        "stages": [
            {"index": s.index, "ipu": s.ipu, "kind": s.kind, "cycles": s.cycles,
             "recompute_cycles": s.recompute_cycles, "send_bytes": s.send_bytes, "layers": s.label}
            for s in result.stages
        ],
        "ipus": [
            {"ipu": u.ipu, "stages": list(u.stages), "busy_cycles": u.busy_cycles, "utilisation": u.utilisation,
             "fill_flush_cycles": u.fill_flush_cycles, "imbalance_cycles": u.imbalance_cycles,
             "communication_cycles": u.communication_cycles, "max_stash_entries": u.max_stash_entries,
             "worst_tile": u.worst_tile, "resident_bytes": u.base_bytes, "stash_bytes": u.stash_bytes,
             "copy_buffer_bytes": u.copy_buffer_bytes, "peak_bytes": u.peak_bytes, "fits": u.fits,
             "memory_over_time": [{"time_us": _r(p.time * 1e6 / result.clock_hz), "stash_entries": p.entries,
                                   "bytes": p.bytes} for p in over_time.get(u.ipu, ())]}
            for u in result.ipus
        ],
    }


# ---------------------------------------------------------------------- trace


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


def _r(us: float) -> float:
    return round(us, 6)


def _us(ns: int) -> float:
    """Whole nanoseconds as microseconds (the trace format's unit)."""
    return ns / 1000


def write_trace(result: SimResult, stream: IO[str]) -> None:
    json.dump(trace_document(result), stream, indent=None, separators=(",", ":"))
    stream.write("\n")


# ---------------------------------------------------------------------- Gantt

#: Bar kinds of the schedule charts (PNG Gantt and HTML report), in legend order.
BAR_KINDS: tuple[str, ...] = ("forward", "backward", "forward+backward", "recompute", "copy", "sync")
BAR_TITLES: dict[str, str] = {
    "forward": "forward",
    "backward": "backward",
    "forward+backward": "forward + backward (loss stage)",
    "recompute": "recompute",
    "copy": "inter-IPU copy",
    "sync": "sync",
}
#: Okabe-Ito colours: distinct for colour-blind readers and in greyscale print.
BAR_COLOURS: dict[str, str] = {
    "forward": "#0072B2",
    "backward": "#E69F00",
    "forward+backward": "#009E73",
    "recompute": "#CC79A7",
    "copy": "#999999",
    "sync": "#D55E00",
}
#: Background of the fill and flush phases (the pipeline's ramp bubbles).
PHASE_COLOURS: dict[str, str] = {"fill": "#FFF3C4", "flush": "#E4DDF4"}
#: Cycles per panel of the PNG Gantt: longer runs wrap onto further panels.
GANTT_CYCLES_PER_PANEL = 24


@dataclass(frozen=True)
class Bar:
    """One drawn interval of the schedule: times in microseconds from the step's start."""

    ipu: int
    kind: str  # one of BAR_KINDS
    start_us: float
    duration_us: float
    cycle: int
    stage: int | None  # None for sync
    microbatch: int | None

    @property
    def label(self) -> str:
        """``stage:micro-batch`` for compute; empty for copies and sync."""
        if self.kind in ("copy", "sync") or self.stage is None:
            return ""
        return f"{self.stage}:{self.microbatch}"


def bar_kind(stage_kind: str) -> str:
    """The chart kind of a simulator stage kind (a recompute variant is drawn as recompute)."""
    if "recompute" in stage_kind:
        return "recompute"
    return stage_kind if stage_kind in BAR_COLOURS else "forward"


def schedule_bars(result: SimResult) -> list[Bar]:
    """Every compute, copy and sync interval of one step, for the Gantt and the HTML report."""
    us = 1e6 / result.clock_hz
    bars: list[Bar] = []
    for f in result.fragments:
        if f.duration <= 0 or f.kind not in ("M", "R", "C"):
            continue  # host streams take no time in the model
        kind = {"C": "copy", "R": "recompute"}.get(f.kind) or bar_kind(result.stages[f.stage].kind)
        bars.append(Bar(f.ipu, kind, f.start * us, f.duration * us, f.cycle, f.stage, f.microbatch))
    for c in result.cycles:
        if c.sync > 0:
            bars.extend(Bar(u.ipu, "sync", (c.start + c.compute) * us, c.sync * us, c.index, None, None)
                        for u in result.ipus)
    return bars


def schedule_title(result: SimResult) -> str:
    """Mode, K, P and G with singular/plural right, then step time and throughput."""
    tp = result.throughput
    g = _n(result.micro_batches, "micro-batch", "micro-batches")
    head = (f"{_mode(result).capitalize()}: K = {_n(len(result.ipus), 'IPU')}, "
            f"{_n(result.num_stages, 'pipeline stage')}, G = {g}")
    return head + f"; step {seconds_text(result.step_seconds)}" + (f", {tp:,.0f} samples/s" if tp else "")


def write_gantt(result: SimResult, stream: IO[bytes], note: str | None = None) -> None:
    """A Gantt chart of one step as PNG: one row per IPU, wrapped over panels of cycles.

    Colours follow :data:`BAR_COLOURS` with a legend; fill and flush cycles have a
    tinted background; white space inside a cycle is a bubble. ``note`` is a
    second title line (the training options of the figures). Bars are labelled
    ``stage:micro-batch`` where the label fits. matplotlib is imported only here.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    count = max(1, -(-result.num_cycles // GANTT_CYCLES_PER_PANEL))
    us = 1e6 / result.clock_hz
    span = max(result.step_cycles * us / count, 1e-9)
    rows = {u.ipu: k for k, u in enumerate(result.ipus)}
    panel_height = 0.55 + 0.32 * len(rows)
    fig = Figure(figsize=(16.0, 1.3 + panel_height * count), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(count, 1, squeeze=False)[:, 0]
    bars = schedule_bars(result)
    for k, ax in enumerate(axes):
        lo, hi = k * span, (k + 1) * span
        _draw_panel(ax, result, rows, [b for b in bars if b.start_us < hi and b.start_us + b.duration_us > lo],
                    lo, hi)
    axes[-1].set_xlabel("time in the step (us); bar labels are pipeline stage:micro-batch; white gaps are bubbles")
    fig.suptitle(schedule_title(result) + (f"\n{note}" if note else ""), fontsize=11)
    fig.legend(handles=_legend_handles(result, bars), loc="outside lower center", ncols=8, fontsize=8, frameon=False)
    fig.savefig(stream, format="png", metadata={"Software": None})


def _draw_panel(ax: Any, result: SimResult, rows: dict[int, int], bars: Sequence[Bar], lo: float,
                hi: float) -> None:
    """One stretch of time [lo, hi) microseconds; the step wraps over equal stretches."""
    us = 1e6 / result.clock_hz
    shown = [c for c in result.cycles if c.start * us < hi and (c.start + c.duration) * us > lo]
    for c in shown:
        if c.phase in PHASE_COLOURS:
            ax.axvspan(c.start * us, (c.start + c.duration) * us, color=PHASE_COLOURS[c.phase], zorder=0, lw=0)
        ax.axvline(c.start * us, color="0.8", linewidth=0.5, zorder=1)
    for kind in BAR_KINDS:
        mine = [b for b in bars if b.kind == kind]
        if mine:
            thin = kind in ("copy", "sync")
            ax.barh([rows[b.ipu] for b in mine], [b.duration_us for b in mine], left=[b.start_us for b in mine],
                    height=0.35 if thin else 0.75, color=BAR_COLOURS[kind], edgecolor="black",
                    linewidth=0 if thin else 0.3, zorder=2)
    ax.set_xlim(lo, hi)
    _label_bars(ax, bars, rows, hi - lo)
    ax.set_yticks(range(len(rows)), [f"IPU {u}" for u in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.tick_params(axis="x", labelsize=8)
    if shown:
        phases = ", ".join(dict.fromkeys(c.phase for c in shown))
        ax.set_title(f"cycles {shown[0].index}..{shown[-1].index} ({phases})", fontsize=8, loc="left")


def _label_bars(ax: Any, bars: Sequence[Bar], rows: dict[int, int], span_us: float) -> None:
    """Label compute bars whose width holds the text (about 0.6 em per character at 6 pt)."""
    width_px = ax.get_figure().get_figwidth() * ax.get_figure().dpi * 0.9
    for b in bars:
        text = b.label
        if not text:
            continue
        need_px = len(text) * 6 * 0.6 * ax.get_figure().dpi / 72 + 2
        if b.duration_us / span_us * width_px >= need_px:
            ax.text(b.start_us + b.duration_us / 2, rows[b.ipu], text, ha="center", va="center", fontsize=6,
                    color="white" if b.kind in ("forward", "forward+backward") else "black", zorder=3, clip_on=True)


def legend_entries(result: SimResult, bars: Sequence[Bar]) -> list[tuple[str, str]]:
    """(kind, label) of the legend: every kind the mode can have; absent ones say "(none)"."""
    present = {b.kind for b in bars}
    training = _mode(result) == "training"
    out = []
    for kind in BAR_KINDS:
        if not training and kind in ("backward", "forward+backward", "recompute"):
            continue  # inference runs forward passes only
        out.append((kind, BAR_TITLES[kind] + ("" if kind in present else " (none)")))
    return out


def _legend_handles(result: SimResult, bars: Sequence[Bar]) -> list[Any]:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=BAR_COLOURS[kind], edgecolor="black", linewidth=0.3, label=label)
               for kind, label in legend_entries(result, bars)]
    handles += [Patch(facecolor=PHASE_COLOURS[p], label=f"{p} cycles") for p in ("fill", "flush")]
    return handles
