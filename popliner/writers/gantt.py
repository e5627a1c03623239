"""A simulated step as a Gantt chart (PNG), and the schedule's bars the HTML report draws too.

matplotlib is imported only when a chart is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from popliner.simulator.engine import SimResult
from popliner.writers.simulation import mode_of, plural, seconds_text

__all__ = ["BAR_COLOURS", "BAR_KINDS", "BAR_TITLES", "PHASE_COLOURS", "Bar", "bar_kind", "legend_entries",
           "schedule_bars", "schedule_title", "write_gantt"]


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
#: Panels drawn at most: past this many the chart shows the first and the last half of them (the fill and the
#: flush with the main cycles next to them) and names the cycles left out, so that its size and time are bounded
#: whatever G (100,000 micro-batches made 4,000 panels and ran out of memory).
GANTT_MAX_PANELS = 8
#: IPU rows over all panels drawn, when that takes fewer panels (two at least): a row costs about 0.1 s to draw.
GANTT_MAX_ROWS = 96


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
    g = plural(result.micro_batches, "micro-batch", "micro-batches")
    head = (f"{mode_of(result).capitalize()}: K = {plural(len(result.ipus), 'IPU')}, "
            f"{plural(result.num_stages, 'pipeline stage')}, G = {g}")
    return head + f"; step {seconds_text(result.step_seconds)}" + (f", {tp:,.0f} samples/s" if tp else "")


def write_gantt(result: SimResult, stream: IO[bytes], note: str | None = None, fmt: str = "png") -> None:
    """A Gantt chart of one step as PNG (or SVG, ``fmt``): one row per IPU, wrapped over panels of cycles.

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
    panels = _panels_drawn(count, max(2, min(GANTT_MAX_PANELS, GANTT_MAX_ROWS // len(rows))))
    panel_height = 0.55 + 0.32 * len(rows)
    fig = Figure(figsize=(16.0, 1.3 + panel_height * len(panels)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    bars = schedule_bars(result)
    for k, ax in zip(panels, axes):
        lo, hi = k * span, (k + 1) * span
        _draw_panel(ax, result, rows, [b for b in bars if b.start_us < hi and b.start_us + b.duration_us > lo],
                    lo, hi)
    axes[-1].set_xlabel("time in the step (us); bar labels are pipeline stage:micro-batch; white gaps are bubbles")
    left_out = _left_out(result, panels, span / us)
    fig.suptitle(schedule_title(result) + (f"\n{note}" if note else "") + left_out, fontsize=11)
    fig.legend(handles=_legend_handles(result, bars), loc="outside lower center", ncols=8, fontsize=8, frameon=False)
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "popliner"}):  # no date, fixed ids: the same step, the same bytes
        fig.savefig(stream, format=fmt, metadata={"Date": None} if fmt == "svg" else {"Software": None})


def _panels_drawn(count: int, most: int) -> list[int]:
    """The panels drawn: all ``count``, or the first and the last ``most`` / 2 (the fill and the flush)."""
    if count <= most:
        return list(range(count))
    head = most // 2
    return [*range(head), *range(count - (most - head), count)]


def _left_out(result: SimResult, panels: list[int], span_cycles: float) -> str:
    """A title line naming the cycles of the panels not drawn (empty when every panel is)."""
    gap = [k for k in range(panels[-1]) if k not in panels]
    if not gap:
        return ""
    lo, hi = gap[0] * span_cycles, (gap[-1] + 1) * span_cycles
    inside = [c.index for c in result.cycles if c.start >= lo and c.start < hi]
    if not inside:
        return ""
    return (f"\ncycles {inside[0]}..{inside[-1]} (main) are not drawn: {len(inside):,} more like those around "
            "them; the trace (--trace) has every cycle")


def _draw_panel(ax: Any, result: SimResult, rows: dict[int, int], bars: Sequence[Bar], lo: float,
                hi: float) -> None:
    """One stretch of time [lo, hi) microseconds; the step wraps over equal stretches."""
    from matplotlib.collections import PolyCollection

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
            half = (0.35 if thin else 0.75) / 2
            # One collection per kind, not a patch per bar: thousands of bars drew in 20 s, now well under one.
            boxes = [((b.start_us, rows[b.ipu] - half), (b.start_us + b.duration_us, rows[b.ipu] - half),
                      (b.start_us + b.duration_us, rows[b.ipu] + half), (b.start_us, rows[b.ipu] + half))
                     for b in mine]
            ax.add_collection(PolyCollection(boxes, facecolors=BAR_COLOURS[kind], edgecolors="black",
                                             linewidths=0 if thin else 0.3, zorder=2))
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
    training = mode_of(result) == "training"
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
