"""The report as one self-contained HTML page.

What is inlined, and why the page fetches nothing and carries no date:
docs/report.md (its opening).
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterable, Sequence
from typing import IO, Any

import numpy as np

from popliner.breakdown import LayerRow
from popliner.memory.types import COMPONENT_TITLES, OTHER, components
from popliner.report.build import LIVENESS_POINTS, Report
from popliner.writers.formats import writer_for
from popliner.writers.html_figures import heatmap_figure, liveness_figure, memory_figure, schedule_figure, short_bytes
from popliner.writers.html_planner import PLANNER_CSS, planner_data, planner_script, planner_section
from popliner.writers.simulation import plural, seconds_text
from popliner.writers.writer import Functions, write_output

__all__ = ["HTML", "SECTIONS", "render_report", "write_report"]

#: (id, heading) of every section, in page order.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("split", "The split"),
    ("planner", "Plan it yourself"),
    ("memory", "Memory per IPU"),
    ("layers", "Layers"),
    ("tiles", "Memory per tile"),
    ("liveness", "Variables live over the program"),
    ("schedule", "Pipeline schedule"),
    ("options", "Options in force"),
    ("about", "About this report"),
)


def write_report(report: Report, path: str | os.PathLike[str], *, force: bool) -> None:
    """Write the page to ``path`` (UTF-8), replacing a file only with ``force``."""
    write_output(report, os.fspath(path), force, writer_for(None, "Report", "html"))


def _write_page(report: Report, stream: IO[str]) -> None:
    stream.write(render_report(report))


#: The page is written with its own line ends (newline="").
HTML: Functions = {"Report": _write_page}


def render_report(report: Report) -> str:
    """The whole page, with the plotly.js bundle that the plotly package ships inlined (no network)."""
    from plotly.offline import get_plotlyjs

    figures: dict[str, Any] = {"fig-memory": memory_figure(report.ipus, report.budget),
                               "fig-tiles": heatmap_figure(report.ipus, report.budget),
                               "fig-liveness": liveness_figure(report.liveness),
                               "fig-schedule": schedule_figure(report.sim)}
    body = "\n".join((
        _header(report), _nav(), _split(report), _planner(report), _memory(report), _layers(report), _tiles(report),
        _liveness(report), _schedule(report), _options(report), _about(report),
    ))
    planner = report.planner
    data = _script_json(planner_data(planner)) if not planner.refused else ""
    script = planner_script().replace("</script", "<\\/script") if data else ""
    return _TEMPLATE.format(
        title=_e(f"popliner report: {_basename(report.profile_path)}"), css=_CSS + PLANNER_CSS, body=body,
        figures=_script_json(figures), plotly=str(get_plotlyjs()).replace("</script", "<\\/script"),
        script=_SCRIPT,
        # Before plotly.js: the planner draws without waiting for the 4.8 MB bundle to be parsed.
        planner=(f'<script type="application/json" id="popliner-planner">{data}</script>\n'
                 f"<script>{script}</script>\n") if data else "",
    )


# ------------------------------------------------------------------- sections


def _header(r: Report) -> str:
    verdict = ("<span class='ok'>every IPU fits</span>" if r.fits else
               f"<span class='bad'>{sum(not i.fits for i in r.ipus)} of {len(r.ipus)} IPUs over budget</span>")
    training = f" ({_e(r.training)})" if r.training else ""
    return (f"<header><h1>popliner report</h1><p class='lead'>{_e(_basename(r.profile_path))}: {r.mode}{training}, "
            f"{plural(len(r.ipus), 'IPU')}, budget {r.budget:,} B per tile: {verdict}.</p></header>")


def _nav() -> str:
    links = "".join(f"<a href='#{sid}'>{_e(title)}</a>" for sid, title in SECTIONS)
    return f"<nav>{links}</nav>"


def _section(sid: str, intro: str, content: str) -> str:
    title = dict(SECTIONS)[sid]
    return f"<section id='{sid}'><h2>{_e(title)}</h2>{intro}{content}</section>"


def _split(r: Report) -> str:
    total = sum(max(len(i.layers), 1) for i in r.ipus) or 1
    boxes = []
    for i in r.ipus:
        grow = max(len(i.layers), 1) / total
        state = "ok" if i.fits else "bad"
        span = _e(_span(i.layers))
        room = f"{short_bytes(i.headroom)} free" if i.fits else f"+{short_bytes(-i.headroom)} over"
        boxes.append(
            f"<div class='ipu {state}' style='flex-grow:{grow:.4f}' title='IPU {i.ipu}: {_e(_span(i.layers))}'>"
            f"<b>IPU {i.ipu}</b><span>{span}</span><span>{plural(len(i.layers), 'layer')}</span>"
            f"<span>{short_bytes(i.worst_tile_bytes)}</span><span>tile {i.worst_tile}</span><span>{room}</span></div>")
    note = ("<p class='note'>Operations without a layer go with IPU 0.</p>" if r.unlayered is not None else "")
    intro = ("<p>Each box is one IPU, as wide as its share of the layers, green when its worst tile "
             "(stash and copy buffers included) is within the budget.</p>")
    return _section("split", intro, f"<div class='split'>{''.join(boxes)}</div>{note}")


def _planner(r: Report) -> str:
    return _section("planner", "", planner_section(r.planner))


def _memory(r: Report) -> str:
    intro = ("<p>Bytes on each IPU's worst tile: the five components of its operations, the stash entries the "
             "pipeline adds and the copy buffers, then the headroom left to the budget. These are the figures "
             "<code>popliner check</code> and the split table report.</p>")
    comps = components(any(i.tile_figure.memory.has_other for i in r.ipus))
    head = ["IPU", "Layers", "Worst tile", *[COMPONENT_TITLES[c] for c in comps], "Stash", "Copy buffers",
            "Total", "Budget", "Headroom", "Fits"]
    rows = []
    for i in r.ipus:
        parts = i.worst_components
        rows.append([_cell(i.ipu), _cell(_span(i.layers)), _cell(i.worst_tile),
                     *[_cell(parts[c]) for c in comps], _cell(parts["stash"]), _cell(parts["copy_buffers"]),
                     _cell(i.worst_tile_bytes), _cell(i.budget), _cell(i.headroom), _cell("yes" if i.fits else "NO")])
    return _section("memory", intro, _figure_div("fig-memory") + _table("ipu-table", head, rows))


def _layers(r: Report) -> str:
    intro = ("<p>Each layer as a stage of its own: components summed over the IPU's tiles, and the layer's "
             "worst tile. Click a column heading to sort. Shared code and liveness peaks mean a stage's figure "
             "is not the sum of its layers'.</p>")
    comps = components(any(i.tile_figure.memory.has_other for i in r.ipus))
    head = ["#", "Layer", "IPU", "Operations", *[COMPONENT_TITLES[c] for c in comps], "Total",
            "Worst tile", "Worst-tile bytes", "Cycles"]
    where = r.ipu_of_layer
    rows = []
    listed: list[tuple[int, LayerRow, str]] = []
    if r.unlayered is not None:
        listed.append((0, r.unlayered, "0"))
    listed += [(k + 1, row, str(where.get(row.layer, ""))) for k, row in enumerate(r.layers)]
    for order, row, ipu in listed:
        mem = row.memory.as_dict(OTHER in comps)
        rows.append([_cell(order), _cell(row.layer), _cell(ipu), _cell(row.num_operations),
                     *[_cell(mem[c]) for c in comps], _cell(row.memory.total), _cell(row.worst_tile),
                     _cell(row.worst_tile_bytes), _cell(row.cycles)])
    return _section("layers", intro, _table("layer-table", head, rows, sortable=True))


def _tiles(r: Report) -> str:
    intro = ("<p>Every tile of every IPU, one cell each, laid out row by row: white to dark blue up to the "
             "budget, red above it. The total includes the stash and copy buffers; the gold square is the worst "
             "tile. Hover for a tile's number and bytes; drag to zoom.</p>")
    return _section("tiles", intro, _figure_div("fig-tiles"))


def _liveness(r: Report) -> str:
    live = r.liveness
    steps = live.last_step - live.first_step + 1
    pooled = (f" The {steps:,} steps are shown as {len(live.on_tile.y):,} points, each the maximum of "
              f"{live.on_tile.bucket} consecutive steps, so no peak is lost." if live.on_tile.bucket > 1 else "")
    intro = (f"<p>IPU {live.ipu}, the fullest, over its program steps {live.first_step:,}..{live.last_step:,}: "
             f"bytes of its variables live on its worst tile ({live.tile}) at each step. The dashed line is the "
             f"room the budget leaves variables on that tile after code, state, stash and copy buffers; the curve "
             f"crosses it exactly when the IPU does not fit.{pooled}</p>")
    return _section("liveness", intro, _figure_div("fig-liveness"))


def _schedule(r: Report) -> str:
    sim = r.sim
    tp = sim.throughput
    facts = (f"Step {seconds_text(sim.step_seconds)}, " + (f"{tp:,.1f} samples/s; " if tp else "")
             + f"compute {sim.compute_share:.1%}, bubbles {sim.bubble_share:.1%} (fill/flush "
             f"{sim.fill_flush_share:.1%}, imbalance {sim.imbalance_share:.1%}), copies and sync "
             f"{sim.communication_share:.1%} of the IPUs' time.")
    intro = ("<p>One step of the pipeline as the bundled simulator runs it: fill, main and flush cycles, each a "
             "compute phase, a sync and a copy phase. White gaps are bubbles. Hover a bar for its stage, "
             f"micro-batch and cycle.</p><p class='facts'>{_e(facts)}</p>")
    return _section("schedule", intro, _figure_div("fig-schedule"))


def _options(r: Report) -> str:
    rows = [[_cell(o.name), _cell(o.value), _cell(o.meaning)] for o in r.options]
    return _section("options", "", _table("option-table", ["Option", "Value", "Meaning"], rows))


def _about(r: Report) -> str:
    rows = [
        ["popliner version", _e(r.version)],
        ["Profile", _e(r.profile_path)],
        ["Profile sha256", f"<code>{_e(r.profile_sha256)}</code>"],
        ["Split from", _e(r.source)],
        ["Target", _e(f"{r.tiles:,} tiles per IPU, {r.bytes_per_tile:,} bytes per tile")],
        ["Budget", _e(f"{r.budget:,} bytes per tile")],
        *([["Coverage", _e(r.coverage)]] if r.coverage else []),
    ]
    items = "".join(f"<tr><th scope='row'>{k}</th><td>{v}</td></tr>" for k, v in rows)
    how = ("<p class='note'>How big profiles stay light: the heatmaps keep one cell per tile (no averaging); the "
           f"liveness curves keep at most {LIVENESS_POINTS:,} points, each the maximum of its run of steps; the "
           "schedule shows one step. plotly.js is embedded, so the page needs no network.</p>")
    return _section("about", "", f"<table class='about'>{items}</table>{how}")


# ------------------------------------------------------------------- helpers


def _figure_div(fid: str) -> str:
    return f"<div class='figure' id='{fid}'></div>"


def _table(tid: str, head: Sequence[str], rows: Iterable[Sequence[tuple[str, str | None]]],
           sortable: bool = False) -> str:
    cls = "data sortable" if sortable else "data"
    ths = "".join(f"<th scope='col'>{_e(h)}</th>" for h in head)
    trs = []
    for row in rows:
        tds = "".join(f"<td data-v='{v}' class='num'>{text}</td>" if v is not None else f"<td>{text}</td>"
                      for text, v in row)
        trs.append(f"<tr>{tds}</tr>")
    return (f"<div class='table-wrap'><table id='{tid}' class='{cls}'><thead><tr>{ths}</tr></thead>"
            f"<tbody>{''.join(trs)}</tbody></table></div>")


def _cell(value: object) -> tuple[str, str | None]:
    """(shown text, sort key): integers get separators and a numeric key."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"{int(value):,}", str(int(value))
    return _e(str(value)), None


