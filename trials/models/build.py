"""One entry point from a preset name, a config object or a mapping to a ``torch.nn.Module``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trials.lazy import lazy_import
from trials.models.config import CaiTConfig, CoAtNetConfig, ModelConfig, ModelConfigError, config_from_dict
from trials.models.presets import PRESETS

# The configs and presets are torch-free (the spec layer and the CLI read them); the modules are not.
cait = lazy_import("trials.models.cait")
coatnet = lazy_import("trials.models.coatnet")
torch = lazy_import("torch")


def resolve_config(spec: str | ModelConfig | Mapping[str, Any], **overrides: Any) -> ModelConfig:
    """Turn a preset name, a config or a ``{"family": ..., ...}`` mapping into a validated config.

    A mapping may name a ``preset`` to start from; its other keys (and ``overrides``) replace
    fields of that preset.
    """
    if isinstance(spec, str):
        if spec not in PRESETS:
            raise ModelConfigError("model", f"unknown preset {spec!r}; known presets: {', '.join(PRESETS)}")
        config: ModelConfig = PRESETS[spec]
    elif isinstance(spec, (CaiTConfig, CoAtNetConfig)):
        config = spec
    elif isinstance(spec, Mapping):
        values = dict(spec)
        preset = values.pop("preset", None)
        if preset is not None:
            base = resolve_config(preset)
            family = values.pop("family", base.family)
            if family != base.family:
                raise ModelConfigError("family", f"{family!r} does not match preset {preset!r} ({base.family})")
            config = base.replace(**values)  # type: ignore[assignment]
        else:
            config = config_from_dict(values)
    else:
        raise ModelConfigError("model", f"expected a preset name, a config or a mapping; got {type(spec).__name__}")
    return config.replace(**overrides) if overrides else config  # type: ignore[return-value]


def build_model(spec: str | ModelConfig | Mapping[str, Any], **overrides: Any):
    """Build a model: ``build_model("cait_xxs24")``, ``build_model("coatnet_0", layout="CTTT")``.

    Build under ``with torch.device("meta"):`` to count parameters without allocating them.
    """
    config = resolve_config(spec, **overrides)
    if isinstance(config, CaiTConfig):
        return cait.CaiT(config)
    return coatnet.CoAtNet(config)


def count_parameters(model) -> int:
    """Number of parameters (trainable or not), counted once even when shared."""
    return sum(p.numel() for p in model.parameters())


def preset_parameter_count(spec: str | ModelConfig | Mapping[str, Any], **overrides: Any) -> int:
    """Parameter count of a model built on the meta device: no memory, no initialisation cost."""
    with torch.device("meta"):
        return count_parameters(build_model(spec, **overrides))
