"""optimum-graphcore's ``ipu_config.json`` for a pipeline config: the document its ``IPUConfig`` loads.

The document is the config's own record (:func:`popliner.config.snippets.ipu_config`, the YAML's
optimum snippet); this module only writes it.
"""

from __future__ import annotations

from popliner.config.snippets import ipu_config
from popliner.writers.writer import Functions, json_of

__all__ = ["IPU_CONFIG"]


#: ``.json`` writes a pipeline config as optimum's IPU config (a split or a simulation as popliner's JSON).
IPU_CONFIG: Functions = {"PipelineConfig": json_of(ipu_config)}
