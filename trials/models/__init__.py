"""Model families: CaiT (with DeiT as a configuration) and CoAtNet (with ViT-REL).

Importing this package does not import torch; building a model does.
"""

from trials.models.build import build_model, count_parameters, preset_parameter_count, resolve_config
from trials.models.config import (
    INIT_SCHEME_DOCS,
    INIT_SCHEMES,
    RESIDUAL_SCHEME_DOCS,
    RESIDUAL_SCHEMES,
    STANDARD_LAYOUTS,
    VIT_REL,
    CaiTConfig,
    CoAtNetConfig,
    ModelConfig,
    ModelConfigError,
    config_from_dict,
    paper_layer_scale_init,
)
from trials.models.presets import PRESETS, preset_names

__all__ = [
    "INIT_SCHEMES",
    "INIT_SCHEME_DOCS",
    "PRESETS",
    "RESIDUAL_SCHEMES",
    "RESIDUAL_SCHEME_DOCS",
    "STANDARD_LAYOUTS",
    "VIT_REL",
    "CaiTConfig",
    "CoAtNetConfig",
    "ModelConfig",
    "ModelConfigError",
    "build_model",
    "config_from_dict",
    "count_parameters",
    "paper_layer_scale_init",
    "preset_names",
    "preset_parameter_count",
    "resolve_config",
]
