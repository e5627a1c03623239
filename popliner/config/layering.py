"""The layer options a config was made with: recorded in it, applied when it is read back.

Why ``check``, ``simulate --profile`` and ``report`` apply the record, and how
an option given on their command line must agree with it: docs/pipeline-config.md
('Layer options').
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from popliner.errors import UsageProblem

if TYPE_CHECKING:
    from popliner.analysis import AnalysisOptions

__all__ = ["LAYER_OPTION_KEYS", "LayerRecord", "analysis_fields", "layer_record", "merged_layer_options",
           "read_layer_options"]

#: The recorded options, by their command-line names (``--layer-name-regex`` is ``layer_name_regex``).
LAYER_OPTION_KEYS = ("layer_preset", "layer_name_regex", "inputs_regex_layer_0", "layer_order", "op_layers",
                     "all_vars", "backward_regex")
#: ``(key, value)`` pairs in :data:`LAYER_OPTION_KEYS` order; ``op_layers`` as a comma-separated string.
LayerRecord = tuple[tuple[str, Any], ...]


def layer_record(options: AnalysisOptions) -> LayerRecord:
    """The layer options of ``options`` that differ from the defaults, for a config to record."""
    from popliner.analysis import AnalysisOptions

    values, defaults = _layer_values(options), _layer_values(AnalysisOptions())
    return tuple((key, values[key]) for key in LAYER_OPTION_KEYS if values[key] != defaults[key])


def _layer_values(options: AnalysisOptions) -> dict[str, Any]:
    """Every layer option of ``options``, by its command-line name and as a config records it."""
    return {"layer_preset": options.layer_preset, "layer_name_regex": options.layer_name_regex,
            "inputs_regex_layer_0": options.inputs_regex_layer_0, "layer_order": options.layer_order,
            "op_layers": ",".join(options.op_layers), "all_vars": not options.layered_vars_only,
            "backward_regex": options.backward_regex}


def read_layer_options(r: Any, value: Any) -> LayerRecord:
    """The ``layer_options`` block of a config, each key checked where it is (``r`` is the YAML reader)."""
    from popliner.ops.layers import AUTO_PRESET, preset_names

    m = r.mapping(value, "layer_options", LAYER_OPTION_KEYS, ())
    out: list[tuple[str, Any]] = []
    for key in LAYER_OPTION_KEYS:
        if key not in m:
            continue
        where = f"layer_options.{key}"
        if key == "layer_preset":
            out.append((key, r.choice(m[key], where, (AUTO_PRESET, *preset_names()))))
        elif key == "layer_order":
            out.append((key, r.choice(m[key], where, ("steps", "natural"))))
        elif key == "all_vars":
            out.append((key, r.boolean(m[key], where)))
        elif key == "op_layers":
            text = r.text(m[key], where)
            if not [s for s in text.split(",") if s.strip()]:
                r.fail(where, "names no debug-context layer", "give comma-separated names, e.g. popart,poptorch")
            out.append((key, text))
        else:
            out.append((key, r.regex(m[key], where)))
    return tuple(out)


def merged_layer_options(recorded: LayerRecord, given: Mapping[str, object], source: str) -> dict[str, object]:
    """The layer options for a config: the recorded ones, and those given that it does not record.

    An option given that the config records must say the same; else :class:`UsageProblem` (exit 2).
    """
    record = dict(recorded)
    merged = dict(record)
    for key in LAYER_OPTION_KEYS:
        value = given.get(key)
        if value is None or (key == "all_vars" and value is False):
            continue
        if key in record and record[key] != value:
            raise UsageProblem(f"--{key.replace('_', '-')} {value!r} conflicts with {source}, which was made with "
                               f"layer_options.{key}: {record[key]!r}; drop the option (the config's applies)")
        merged[key] = value
    return merged


def analysis_fields(options: Mapping[str, object]) -> dict[str, object]:
    """``AnalysisOptions`` fields from layer options by their command-line names."""
    out: dict[str, object] = {key: options[key] for key in ("layer_preset", "layer_name_regex",
                                                            "inputs_regex_layer_0", "layer_order", "backward_regex")
                              if options.get(key) is not None}
    op_layers = options.get("op_layers")
    if op_layers is not None:
        out["op_layers"] = tuple(s.strip() for s in str(op_layers).split(",") if s.strip())
        if not out["op_layers"]:
            raise UsageProblem("--op-layers: give at least one debug-context layer name")
    if options.get("all_vars"):
        out["layered_vars_only"] = False
    return out
