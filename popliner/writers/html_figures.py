"""The report's charts as plotly.js figure specs (plain dicts of lists, ready for JSON).

Specs are built by hand rather than through plotly's Python objects: it is
faster at full size, and the page needs only the data and the layout, which
plotly.js (embedded in the page) draws. Colours match the PNG plots.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from popliner.memory.types import COMPONENT_COLOURS, COMPONENT_TITLES, components
from popliner.report.aggregate import grid_values, tile_grid
from popliner.report.build import Liveness
from popliner.simulator.engine import SimResult
from popliner.solvers.result import StageResult
from popliner.writers.gantt import BAR_COLOURS, PHASE_COLOURS, legend_entries, schedule_bars, schedule_title

__all__ = ["HEATMAP_COLUMNS", "heatmap_figure", "liveness_figure", "memory_figure", "schedule_figure", "short_bytes"]

Figure = dict[str, Any]

#: IPU heatmaps per row.
HEATMAP_COLUMNS = 4
_STASH_COLOUR = "#e377c2"
_COPY_COLOUR = "#7f7f7f"
_HEADROOM_COLOUR = "#c7e9c0"
_BUDGET_COLOUR = "#d62728"
_FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}


def _base_layout(height: int, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {"height": height, "margin": {"l": 70, "r": 30, "t": 40, "b": 50}, "font": _FONT,
                              "plot_bgcolor": "white", "paper_bgcolor": "white", "hovermode": "closest"}
    layout.update(extra)
    return layout


def _bytes_axis(title: str) -> dict[str, Any]:
    return {"title": {"text": title}, "tickformat": ".3~s", "ticksuffix": "B", "gridcolor": "#e5e5e5",
            "zeroline": False, "rangemode": "tozero"}


# ------------------------------------------------------------------ memory bars


def memory_figure(ipus: Sequence[StageResult], budget: int) -> Figure:
    """Each IPU's worst tile, stacked by component, stash and copy buffers, then the headroom; budget line."""
    names = [f"IPU {i.ipu}" for i in ipus]
    parts = [i.worst_components for i in ipus]
    data: list[dict[str, Any]] = []
    comps = components(any(i.tile_figure.memory.has_other for i in ipus))
    stacks = [(c, COMPONENT_TITLES[c], COMPONENT_COLOURS[c]) for c in comps]
    stacks += [("stash", "Stash (extra entries)", _STASH_COLOUR), ("copy_buffers", "Copy buffers", _COPY_COLOUR)]
    for key, title, colour in stacks:
        values = [p[key] for p in parts]
        if key in ("stash", "copy_buffers") and not any(values):
            continue
        data.append({"type": "bar", "name": title, "x": names, "y": values, "marker": {"color": colour},
                     "customdata": [i.worst_tile for i in ipus],
                     "hovertemplate": f"%{{x}}, tile %{{customdata}}<br>{title}: %{{y:,}} B<extra></extra>"})
    headroom = [max(i.headroom, 0) for i in ipus]
    data.append({"type": "bar", "name": "Headroom", "x": names, "y": headroom,
                 "marker": {"color": _HEADROOM_COLOUR, "pattern": {"shape": "/", "fgcolor": "#74c476"}},
                 "hovertemplate": "%{x}: %{y:,} B free on the worst tile<extra></extra>"})
    # The budget: a line across the plot, and a legend entry for it.
    data.append({"type": "scatter", "mode": "lines", "name": f"Budget {budget:,} B per tile", "x": [None],
                 "y": [None], "line": {"color": _BUDGET_COLOUR, "dash": "dash", "width": 2}, "hoverinfo": "skip"})
    over = [{"x": n, "y": i.worst_tile_bytes, "text": f"+{short_bytes(-i.headroom)}",
             "showarrow": False, "yshift": 10, "font": {"color": _BUDGET_COLOUR, "size": 11 if len(ipus) <= 8 else 9}}
            for n, i in zip(names, ipus) if not i.fits]
    top = max([budget, *(i.worst_tile_bytes for i in ipus)])
    return {"data": data, "layout": _base_layout(
        440, barmode="stack", annotations=over, margin={"l": 70, "r": 30, "t": 40, "b": 90},
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "traceorder": "normal"},
        yaxis={**_bytes_axis("Bytes on the IPU's worst tile"), "range": [0, 1.08 * top]},
        xaxis={"type": "category"},
        shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": budget, "y1": budget,
                 "line": {"color": _BUDGET_COLOUR, "dash": "dash", "width": 2}}])}


# --------------------------------------------------------------------- heatmaps


