"""A check as its result file (``popliner check -o result.json``): the record, and the comparison when one was made.

The layout is ``popliner/profile/check-result-v1.schema.json``'s; the file
holds no wall-clock figure, so the same inputs give the same bytes, and
:func:`popliner.checkfile.read_record` reads it back as a baseline.
"""

from __future__ import annotations

from typing import Any

from popliner.baseline import Comparison, NameDelta
from popliner.checkrecord import CHECK_FORMAT, CHECK_VERSION, CheckRecord
from popliner.checkreport import CheckReport
from popliner.writers.writer import Functions, json_of

__all__ = ["CHECK_JSON", "comparison_document", "record_document", "report_document"]


def record_document(record: CheckRecord) -> dict[str, Any]:
    return {
        "format": CHECK_FORMAT,
        "version": CHECK_VERSION,
        "popliner_version": record.popliner_version,
        "profile": {"path": record.profile_path, "sha256": record.profile_sha256},
        "config": {"path": record.config_path},
        "options": dict(record.options),
        "budget_bytes_per_tile": record.budget,
        "fits": record.fits,
        "ipus": [
            {
                "ipu": i.ipu,
                "layers": list(i.layers),
                "worst_tile": i.worst_tile,
                "worst_tile_bytes": i.worst_tile_bytes,
                "budget_bytes": i.budget,
                "headroom_bytes": i.headroom,
                "fits": i.fits,
                "worst_tile_components": dict(i.components),
                "stash_entries": i.stash_entries,
                "copy_buffer_bytes_per_tile": i.copy_buffer,
                "layer_bytes": [{"layer": r.layer, "total_bytes": r.total_bytes, "worst_tile_bytes": r.worst_tile_bytes}
                                for r in i.layer_bytes],
                "peak_step": i.peak_step,
                "largest_live_variables": [{"name": v.name, "bytes": v.bytes} for v in i.largest_live],
            }
            for i in record.ipus
        ],
    }


def _names(deltas: tuple[NameDelta, ...], key: str) -> list[dict[str, Any]]:
    return [{key: n.name, "baseline_bytes": n.baseline_bytes, "bytes": n.bytes, "change_bytes": n.change}
            for n in deltas]


def comparison_document(c: Comparison) -> dict[str, Any]:
    return {
        "baseline": {"path": c.baseline_path, "profile_path": c.baseline_profile_path,
                     "profile_sha256": c.baseline_profile_sha256, "budget_bytes_per_tile": c.baseline_budget},
        "max_growth": c.limits.fraction,
        "max_growth_bytes": c.limits.bytes,
        "passed": not c.failed,
        "split_changed": c.split_changed,
        "ipus": [
            {
                "ipu": d.ipu,
                "baseline_worst_tile_bytes": d.baseline_worst_tile_bytes,
                "worst_tile_bytes": d.worst_tile_bytes,
                "change_bytes": d.change,
                "change_share": d.change_share,
                "baseline_headroom_bytes": d.baseline_headroom,
                "headroom_bytes": d.headroom,
                "headroom_change_bytes": d.headroom_change,
                "allowed_growth_bytes": d.allowed_growth,
                "verdict": d.verdict,
                "layers_added": list(d.layers_added),
                "layers_removed": list(d.layers_removed),
                "layers_changed_most": _names(d.layer_changes, "layer"),
                "variables_changed_most": _names(d.variable_changes, "name"),
            }
            for d in c.ipus
        ],
    }


def report_document(report: CheckReport) -> dict[str, Any]:
    doc = record_document(report.record)
    if report.comparison is not None:
        doc["comparison"] = comparison_document(report.comparison)
    return doc


CHECK_JSON: Functions = {"CheckReport": json_of(report_document)}
