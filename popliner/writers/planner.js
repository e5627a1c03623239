// The HTML report's split planner: popliner/writers/html_planner.py puts it in the page, its data in the
// JSON element with id popliner-planner. Plain ES5 and the DOM: no library, no network.
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
