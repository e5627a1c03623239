"""The report's split planner on the page: its data (JSON), its section and its script.

The data are the records of :mod:`popliner.report.planner`, one per range and
position, as arrays (a key list says what each column is). Every name from
the profile reaches the page as JSON inside a ``<script type="application/json">``
(``<`` escaped) and is put on the page as text (``textContent``), never as
markup. Text that goes into the YAML and the command is quoted by Python's
own quoting (a YAML double-quoted scalar, a shell word), so the page only
joins pieces.
"""

from __future__ import annotations

import io
from typing import Any

import yaml

from popliner.memory.types import COMPONENT_COLOURS, COMPONENT_TITLES, COMPONENTS, OTHER, components
from popliner.report.planner import Planner, PlannerRange
from popliner.textsafe import shell_word
from popliner.writers.pipeline_yaml import HEADER, config_to_document, dump_document, predicted_document

__all__ = ["PLANNER_CSS", "PLANNER_SCRIPT", "ROW_KEYS", "planner_data", "planner_section", "yaml_scalar"]

#: What each column of a record is (``rows`` of the page's data).
ROW_KEYS = ("first", "last", "ipu", "worst_tile", "worst_tile_bytes", "cycles", "bytes_in", "bytes_out",
            "stash_entries", "sim_forward", "sim_backward", "sim_head", "sim_bytes_in", "sim_received",
            "sim_returned", "parts", "predicted")
#: The ``predicted`` block's keys, in the writer's order (absent figures are null).
PREDICTED_KEYS = ("for_layers", "memory", "worst_tile", "worst_tile_bytes", "stash_bytes", "stash_entries",
                  "cycles", "bytes_in", "forward_cycles", "recompute_cycles", "head_cycles", "gradient_bytes_in",
                  "stash_entry_bytes")