def _span(layers: Sequence[str]) -> str:
    return layers[0] if len(layers) == 1 else f"{layers[0]} .. {layers[-1]}"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _basename(path: str) -> str:
    """The file's name: only ``/`` separates folders (a backslash is a character of a POSIX name, as in
    ``a\\b.json``, whose title lost ``a\\`` when it was read as a Windows separator)."""
    return path.rsplit("/", 1)[-1]


def _plain(value: Any) -> Any:
    """JSON-ready: arrays to lists, NaN to null, numpy scalars to Python numbers."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return [_plain(v) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    return value


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element ("<" escaped, so no "</script>" can close it)."""
    text = json.dumps(_plain(value), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


_CSS = """
:root { --ok: #1a7f37; --bad: #c62828; --line: #d0d7de; --muted: #57606a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328;
       background: #f6f8fa; }
header, nav, section { max-width: 1400px; margin: 0 auto; padding: 0 24px; }
header h1 { margin: 24px 0 4px; font-size: 24px; }
.lead { margin: 0 0 12px; font-size: 16px; }
nav { position: sticky; top: 0; z-index: 10; background: #f6f8fa; border-bottom: 1px solid var(--line);
      padding-top: 8px; padding-bottom: 8px; display: flex; flex-wrap: wrap; gap: 4px 16px; }
nav a { color: #0969da; text-decoration: none; }
section { background: white; border: 1px solid var(--line); border-radius: 8px; margin-top: 16px;
          padding-bottom: 16px; }
h2 { font-size: 18px; margin: 16px 0 8px; }
.ok { color: var(--ok); font-weight: 600; }
.bad { color: var(--bad); font-weight: 600; }
.note, .facts { color: var(--muted); }
.split { display: flex; gap: 6px; flex-wrap: nowrap; overflow-x: auto; }
.ipu { flex-basis: 0; min-width: 72px; overflow: hidden; overflow-wrap: anywhere;
       border-radius: 6px; padding: 8px; color: white; display: flex;
       flex-direction: column; font-size: 12px; }
.ipu.ok { background: #2da44e; } .ipu.bad { background: #cf222e; }
.ipu b { font-size: 14px; }
.figure { width: 100%; min-height: 200px; }
.table-wrap { overflow-x: auto; max-height: 640px; overflow-y: auto; margin-top: 8px; }
table.data { border-collapse: collapse; font-size: 13px; width: 100%; }
table.data th, table.data td { border-bottom: 1px solid #eaeef2; padding: 4px 8px; white-space: nowrap; }
table.data thead th { position: sticky; top: 0; background: #f6f8fa; text-align: left; }
table.sortable thead th { cursor: pointer; user-select: none; }
table.sortable thead th[aria-sort="ascending"]::after { content: " \\25B2"; }
table.sortable thead th[aria-sort="descending"]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.about th { text-align: left; padding-right: 16px; font-weight: 600; }
code { font-size: 12px; word-break: break-all; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var asc = th.getAttribute("aria-sort") !== "ascending";
    rows.sort(function (a, b) {
      var x = a.cells[col], y = b.cells[col];
      var vx = x.getAttribute("data-v"), vy = y.getAttribute("data-v");
      var d = (vx !== null && vy !== null) ? Number(vx) - Number(vy)
        : x.textContent.localeCompare(y.textContent, undefined, {numeric: true});
      return asc ? d : -d;
    });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () { sortBy(table, col, th); });
    });
  });
  var figures = JSON.parse(document.getElementById("popliner-figures").textContent);
  var config = {responsive: true, displaylogo: false, showLink: false, showSendToCloud: false,
                modeBarButtonsToRemove: ["sendDataToCloud"]};
  var timings = window.poplinerTimings = {};
  var drawn = Object.keys(figures).map(function (id) {
    var t0 = performance.now();
    return Plotly.newPlot(id, figures[id].data, figures[id].layout, config).then(function (gd) {
      timings[id] = Math.round(performance.now() - t0);
      return gd;
    });
  });
  Promise.all(drawn).then(function () { document.body.setAttribute("data-rendered", "yes"); },
                          function (err) { console.error("popliner report: " + err); });
})();
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="popliner">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
{body}
<script type="application/json" id="popliner-figures">{figures}</script>
{planner}<script>{plotly}</script>
<script>{script}</script>
</body>
</html>
"""