def _colorscale(budget: int, top: int) -> list[list[Any]]:
    """White to dark blue up to the budget, light to dark red above it (as the PNG tile plot)."""
    if top <= budget:
        return [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]]
    p = budget / top
    return [[0.0, "#f7fbff"], [p / 2, "#6baed6"], [p, "#08306b"], [p, "#fcbba1"], [1.0, "#67000d"]]


def heatmap_figure(ipus: Sequence[StageResult], budget: int) -> Figure:
    """One heatmap per IPU (tiles row by row, one cell each), the worst tile ringed; a shared colour scale."""
    count = len(ipus)
    cols = max(1, min(count, HEATMAP_COLUMNS))
    rows = max(1, math.ceil(count / cols))
    top = max([budget, *(i.worst_tile_bytes for i in ipus)])
    gap_x, gap_y = 0.04, 0.12 / rows
    width, height = (1.0 - gap_x * (cols - 1)) / cols, (1.0 - gap_y * (rows - 1)) / rows
    layout = _base_layout(40 + 250 * rows, margin={"l": 20, "r": 20, "t": 40, "b": 10})
    layout["coloraxis"] = {"colorscale": _colorscale(budget, top), "cmin": 0, "cmax": top,
                           "colorbar": {"title": {"text": "bytes"}, "tickformat": "~s", "ticksuffix": "B"}}
    data: list[dict[str, Any]] = []
    annotations = []
    for k, ipu in enumerate(ipus):
        r, c = divmod(k, cols)
        suffix = "" if k == 0 else str(k + 1)
        x0, y1 = c * (width + gap_x), 1.0 - r * (height + gap_y)
        layout[f"xaxis{suffix}"] = {"domain": [x0, x0 + width], "visible": False, "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {"domain": [y1 - height, y1], "visible": False, "autorange": "reversed",
                                    "scaleanchor": f"x{suffix}", "anchor": f"x{suffix}"}
        data.extend(_ipu_heatmap(ipu, f"x{suffix}", f"y{suffix}"))
        verdict = "fits" if ipu.fits else f"+{short_bytes(-ipu.headroom)} over"
        # plotly reads a subset of HTML in text (links, styles): a layer's name is text, never markup.
        annotations.append({"text": f"<b>{html.escape(ipu.label, quote=False)}</b><br>tile {ipu.worst_tile}: "
                                    f"{short_bytes(ipu.worst_tile_bytes)}, {verdict}",
                            "xref": "paper", "yref": "paper", "x": x0 + width / 2,
                            "y": y1, "yanchor": "bottom", "showarrow": False, "font": {"size": 11}})
    layout["annotations"] = annotations
    return {"data": data, "layout": layout}


def _ipu_heatmap(ipu: StageResult, xaxis: str, yaxis: str) -> list[dict[str, Any]]:
    grid = grid_values(ipu.total_per_tile)
    nrows, ncols = tile_grid(ipu.tiles)
    index = np.arange(nrows * ncols, dtype=float)
    index[ipu.tiles:] = np.nan
    worst_r, worst_c = divmod(ipu.worst_tile, ncols)
    return [
        {"type": "heatmap", "z": grid, "customdata": index.reshape(nrows, ncols), "coloraxis": "coloraxis",
         "xaxis": xaxis, "yaxis": yaxis, "xgap": 0, "ygap": 0, "name": f"IPU {ipu.ipu}",
         "hovertemplate": f"IPU {ipu.ipu}, tile %{{customdata}}<br>%{{z:,}} B<extra></extra>"},
        {"type": "scatter", "mode": "markers", "x": [worst_c], "y": [worst_r], "xaxis": xaxis, "yaxis": yaxis,
         "showlegend": False, "name": "worst tile",
         "marker": {"symbol": "square-open", "size": 14, "color": "#FFD700", "line": {"width": 3}},
         "hovertemplate": f"worst tile {ipu.worst_tile}: {ipu.worst_tile_bytes:,} B<extra></extra>"},
    ]


# --------------------------------------------------------------------- liveness


