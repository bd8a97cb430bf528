"""Named model presets: the papers' models at 224x224, and small 32x32 models that train on a CPU.

Presets carry the architecture only; training hyper-parameters such as the stochastic-depth
rate of a recipe are overrides (``build_model("coatnet_0", drop_path_rate=0.2)``).
"""

from __future__ import annotations

from trials.models.config import CaiTConfig, CoAtNetConfig, ModelConfig


def _cait(dim: int, depth: int, heads: int, layer_scale: float) -> CaiTConfig:
    # The official models' LayerScale inits (XXS-36 keeps 1e-5; the paper's rule would give 1e-6).
    return CaiTConfig(embed_dim=dim, depth=depth, num_heads=heads, ca_depth=2, layer_scale=layer_scale)


def _coatnet(depths: tuple[int, ...], dims: tuple[int, ...]) -> CoAtNetConfig:
    # Pre-logits hidden layer of the final width, as in the official CoAtNet/MaxViT code and timm.
    return CoAtNetConfig(layout="CCTT", depths=depths, dims=dims, head_hidden_dim=dims[-1])


_TINY = {"image_size": 32, "num_classes": 10}

PRESETS: dict[str, ModelConfig] = {
    # CaiT paper, Table 1 / official code (patch 16, MLP ratio 4, 2 class-attention layers).
    "cait_xxs24": _cait(192, 24, 4, 1e-5),
    "cait_xxs36": _cait(192, 36, 4, 1e-5),
    "cait_xs24": _cait(288, 24, 6, 1e-5),
    "cait_s24": _cait(384, 24, 8, 1e-5),
    "cait_s36": _cait(384, 36, 8, 1e-6),
    "cait_m24": _cait(768, 24, 16, 1e-5),
    "cait_m36": _cait(768, 36, 16, 1e-6),
    # DeiT-S as a CaiT configuration: class token from layer 0, no class attention, no LayerScale.
    "deit_s": CaiTConfig(
        embed_dim=384,
        depth=12,
        num_heads=6,
        ca_depth=0,
        cls_insert_layer=0,
        layer_scale="off",
        talking_heads=False,
    ),
    # CoAtNet paper, Table 3 (blocks / channels of S0..S4), layout C-C-T-T.
    "coatnet_0": _coatnet((2, 2, 3, 5, 2), (64, 96, 192, 384, 768)),
    "coatnet_1": _coatnet((2, 2, 6, 14, 2), (64, 96, 192, 384, 768)),
    "coatnet_2": _coatnet((2, 2, 6, 14, 2), (128, 128, 256, 512, 1024)),
    "coatnet_3": _coatnet((2, 2, 6, 14, 2), (192, 192, 384, 768, 1536)),
    "coatnet_4": _coatnet((2, 2, 12, 28, 2), (192, 192, 384, 768, 1536)),
    # Small 32x32 models for CPU tests and the default demo (10 classes).
    "cait_tiny32": CaiTConfig(
        **_TINY, patch_size=4, embed_dim=96, depth=6, num_heads=3, ca_depth=2, layer_scale="paper"
    ),
    "deit_tiny32": CaiTConfig(
        **_TINY,
        patch_size=4,
        embed_dim=96,
        depth=8,
        num_heads=3,
        ca_depth=0,
        cls_insert_layer=0,
        layer_scale="off",
        talking_heads=False,
    ),
    "coatnet_tiny32": CoAtNetConfig(
        **_TINY, layout="CCTT", depths=(2, 1, 2, 2, 1), dims=(32, 32, 64, 128, 192), head_size=32
    ),
}


def preset_names(family: str | None = None) -> list[str]:
    return [name for name, cfg in PRESETS.items() if family is None or cfg.family == family]
