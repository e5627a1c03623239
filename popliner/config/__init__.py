"""Pipeline configs: the YAML file that places each layer on an IPU and pipeline stage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from popliner.config.model import (
    CONFIG_VERSION,
    ConfigStage,
    LayerPlacement,
    PipelineConfig,
    config_from_split,
    default_gradient_accumulation,
)

if TYPE_CHECKING:
    from popliner.config.yaml_io import parse_config, read_config

__all__ = [
    "CONFIG_VERSION",
    "ConfigStage",
    "LayerPlacement",
    "PipelineConfig",
    "config_from_split",
    "default_gradient_accumulation",
    "parse_config",
    "read_config",
]


def __getattr__(name: str) -> Any:
    # The YAML reader (and PyYAML) is imported on first use: the analyse path reads
    # config.options and config.model, never a YAML file. The writer is popliner.writers.pipeline_yaml.
    if name in ("parse_config", "read_config"):
        from popliner.config import yaml_io

        return getattr(yaml_io, name)
    raise AttributeError(f"module 'popliner.config' has no attribute {name!r}")