def liveness_figure(live: Liveness) -> Figure:
    """Live variable bytes over the steps on the worst tile, the room the budget leaves them, all tiles summed."""
    data = [
        {"type": "scatter", "mode": "lines", "name": f"Variables live on tile {live.tile}",
         "x": live.on_tile.x, "y": live.on_tile.y, "line": {"color": COMPONENT_COLOURS["variables"], "width": 1.5},
         "hovertemplate": "step %{x}: %{y:,} B<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "Room for variables on that tile (budget less the rest)",
         "x": [live.first_step, live.last_step], "y": [live.room, live.room],
         "line": {"color": _BUDGET_COLOUR, "dash": "dash", "width": 2}, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "markers", "name": f"Peak: step {live.peak_step}, {live.peak_bytes:,} B",
         "x": [live.peak_step], "y": [live.peak_bytes], "marker": {"color": "black", "size": 9, "symbol": "x"},
         "hovertemplate": "peak at step %{x}: %{y:,} B<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "Variables live on all tiles (right axis)", "yaxis": "y2",
         "x": live.summed.x, "y": live.summed.y, "line": {"color": "#aaaaaa", "width": 1},
         "hovertemplate": "step %{x}: %{y:,} B on all tiles<extra></extra>"},
    ]
    top = max(live.room, live.peak_bytes, 1)
    bottom = min(0.0, 1.15 * live.room)  # a negative room: the rest alone is over the budget
    layout = _base_layout(
        420, legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"},
        xaxis={"title": {"text": "Program step"}, "gridcolor": "#e5e5e5"},
        yaxis={**_bytes_axis(f"Bytes on tile {live.tile}"), "range": [bottom, 1.08 * top]},
        yaxis2={**_bytes_axis("Bytes on all tiles"), "overlaying": "y", "side": "right", "showgrid": False,
                "range": [0, 1.08 * max(float(live.summed.y.max(initial=0)), 1.0)]},
    )
    layout["margin"] = {"l": 70, "r": 70, "t": 30, "b": 100}
    return {"data": data, "layout": layout}


# --------------------------------------------------------------------- schedule


def schedule_figure(sim: SimResult) -> Figure:
    """One step as a Gantt chart: a row per IPU, bars by kind, fill and flush shaded, bubbles white."""
    bars = schedule_bars(sim)
    rows = [f"IPU {u.ipu}" for u in sim.ipus]
    data = []
    for kind, label in legend_entries(sim, bars):
        mine = [b for b in bars if b.kind == kind]
        thin = kind in ("copy", "sync")
        data.append({
            "type": "bar", "orientation": "h", "name": label, "y": [f"IPU {b.ipu}" for b in mine],
            "x": [round(b.duration_us, 4) for b in mine], "base": [round(b.start_us, 4) for b in mine],
            "width": 0.35 if thin else 0.75, "marker": {"color": BAR_COLOURS[kind],
                                                       "line": {"width": 0 if thin else 0.5, "color": "#333"}},
            "text": [_bar_text(b.stage, b.microbatch, b.cycle, kind) for b in mine], "textposition": "none",
            "hovertemplate": "%{y}: %{text}<br>%{base:,.1f} us + %{x:,.1f} us<extra></extra>",
            # A legend entry even when the kind has no bar (e.g. recompute off): one empty bar, greyed out.
            **({} if mine else {"visible": "legendonly", "y": [rows[0]], "x": [0], "base": [0], "text": [""]}),
        })
    us = 1e6 / sim.clock_hz
    shapes, notes = [], []
    for phase in ("fill", "main", "flush"):
        span = [c for c in sim.cycles if c.phase == phase]
        if not span:
            continue
        x0, x1 = span[0].start * us, (span[-1].start + span[-1].duration) * us
        if phase in PHASE_COLOURS:
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0, "y1": 1,
                           "fillcolor": PHASE_COLOURS[phase], "line": {"width": 0}, "layer": "below"})
        notes.append({"text": f"{phase} ({len(span)} cycles)", "x": (x0 + x1) / 2, "y": 1.0, "xref": "x",
                      "yref": "paper", "yanchor": "bottom", "showarrow": False, "font": {"size": 11}})
    layout = _base_layout(
        120 + 34 * len(rows), barmode="overlay", shapes=shapes, annotations=notes, bargap=0.2,
        title={"text": schedule_title(sim), "font": {"size": 13}, "x": 0.01, "y": 0.99, "yanchor": "top"},
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "traceorder": "normal"},
        xaxis={"title": {"text": "Time in the step (us)"}, "gridcolor": "#e5e5e5", "rangemode": "tozero"},
        yaxis={"categoryorder": "array", "categoryarray": rows, "autorange": "reversed", "type": "category"},
    )
    layout["margin"] = {"l": 60, "r": 20, "t": 60, "b": 90}
    return {"data": data, "layout": layout}


def short_bytes(value: int) -> str:
    """1,834,770 -> "1.83 MB", 122,062 -> "122.1 kB", 512 -> "512 B"."""
    size = abs(value)
    if size >= 1_000_000:
        return f"{value / 1e6:,.2f} MB"
    if size >= 1000:
        return f"{value / 1e3:,.1f} kB"
    return f"{value} B"


def _bar_text(stage: int | None, microbatch: int | None, cycle: int, kind: str) -> str:
    if kind == "sync":
        return f"sync, cycle {cycle}"
    what = "copy from" if kind == "copy" else kind
    mb = "" if microbatch is None else f", micro-batch {microbatch}"
    return f"{what} stage {stage}{mb}, cycle {cycle}"
