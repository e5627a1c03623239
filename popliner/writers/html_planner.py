"""The report's split planner on the page: its data (JSON), its section, its styles; its script is planner.js.

The data are the records of :mod:`popliner.report.planner`, one per range and
position, as arrays (a key list says what each column is). How profile names
reach the page and the YAML and command safely: docs/report.md ('Plan it
yourself: the split planner', its last paragraph).
"""

from __future__ import annotations

import html
import io
from typing import Any

import yaml

from popliner.config.model import PREDICTED_FIGURES, PREDICTED_OPTIONAL
from popliner.memory.types import COMPONENT_COLOURS, COMPONENT_TITLES, COMPONENTS, OTHER, components
from popliner.report.planner import Planner, PlannerRange
from popliner.textsafe import shell_word
from popliner.writers.pipeline_yaml import HEADER, config_to_document, dump_document, predicted_document

__all__ = ["PLANNER_CSS", "ROW_KEYS", "planner_data", "planner_script", "planner_section", "yaml_scalar"]

#: What each column of a record is (``rows`` of the page's data).
ROW_KEYS = ("first", "last", "ipu", "worst_tile", "worst_tile_bytes", "cycles", "bytes_in", "bytes_out",
            "stash_entries", "sim_forward", "sim_backward", "sim_head", "sim_bytes_in", "sim_received",
            "sim_returned", "parts", "predicted")
#: The ``predicted`` block's keys, in the writer's order (absent figures are null).
PREDICTED_KEYS = ("for_layers", "memory", *PREDICTED_FIGURES, *PREDICTED_OPTIONAL)
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


def planner_section(planner: Planner) -> str:
    """The section's markup; the script fills it from the data."""
    if planner.refused:
        return f"<p class='note' id='planner-refused'>No planner on this page: {html.escape(planner.refused)}.</p>"
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

def planner_script() -> str:
    """The planner's script (``planner.js``, shipped with the package), read when a page is written."""
    from importlib.resources import files

    return files("popliner.writers").joinpath("planner.js").read_text(encoding="utf-8")
