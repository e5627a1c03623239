"""Writers for a :class:`SimResult`: text tables, JSON, Chrome/Perfetto trace, Gantt PNG.

Only formatting happens here; the numbers come from :func:`simulate`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any

from popliner.simulator.engine import SimResult
from popliner.simulator.schedule import render_ipu_view, render_stage_view

__all__ = ["render_text", "result_document", "trace_document", "write_gantt", "write_trace"]


# ----------------------------------------------------------------------- text


def render_text(result: SimResult, *, max_columns: int | None = None) -> str:
    """The human report: both schedule views, a stage table, a per-IPU table, totals."""
    p, g = result.num_stages, result.micro_batches
    fill = p - 1
    parts = [
        (f"Pipeline: {_n(len(result.ipus), 'IPU')}, {_mode(result)}, {_n(p, 'pipeline stage')}, "
         f"{_n(g, 'micro-batch', 'micro-batches')} of {result.micro_batch_size} per step"),
        f"Pipeline cycles: {result.num_cycles} = fill {fill} + main {g - fill} + flush {fill}",
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
    rows = [[str(s.index), str(s.ipu), s.kind, _int(s.cycles), _int(s.send_bytes), s.label]
            for s in result.stages]
    return _table(["PS", "IPU", "kind", "cycles/mb", "sends B/mb", "layers"], rows, left=(2, 5))


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
        f"Step time: {_seconds(result.step_seconds)} ({_int(round(result.step_cycles))} cycles at "
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


def _seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.3f} us"


# ----------------------------------------------------------------------- JSON


def result_document(result: SimResult) -> dict[str, Any]:
    """Summary as JSON-ready data (no schedule; see the trace for that)."""
    return {
        "mode": _mode(result),
        "num_ipus": len(result.ipus),
        "pipeline_stages": result.num_stages,
        "micro_batches": result.micro_batches,
        "micro_batch_size": result.micro_batch_size,
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
            {"index": s.index, "ipu": s.ipu, "kind": s.kind, "cycles": s.cycles, "send_bytes": s.send_bytes,
             "layers": s.label}
            for s in result.stages
        ],
        "ipus": [
            {"ipu": u.ipu, "stages": list(u.stages), "busy_cycles": u.busy_cycles, "utilisation": u.utilisation,
             "fill_flush_cycles": u.fill_flush_cycles, "imbalance_cycles": u.imbalance_cycles,
             "communication_cycles": u.communication_cycles, "max_stash_entries": u.max_stash_entries,
             "worst_tile": u.worst_tile, "resident_bytes": u.base_bytes, "stash_bytes": u.stash_bytes,
             "copy_buffer_bytes": u.copy_buffer_bytes, "peak_bytes": u.peak_bytes, "fits": u.fits}
            for u in result.ipus
        ],
    }


# ---------------------------------------------------------------------- trace


def trace_document(result: SimResult) -> dict[str, Any]:
    """Chrome trace-event JSON: pid = IPU, tid = pipeline stage, times in microseconds."""
    us = 1e6 / result.clock_hz
    sync_tid = result.num_stages  # its own row below the stages
    events: list[dict[str, Any]] = []
    for u in result.ipus:
        events.append(_meta("process_name", u.ipu, 0, {"name": f"IPU{u.ipu}"}))
        events.append(_meta("process_sort_index", u.ipu, 0, {"sort_index": u.ipu}))
        for s in u.stages:
            events.append(_meta("thread_name", u.ipu, s, {"name": f"PS{s} {result.stages[s].kind}"}))
            events.append(_meta("thread_sort_index", u.ipu, s, {"sort_index": s}))
        events.append(_meta("thread_name", u.ipu, sync_tid, {"name": "sync"}))
    for f in result.fragments:
        mb = "" if f.microbatch is None else f"({f.microbatch})"
        ev: dict[str, Any] = {
            "name": f"PS{f.stage} {f.kind}{mb}", "cat": _CATEGORY[f.kind], "pid": f.ipu, "tid": f.stage,
            "ts": _r(f.start * us), "args": {"cycle": f.cycle, "microbatch": f.microbatch},
        }
        if f.kind in ("D", "H"):
            ev.update(ph="i", s="t")
        else:
            ev.update(ph="X", dur=_r(f.duration * us))
        events.append(ev)
    for c in result.cycles:
        if c.sync > 0:
            for u in result.ipus:
                events.append({"name": "sync", "cat": "sync", "ph": "X", "pid": u.ipu, "tid": sync_tid,
                               "ts": _r((c.start + c.compute) * us), "dur": _r(c.sync * us),
                               "args": {"cycle": c.index, "phase": c.phase}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"generator": "popliner simulate", "step_seconds": result.step_seconds}}


_CATEGORY = {"D": "host", "H": "host", "M": "compute", "C": "copy"}


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _r(us: float) -> float:
    return round(us, 6)


def write_trace(result: SimResult, stream: IO[str]) -> None:
    json.dump(trace_document(result), stream, indent=None, separators=(",", ":"))
    stream.write("\n")


# ---------------------------------------------------------------------- Gantt


def write_gantt(result: SimResult, stream: IO[bytes]) -> None:
    """A Gantt chart (one row per IPU) as PNG; matplotlib is imported only here."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    us = 1e6 / result.clock_hz
    rows = {u.ipu: k for k, u in enumerate(result.ipus)}
    fig = Figure(figsize=(min(24.0, 4.0 + 0.5 * result.num_cycles), 1.2 + 0.6 * len(rows)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    colours = _palette(result.num_stages)
    for f in result.fragments:
        if f.kind == "M" and f.duration > 0:
            y = rows[f.ipu]
            ax.barh(y, f.duration * us, left=f.start * us, height=0.7, color=colours[f.stage],
                    edgecolor="black", linewidth=0.3)
            ax.text((f.start + f.duration / 2) * us, y, f"{f.stage}:{f.microbatch}", ha="center",
                    va="center", fontsize=6, clip_on=True)
        elif f.kind == "C" and f.duration > 0:
            ax.barh(rows[f.ipu], f.duration * us, left=f.start * us, height=0.3, color="0.6")
    for c in result.cycles:
        ax.axvline(c.start * us, color="0.85", linewidth=0.5, zorder=0)
    ax.set_yticks(range(len(rows)), [f"IPU{u}" for u in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (us); labels stage:micro-batch, grey = inter-IPU copies")
    tp = result.throughput
    ax.set_title(f"{result.num_stages} pipeline stages, {result.micro_batches} micro-batches: step "
                 f"{_seconds(result.step_seconds)}" + (f", {tp:,.0f} samples/s" if tp else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(stream, format="png", dpi=120)


def _palette(n: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["tab20" if n > 10 else "tab10"]
    return [cmap(k % cmap.N) for k in range(n)]
