"""A pipeline config as YAML (schema in docs/pipeline-config.md), read back by :mod:`popliner.config.yaml_io`.

Writing is deterministic: the same config gives the same bytes. The per-layer
table and the snippets are derived from ``stages[].layers``.
"""

from __future__ import annotations

import io
from typing import IO, Any

from popliner.config.model import PREDICTED_FIGURES, PREDICTED_OPTIONAL, ConfigStage, PipelineConfig
from popliner.config.snippets import FlowList as _FlowList
from popliner.config.snippets import snippets
from popliner.config.yaml_io import CONFIG_BYTES_ENV
from popliner.errors import OutputTooLarge
from popliner.profile.limits import limit
from popliner.writers.writer import Functions

__all__ = ["HEADER", "YAML", "config_to_document", "dump_document", "predicted_document", "write_config"]

HEADER = (
    "# popliner pipeline config (schema: docs/pipeline-config.md).\n"
    "# To move a layer, edit stages[].layers only; the `layers` table and the\n"
    "# snippets are regenerated from them when popliner reads this file.\n"
)


class _Flow(dict):  # type: ignore[type-arg]
    """A mapping written on one line (the rows of the per-layer table)."""


def _dumper() -> type:
    """SafeDumper plus block scalars for code and one-line rows where they read better.

    Made when a config is written: PyYAML is not imported by every command that maps suffixes to writers.
    """
    import yaml

    class Dumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML ships no type hints here
        pass

    def str_rep(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
        style = "|" if "\n" in text else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)

    Dumper.add_representer(str, str_rep)
    Dumper.add_representer(_Flow, lambda d, m: d.represent_mapping("tag:yaml.org,2002:map", m.items(),
                                                                    flow_style=True))
    Dumper.add_representer(_FlowList, lambda d, seq: d.represent_sequence("tag:yaml.org,2002:seq", seq,
                                                                           flow_style=True))
    return Dumper


def write_config(cfg: PipelineConfig, stream: IO[str]) -> None:
    """Write ``cfg`` as YAML to an open text stream (the caller uses atomic_write).

    A config longer than popliner reads back is refused before a character is written (a thousand layers of
    long names make a megabyte): popliner writes no config it would then refuse to read.
    """
    body = io.StringIO()
    dump_document(config_to_document(cfg), body)
    text = HEADER + body.getvalue()
    most = limit(CONFIG_BYTES_ENV)
    if len(text) > most:
        raise OutputTooLarge(
            f"the pipeline config would be {len(text):,} characters, over the {most:,} that popliner "
            f"reads back; use fewer or shorter layer names (--layer-name-regex), or set {CONFIG_BYTES_ENV} to a "
            "larger count (for writing it and for every command that reads it)")
    stream.write(text)


def dump_document(doc: dict[str, Any], stream: IO[str]) -> None:
    """A (part of a) config document as this writer writes it."""
    import yaml

    yaml.dump(doc, stream, Dumper=_dumper(), sort_keys=False, default_flow_style=False,
              allow_unicode=True, width=1000)  # one-line rows stay on one line


def config_to_document(cfg: PipelineConfig) -> dict[str, Any]:
    """The YAML document as plain Python data (keys in schema order)."""
    doc: dict[str, Any] = {
        "version": cfg.version,
        "profile": {"path": cfg.profile_path, "sha256": cfg.profile_sha256},
        "target": {"tiles_per_ipu": cfg.tiles_per_ipu, "bytes_per_tile": cfg.bytes_per_tile,
                   "clock_hz": float(cfg.clock_hz)},
        **({} if cfg.framework is None else {"framework": cfg.framework, "execution": cfg.execution}),
        **({"matmul_proportion": _FlowList(cfg.matmul_proportion)} if cfg.matmul_proportion else {}),
        "mode": cfg.mode,
        "num_ipus": cfg.num_ipus,
        "pipeline_stages": cfg.num_pipeline_stages,
        "gradient_accumulation": cfg.gradient_accumulation,
    }
    if cfg.options is not None:
        doc["training"] = cfg.options.as_document()
    if cfg.layer_options:
        doc["layer_options"] = dict(cfg.layer_options)
    doc.update({
        "solver": {"name": cfg.solver, "status": cfg.solver_status, "budget_bytes": cfg.budget_bytes},
        "stages": [_stage_document(cfg, s) for s in cfg.stages],
        "layers": [_layer_row(cfg, p.name, p.ipu, p.pipeline_stage, p.backward_stage) for p in cfg.placements],
        "snippets": snippets(cfg),
    })
    return doc


def _stage_document(cfg: PipelineConfig, s: ConfigStage) -> dict[str, Any]:
    stages = list(cfg.stage_layout.ipu_stages(s.ipu))  # forward, a wrapped head, backward
    return {
        "index": s.index,
        "ipu": s.ipu,
        "pipeline_stages": _FlowList(stages),
        "layers": list(s.layers),
        "predicted": predicted_document(s),
    }


def predicted_document(s: ConfigStage) -> dict[str, Any]:
    """A stage's ``predicted`` block (the optional figures only when recorded)."""
    memory = s.memory.as_dict()
    memory["total"] = s.memory.total
    optional = {key: getattr(s, key) for key in PREDICTED_OPTIONAL}
    return {"for_layers": s.predicted_for, "memory": memory, **{key: getattr(s, key) for key in PREDICTED_FIGURES},
            **{key: value for key, value in optional.items() if value is not None}}


def _layer_row(cfg: PipelineConfig, name: str, ipu: int, fwd: int, bwd: int | None) -> _Flow:
    row = _Flow(name=name, ipu=ipu, pipelineStage=fwd)
    if cfg.training:
        row["backwardPipelineStage"] = bwd
    return row


YAML: Functions = {"PipelineConfig": write_config}