MEMORY_KEYS = (*COMPONENTS, OTHER, "total")
YAML_NOTE = ("# Written by the split planner of popliner's HTML report. The PopART, PopTorch and\n"
             "# optimum-graphcore snippets are made when popliner reads this file; the\n"
             "# --split-after command the page shows writes them out (--config-out).\n")


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (PyYAML's escapes: valid in block and flow context alike)."""
    out = yaml.dump(text, Dumper=yaml.SafeDumper, default_style='"', allow_unicode=True, width=2**31)
    return str(out).rstrip("\n").removesuffix("\n...").rstrip("\n")


def _parts(r: PlannerRange, comps: tuple[str, ...]) -> list[int]:
    """The worst tile's bytes by part: the components, the stash and the copy buffers."""
    parts = r.stage.worst_components
    return [int(parts.get(c, 0)) for c in comps] + [int(parts["stash"]), int(parts["copy_buffers"])]


def _predicted(r: PlannerRange) -> list[Any]:
    doc = predicted_document(r.record)
    memory = doc["memory"]
    return [[memory.get(key) for key in MEMORY_KEYS] if key == "memory" else doc.get(key) for key in PREDICTED_KEYS]


def _row(r: PlannerRange, comps: tuple[str, ...]) -> list[Any]:
    s, f = r.stage, r.sim
    return [r.first, r.last, r.ipu, s.worst_tile, s.worst_tile_bytes, s.cycles, s.bytes_in, s.bytes_out,
            s.stash_entries, f.forward_cycles, f.backward_cycles, f.head_cycles, f.bytes_in, f.received, f.returned,
            _parts(r, comps), _predicted(r)]


def _yaml_head(planner: Planner) -> str:
    """The config's text before ``stages:``: the same for every split over the planner's IPUs."""
    doc = config_to_document(planner.config)
    for key in ("stages", "layers", "snippets"):
        doc.pop(key)
    out = io.StringIO()
    out.write(HEADER + YAML_NOTE)
    dump_document(doc, out)
    return out.getvalue()


def planner_data(planner: Planner) -> dict[str, Any]:
    """What the page's planner script reads (JSON-ready)."""
    cfg = planner.config
    has_other = any(r.stage.tile_figure.memory.has_other for r in planner.ranges)
    comps = components(has_other)
    layout = cfg.stage_layout
    names = list(cfg.model_layers)
    placed = list(planner.layers)
    head = layout.head if layout.wraps else None
    return {
        "layers": placed,
        "numIpus": planner.num_ipus,
        "budget": planner.budget,
        "initial": list(planner.initial),
        "refused": planner.refused,
        "parts": [[c, COMPONENT_TITLES[c], COMPONENT_COLOURS[c]] for c in comps]
        + [["stash", "Stash", "#e377c2"], ["copy_buffers", "Copy buffers", "#bcbd22"]],
        "rowKeys": list(ROW_KEYS),
        "rows": [_row(r, comps) for r in planner.ranges],
        "yaml": {
            "head": _yaml_head(planner),
            "predictedKeys": list(PREDICTED_KEYS),
            "memoryKeys": list(MEMORY_KEYS),
            "names": [yaml_scalar(name) for name in names],
            # Where each placed layer and a wrapped head are in the model's order (the config's `layers`).
            "placedAt": [names.index(name) for name in placed],
            "headAt": names.index(head) if head is not None else -1,
            "headStage": layout.head_stage if layout.head_stage is not None else -1,
            "ipuStages": [list(layout.ipu_stages(u)) for u in range(planner.num_ipus)],
            "backward": [layout.backward_stage(u) for u in range(planner.num_ipus)] if planner.training else [],
        },
        "command": {"prefix": " ".join(shell_word(w) for w in planner.command),
                    "words": [shell_word(name) for name in placed]},
        "sim": {"training": planner.training, "wraps": planner.wraps, "sharded": planner.sharded,
                "microBatches": planner.micro_batches, "microBatchSize": planner.micro_batch_size,
                "clockHz": planner.clock_hz, "linkBandwidth": planner.link_bandwidth,
                "syncCycles": planner.sync_cycles},
    }


def planner_section(planner: Planner | None) -> str:
    """The section's markup; the script fills it from the data."""
    if planner is None:
        return "<p>No planner for this report.</p>"
    if planner.refused:
        return f"<p class='note' id='planner-refused'>No planner on this page: {_text(planner.refused)}.</p>"
    intro = (
        "<p>Move a boundary between two IPUs: drag its handle, or focus it (Tab) and press the arrow keys "
        "(Home and End move it as far as it goes). Every IPU's worst tile, its parts, headroom and fit, and the "
        "pipeline's estimated step time follow at once. The figures are popliner's, looked up for every "
        "contiguous split over these IPUs: those <code>popliner check</code> gives for the split, to the byte. "
        "Layers are counted as the split places them (the embedding and head as this report places them).</p>")
    return (
        f"{intro}<div id='planner' class='planner' data-ready='no'>"
        "<div class='planner-strip-wrap'><div class='planner-strip' id='planner-strip'></div></div>"
        "<p class='facts' id='planner-summary' aria-live='polite'></p>"
        "<div class='planner-chart' id='planner-chart'></div><p class='planner-legend' id='planner-legend'></p>"
        "<div class='table-wrap'><table id='planner-table' class='data'><thead></thead><tbody></tbody></table></div>"
        "<h3>The command</h3><p>Solves this split with every option of this report (the figures above are its "
        "figures):</p><pre class='planner-code' id='planner-command'></pre>"
        "<p><button type='button' id='planner-copy-command'>Copy the command</button></p>"
        "<h3>The pipeline config</h3><pre class='planner-code' id='planner-yaml'></pre>"
        "<p><button type='button' id='planner-copy-yaml'>Copy the YAML</button> "
        "<a id='planner-download' download='pipeline.yaml' href='#'>Download pipeline.yaml</a> "
        "<span class='note' id='planner-copied' aria-live='polite'></span></p></div>")


def _text(text: str) -> str:
    import html

    return html.escape(text, quote=True)


PLANNER_CSS = """
.planner-strip-wrap { overflow-x: auto; padding: 26px 2px 12px; }
.planner-strip { position: relative; display: flex; min-width: 100%; height: 54px; user-select: none;
                 touch-action: none; }
.planner-layer { flex: 1 1 0; min-width: 14px; border-right: 1px solid rgba(255,255,255,.6); overflow: hidden;
                 color: white; font-size: 11px; padding: 2px 3px; white-space: nowrap; text-overflow: ellipsis; }
.planner-layer.over { background-image: repeating-linear-gradient(45deg, transparent 0 6px,
                      rgba(255,255,255,.25) 6px 12px); }
.planner-handle { position: absolute; top: -10px; width: 14px; margin-left: -7px; height: 74px; cursor: ew-resize;
                  background: #1f2328; border-radius: 4px; border: 2px solid white; z-index: 2; }
.planner-handle:focus { outline: 3px solid #0969da; outline-offset: 1px; }
.planner-handle span { position: absolute; top: -18px; left: 50%; transform: translateX(-50%); font-size: 11px;
                       color: #1f2328; white-space: nowrap; }
.planner-chart svg { width: 100%; height: 280px; display: block; }
.planner-legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.planner-legend i { display: inline-block; width: 11px; height: 11px; margin-right: 4px; vertical-align: -1px; }
#planner-command { white-space: pre-wrap; overflow-wrap: anywhere; }
.planner-code { background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 8px;
                max-height: 320px; overflow: auto; white-space: pre; font-size: 12px; }
tr.planner-over td { background: #ffebe9; }
"""

PLANNER_SCRIPT = r"""
(function () {
  "use strict";
  var holder = document.getElementById("popliner-planner");
  var root = document.getElementById("planner");
  if (!holder || !root) { return; }
  var t0 = performance.now();
  var D = JSON.parse(holder.textContent);
  var K = D.numIpus, N = D.layers.length, B = D.budget, S = D.sim, Y = D.yaml;
  var col = {};
  D.rowKeys.forEach(function (key, k) { col[key] = k; });
  var rows = {};
  D.rows.forEach(function (r) { rows[r[col.first] + "," + r[col.last] + "," + r[col.ipu]] = r; });
  var palette = ["#0969da", "#8250df", "#1a7f37", "#bc4c00", "#0550ae", "#6639ba", "#116329", "#953800"];
  var counts = D.initial.slice();
  var current = null;

  function check(layersPerIpu) {
    if (!Array.isArray(layersPerIpu) || layersPerIpu.length !== K) {
      throw new Error("setSplit: give " + K + " layer counts, one per IPU");
    }
    var total = 0;
    layersPerIpu.forEach(function (c) {
      if (typeof c !== "number" || !isFinite(c) || c < 1 || Math.floor(c) !== c) {
        throw new Error("setSplit: every IPU needs a whole number of layers, 1 or more");
      }
      total += c;
    });
    if (total !== N) { throw new Error("setSplit: the counts add up to " + total + ", not the " + N + " layers"); }
  }

  // The simulator's stages of the split (popliner.simulator.inputs.pipeline_stages), then its step
  // (popliner.simulator.engine): the browser test holds both equal to Python's.
  function simStages(ipus) {
    var out = [], k = ipus.length, i;
    function st(ipu, cycles, send) { out.push({ipu: ipu, cycles: cycles, send: send}); }
    if (!S.wraps) {
      if (!S.training) {
        for (i = 0; i < k; i++) { st(i, ipus[i].fwd, i + 1 < k ? ipus[i + 1].bytesIn : 0); }
        return out;
      }
      for (i = 0; i < k - 1; i++) { st(i, ipus[i].fwd, ipus[i + 1].received); }
      var last = ipus[k - 1];
      st(k - 1, last.fwd + last.bwd, k > 1 ? last.returned : 0);
      for (i = k - 2; i >= 0; i--) { st(i, ipus[i].bwd, i > 0 ? ipus[i].returned : 0); }
      return out;
    }
    var intoHead = S.training ? ipus[0].received : ipus[0].bytesIn;
    for (i = 0; i < k; i++) {
      st(i, ipus[i].fwd, i + 1 < k ? (S.training ? ipus[i + 1].received : ipus[i + 1].bytesIn) : intoHead);
    }
    if (!S.training) { st(0, ipus[0].head, 0); return out; }
    st(0, ipus[0].head, ipus[0].returned);
    for (i = k - 1; i >= 0; i--) { st(i, ipus[i].bwd, i > 0 ? ipus[i].returned : 0); }
    return out;
  }

  function stepCycles(stages) {
    var p = stages.length, g = S.microBatches, c, s, u;
    var ipuList = [];
    stages.forEach(function (x) { if (ipuList.indexOf(x.ipu) < 0) { ipuList.push(x.ipu); } });
    ipuList.sort(function (a, b) { return a - b; });
    var copies = {};
    ipuList.forEach(function (x) { copies[x] = []; });
    stages.forEach(function (x, index) {
      if (index + 1 < p && stages[index + 1].ipu !== x.ipu && x.send > 0) {
        copies[x.ipu].push([index, x.send / S.linkBandwidth * S.clockHz]);
      }
    });
    var sync = ipuList.length > 1 ? S.syncCycles : 0;
    function copySum(list) { var t = 0; list.forEach(function (e) { t += e[1]; }); return t; }
    var step = 0;
    if (S.sharded) {
      for (c = 0; c < p * g; c++) {
        s = c % p;
        var sent = 0, any = false;
        ipuList.forEach(function (x) {
          var mine = copies[x].filter(function (e) { return e[0] === s; });
          if (mine.length) { any = true; }
          sent = Math.max(sent, copySum(mine));
        });
        step += stages[s].cycles + (any ? sync : 0) + sent;
      }
      return step;
    }
    var copyPhase = 0;
    ipuList.forEach(function (x) { copyPhase = Math.max(copyPhase, copySum(copies[x])); });
    for (c = 0; c < g + p - 1; c++) {
      var busy = {};
      for (s = 0; s < p; s++) {
        if (c - s >= 0 && c - s < g) { u = stages[s].ipu; busy[u] = (busy[u] || 0) + stages[s].cycles; }
      }
      var compute = 0;
      ipuList.forEach(function (x) { compute = Math.max(compute, busy[x] || 0); });
      step += compute + sync + copyPhase;
    }
    return step;
  }

  function figures(layersPerIpu) {
    var at = 0, out = [], ipus = [];
    layersPerIpu.forEach(function (count, u) {
      var r = rows[at + "," + (at + count - 1) + "," + u];
      var parts = {};
      D.parts.forEach(function (p, k) { parts[p[0]] = r[col.parts][k]; });
      out.push({ipu: u, first: at, last: at + count - 1, first_layer: D.layers[at],
                last_layer: D.layers[at + count - 1], layers: count, worst_tile: r[col.worst_tile],
                worst_tile_bytes: r[col.worst_tile_bytes], components: parts, stash: parts.stash,
                copy_buffers: parts.copy_buffers, headroom: B - r[col.worst_tile_bytes],
                fits: B - r[col.worst_tile_bytes] >= 0, cycles: r[col.cycles], bytes_in: r[col.bytes_in],
                bytes_out: r[col.bytes_out], stash_entries: r[col.stash_entries], row: r});
      ipus.push({fwd: r[col.sim_forward], bwd: r[col.sim_backward], head: r[col.sim_head],
                 bytesIn: r[col.sim_bytes_in], received: r[col.sim_received], returned: r[col.sim_returned]});
      at += count;
    });
    var step = stepCycles(simStages(ipus));
    return {ipus: out, stepCycles: step, stepSeconds: step / S.clockHz};
  }

  // ------------------------------------------------------------------ text

  function num(v) { return Math.round(v).toLocaleString("en-US"); }
  function shortBytes(v) {
    var a = Math.abs(v);
    function fixed(x, d) { return x.toLocaleString("en-US", {minimumFractionDigits: d, maximumFractionDigits: d}); }
    if (a >= 1e6) { return fixed(v / 1e6, 2) + " MB"; }
    if (a >= 1e3) { return fixed(v / 1e3, 1) + " kB"; }
    return v + " B";
  }
  function seconds(s) {
    if (s >= 1) { return s.toFixed(3) + " s"; }
    if (s >= 1e-3) { return (s * 1e3).toFixed(3) + " ms"; }
    return (s * 1e6).toFixed(3) + " us";
  }

  function command(layersPerIpu) {
    var words = [D.command.prefix], at = 0;
    layersPerIpu.slice(0, -1).forEach(function (count) {
      at += count;
      words.push("--split-after " + D.command.words[at - 1]);
    });
    return words.join(" ");
  }

  function yamlText(fig) {
    var lines = [Y.head.replace(/\n$/, ""), "stages:"];
    var ipuOf = {};
    fig.ipus.forEach(function (x) {
      var names = [];
      for (var k = x.first; k <= x.last; k++) { names.push(Y.placedAt[k]); ipuOf[Y.placedAt[k]] = x.ipu; }
      if (Y.headAt >= 0 && x.ipu === 0) { names.push(Y.headAt); ipuOf[Y.headAt] = 0; }
      lines.push("- index: " + x.ipu, "  ipu: " + x.ipu, "  pipeline_stages: [" + Y.ipuStages[x.ipu].join(", ") + "]",
                 "  layers:");
      names.forEach(function (at) { lines.push("  - " + Y.names[at]); });
      lines.push("  predicted:");
      var values = x.row[col.predicted];
      Y.predictedKeys.forEach(function (key, k) {
        var v = values[k];
        if (v === null) { return; }
        if (key === "memory") {
          lines.push("    memory:");
          Y.memoryKeys.forEach(function (m, q) { if (v[q] !== null) { lines.push("      " + m + ": " + v[q]); } });
        } else if (key === "for_layers") {
          lines.push("    for_layers: \"" + v + "\"");
        } else {
          lines.push("    " + key + ": " + v);
        }
      });
    });
    lines.push("layers:");
    Y.names.forEach(function (name, at) {
      var u = ipuOf[at];
      var head = at === Y.headAt;
      var row = "- {name: " + name + ", ipu: " + u + ", pipelineStage: " + (head ? Y.headStage : u);
      if (S.training) { row += ", backwardPipelineStage: " + (head ? Y.headStage : Y.backward[u]); }
      lines.push(row + "}");
    });
    return lines.join("\n") + "\n";
  }

  // --------------------------------------------------------------- drawing

  var strip = document.getElementById("planner-strip");
  var cells = D.layers.map(function (name, k) {
    var cell = document.createElement("div");
    cell.className = "planner-layer";
    cell.textContent = name;
    cell.setAttribute("title", "layer " + k + ": " + name);
    strip.appendChild(cell);
    return cell;
  });
  var legend = document.getElementById("planner-legend");
  D.parts.forEach(function (p) {
    var item = document.createElement("span"), box = document.createElement("i");
    box.style.background = p[2];
    item.appendChild(box);
    item.appendChild(document.createTextNode(p[1]));
    legend.appendChild(item);
  });
  var budgetKey = document.createElement("span");
  budgetKey.textContent = "dashed red line: the budget per tile; a red frame: over it";
  legend.appendChild(budgetKey);
  var handles = [];
  for (var h = 0; h < K - 1; h++) {
    var handle = document.createElement("div");
    handle.className = "planner-handle";
    handle.setAttribute("role", "slider");
    handle.setAttribute("tabindex", "0");
    handle.setAttribute("aria-label", "Boundary between IPU " + h + " and IPU " + (h + 1));
    handle.dataset.boundary = String(h);
    handle.appendChild(document.createElement("span"));
    strip.appendChild(handle);
    handles.push(handle);
  }

  function cuts() { var at = 0; return counts.slice(0, -1).map(function (c) { at += c; return at; }); }
  function setCut(b, to) {
    var cs = cuts();
    var lo = b === 0 ? 1 : cs[b - 1] + 1, hi = b === K - 2 ? N - 1 : cs[b + 1] - 1;
    to = Math.max(lo, Math.min(hi, to));
    if (to === cs[b]) { return false; }
    cs[b] = to;
    var prev = 0;
    counts = cs.concat([N]).map(function (c) { var n = c - prev; prev = c; return n; });
    update();
    return true;
  }

  function svg(tag, attrs, text) {
    var el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    if (text !== undefined) { el.textContent = text; }
    return el;
  }

  function drawChart(fig) {
    var box = document.getElementById("planner-chart");
    var width = Math.max(box.clientWidth || 900, 300), height = 280, left = 78, top = 16, bottom = 30;
    var most = B;
    fig.ipus.forEach(function (x) { most = Math.max(most, x.worst_tile_bytes); });
    most *= 1.08;
    var plotW = width - left - 10, plotH = height - top - bottom, slot = plotW / K;
    var y = function (v) { return top + plotH - v / most * plotH; };
    var s = svg("svg", {viewBox: "0 0 " + width + " " + height, role: "img",
                        "aria-label": "Worst-tile bytes per IPU against the budget"});
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var v = most / 1.08 * f;
      s.appendChild(svg("line", {x1: left, x2: width - 10, y1: y(v), y2: y(v), stroke: "#eaeef2"}));
      s.appendChild(svg("text", {x: left - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#57606a"},
                        shortBytes(v)));
    });
    fig.ipus.forEach(function (x) {
      var base = 0, bx = left + slot * x.ipu + slot * 0.15, bw = slot * 0.7;
      var g = svg("g", {"class": "planner-bar", "data-ipu": x.ipu});
      D.parts.forEach(function (p) {
        var v = x.components[p[0]];
        if (v <= 0) { return; }
        var r = svg("rect", {x: bx, y: y(base + v), width: bw, height: Math.max(0, y(base) - y(base + v)), fill: p[2]});
        r.appendChild(svg("title", {}, "IPU " + x.ipu + " " + p[1] + ": " + num(v) + " B"));
        g.appendChild(r);
        base += v;
      });
      if (!x.fits) {
        g.appendChild(svg("rect", {x: bx, y: y(x.worst_tile_bytes), width: bw,
                                   height: y(0) - y(x.worst_tile_bytes), fill: "none", stroke: "#c62828",
                                   "stroke-width": 2}));
      }
      g.appendChild(svg("text", {x: bx + bw / 2, y: height - 10, "text-anchor": "middle", "font-size": 11},
                        "IPU " + x.ipu));
      s.appendChild(g);
    });
    s.appendChild(svg("line", {x1: left, x2: width - 10, y1: y(B), y2: y(B), stroke: "#c62828",
                               "stroke-dasharray": "6 4", "stroke-width": 2, "class": "planner-budget"}));
    s.appendChild(svg("text", {x: width - 12, y: y(B) - 4, "text-anchor": "end", "font-size": 11, fill: "#c62828"},
                      "budget " + num(B) + " B"));
    box.replaceChildren(s);
  }

  function drawTable(fig) {
    var table = document.getElementById("planner-table");
    var head = ["IPU", "Layers", "First layer", "Last layer", "Worst tile", "Worst-tile bytes"]
      .concat(D.parts.map(function (p) { return p[1]; }), ["Headroom", "Fits", "Cycles"]);
    var tr = document.createElement("tr");
    head.forEach(function (h) {
      var th = document.createElement("th");
      th.scope = "col";
      th.textContent = h;
      tr.appendChild(th);
    });
    table.tHead.replaceChildren(tr);
    var body = [];
    fig.ipus.forEach(function (x) {
      var row = document.createElement("tr");
      row.className = x.fits ? "" : "planner-over";
      row.dataset.ipu = String(x.ipu);
      var values = [[x.ipu, true], [x.layers, true], [x.first_layer, false], [x.last_layer, false],
                    [x.worst_tile, true], [x.worst_tile_bytes, true]]
        .concat(D.parts.map(function (p) { return [x.components[p[0]], true]; }),
                [[x.headroom, true], [x.fits ? "yes" : "NO", false], [x.cycles, true]]);
      values.forEach(function (v) {
        var td = document.createElement("td");
        if (v[1]) { td.className = "num"; td.dataset.v = String(v[0]); td.textContent = num(v[0]); }
        else { td.textContent = String(v[0]); }
        row.appendChild(td);
      });
      body.push(row);
    });
    table.tBodies[0].replaceChildren.apply(table.tBodies[0], body);
  }

  function update() {
    var fig = figures(counts);
    current = {counts: counts.slice(), figures: fig, command: command(counts), yaml: yamlText(fig)};
    fig.ipus.forEach(function (x) {
      for (var k = x.first; k <= x.last; k++) {
        cells[k].style.background = palette[x.ipu % palette.length];
        cells[k].classList.toggle("over", !x.fits);
        cells[k].dataset.ipu = String(x.ipu);
      }
    });
    cuts().forEach(function (c, b) {
      var hd = handles[b];
      hd.style.left = (cells[c].offsetLeft) + "px";
      hd.setAttribute("aria-valuemin", String(b + 1));
      hd.setAttribute("aria-valuemax", String(N - (K - 1 - b)));
      hd.setAttribute("aria-valuenow", String(c));
      hd.setAttribute("aria-valuetext", "IPU " + b + " ends after layer " + (c - 1) + " (" + D.layers[c - 1] + ")");
      hd.firstChild.textContent = String(c);
    });
    var over = fig.ipus.filter(function (x) { return !x.fits; }).length;
    var tp = fig.stepSeconds > 0 ? S.microBatches * S.microBatchSize / fig.stepSeconds : 0;
    document.getElementById("planner-summary").textContent =
      (over ? over + " of " + K + " IPUs over the budget" : "every IPU fits") + "; estimated step " +
      seconds(fig.stepSeconds) + " (" + S.microBatches + " micro-batches" +
      (tp ? ", " + tp.toLocaleString("en-US", {maximumFractionDigits: 1}) + " samples/s" : "") + ").";
    document.getElementById("planner-summary").dataset.stepSeconds = String(fig.stepSeconds);
    drawChart(fig);
    drawTable(fig);
    document.getElementById("planner-command").textContent = current.command;
    document.getElementById("planner-yaml").textContent = current.yaml;
    var link = document.getElementById("planner-download");
    if (link.dataset.url) { URL.revokeObjectURL(link.dataset.url); }
    link.dataset.url = URL.createObjectURL(new Blob([current.yaml], {type: "application/yaml"}));
    link.href = link.dataset.url;
  }

  // --------------------------------------------------------------- input

  handles.forEach(function (hd, b) {
    hd.addEventListener("keydown", function (ev) {
      var c = cuts()[b], to = null;
      if (ev.key === "ArrowLeft" || ev.key === "ArrowDown") { to = c - 1; }
      else if (ev.key === "ArrowRight" || ev.key === "ArrowUp") { to = c + 1; }
      else if (ev.key === "PageDown") { to = c - 5; }
      else if (ev.key === "PageUp") { to = c + 5; }
      else if (ev.key === "Home") { to = 0; }
      else if (ev.key === "End") { to = N; }
      if (to === null) { return; }
      ev.preventDefault();
      setCut(b, to);
    });
    hd.addEventListener("pointerdown", function (ev) {
      ev.preventDefault();
      hd.focus();
      hd.setPointerCapture(ev.pointerId);
      function move(e) {
        var x = e.clientX - strip.getBoundingClientRect().left, best = 1, dist = Infinity;
        for (var k = 1; k < N; k++) {
          var d = Math.abs(cells[k].offsetLeft - x);
          if (d < dist) { dist = d; best = k; }
        }
        setCut(b, best);
      }
      function up(e) {
        hd.releasePointerCapture(e.pointerId);
        hd.removeEventListener("pointermove", move);
        hd.removeEventListener("pointerup", up);
        hd.removeEventListener("pointercancel", up);
      }
      hd.addEventListener("pointermove", move);
      hd.addEventListener("pointerup", up);
      hd.addEventListener("pointercancel", up);
    });
  });

  function copy(text) {
    var note = document.getElementById("planner-copied");
    function fallback() {
      var area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      var done = false;
      try { done = document.execCommand("copy"); } catch (e) { done = false; }
      area.remove();
      note.textContent = done ? "copied" : "select the text above and copy it";
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { note.textContent = "copied"; }, fallback);
    } else { fallback(); }
  }
  document.getElementById("planner-copy-command").addEventListener("click", function () { copy(current.command); });
  document.getElementById("planner-copy-yaml").addEventListener("click", function () { copy(current.yaml); });
  window.addEventListener("resize", function () { update(); });

  function result() {
    return current.figures.ipus.map(function (x) {
      var out = {};
      Object.keys(x).forEach(function (k) { if (k !== "row") { out[k] = x[k]; } });
      return out;
    });
  }

  window.poplinerPlanner = {
    layers: D.layers.slice(),
    numIpus: K,
    budget: B,
    setSplit: function (layersPerIpu) {
      check(layersPerIpu);
      counts = layersPerIpu.slice();
      update();
      return result();
    },
    state: function () {
      return {counts: current.counts.slice(), ipus: result(), stepCycles: current.figures.stepCycles,
              stepSeconds: current.figures.stepSeconds, command: current.command, yaml: current.yaml};
    }
  };
  update();
  window.poplinerPlanner.renderMs = Math.round(performance.now() - t0);
  root.dataset.ready = "yes";
})();
"""
