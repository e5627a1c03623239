"""optimum-graphcore's ``ipu_config.json`` for a pipeline config: the document its ``IPUConfig`` loads.

The document is the config's own record (:func:`popliner.config.snippets.ipu_config`, the YAML's
optimum snippet); this module only writes it.
"""

from __future__ import annotations

import json
from typing import IO, Any

from popliner.config.model import PipelineConfig
from popliner.config.snippets import ipu_config
from popliner.writers.writer import FormatWriter

__all__ = ["IPU_CONFIG", "write_ipu_config"]


def write_ipu_config(document: dict[str, Any], stream: Any) -> None:
    """``ipu_config.json`` text: indented, keys in a fixed order, a final newline."""
    json.dump(document, stream, indent=2, allow_nan=False)
    stream.write("\n")


def _write_config(cfg: PipelineConfig, stream: IO[str]) -> None:
    write_ipu_config(ipu_config(cfg), stream)


#: ``.json`` writes a pipeline config as optimum's IPU config (a split or a simulation as popliner's JSON).
IPU_CONFIG = FormatWriter("ipu_config", (".json",), {"PipelineConfig": _write_config})
