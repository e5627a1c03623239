"""optimum-graphcore's ``ipu_config.json`` for a pipeline config: the document its ``IPUConfig`` loads.

The document is the config's own record (:func:`popliner.config.snippets.ipu_config`, the YAML's
optimum snippet); this module only writes it.
"""

from __future__ import annotations

from typing import IO

from popliner.config.model import PipelineConfig
from popliner.config.snippets import ipu_config
from popliner.writers.writer import FormatWriter, write_json

__all__ = ["IPU_CONFIG"]


def _write_config(cfg: PipelineConfig, stream: IO[str]) -> None:
    write_json(ipu_config(cfg), stream)


#: ``.json`` writes a pipeline config as optimum's IPU config (a split or a simulation as popliner's JSON).
IPU_CONFIG = FormatWriter("ipu_config", (".json",), {"PipelineConfig": _write_config})
