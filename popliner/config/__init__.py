"""Pipeline configs: the YAML file that places each layer on an IPU and pipeline stage."""

from popliner.config.model import (
    CONFIG_VERSION,
    ConfigStage,
    LayerPlacement,
    PipelineConfig,
    backward_stage,
    config_from_split,
    default_gradient_accumulation,
    forward_stage,
    num_pipeline_stages,
)
from popliner.config.yaml_io import parse_config, read_config, write_config

__all__ = [
    "CONFIG_VERSION",
    "ConfigStage",
    "LayerPlacement",
    "PipelineConfig",
    "backward_stage",
    "config_from_split",
    "default_gradient_accumulation",
    "forward_stage",
    "num_pipeline_stages",
    "parse_config",
    "read_config",
    "write_config",
]
