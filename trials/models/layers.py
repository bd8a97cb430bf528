"""Building blocks shared by the model families: FFN, residual scaling, stochastic depth, init."""

from __future__ import annotations

import torch
from torch import nn

from trials.lazy import lazy_import

torchvision_ops = lazy_import("torchvision.ops")  # only for a drop-path rate > 0 (see drop_path)


class Mlp(nn.Module):
    """Transformer FFN: Linear -> GELU -> Linear."""

    def __init__(self, dim: int, hidden_dim: int, out_dim: int | None = None):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, out_dim or dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class LayerScale(nn.Module):
    """Learned gain on a residual branch: ``diag(gamma) * branch`` (CaiT), or a scalar (ReZero).

    Per-channel: ``gamma`` has one entry per channel, initialised to ``init`` (CaiT's eps).
    Scalar: a single gain initialised to ``init`` (0 for ReZero), so the block starts as identity.
    """

    def __init__(self, dim: int, init: float, per_channel: bool = True):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim if per_channel else 1,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def residual_scale(dim: int, layer_scale_init: float | None, rezero: bool) -> nn.Module:
    """The module that scales a residual branch for a given LayerScale setting."""
    if rezero:
        return LayerScale(dim, 0.0, per_channel=False)
    if layer_scale_init is None:
        return nn.Identity()
    return LayerScale(dim, layer_scale_init, per_channel=True)


def drop_path(rate: float) -> nn.Module:
    """Stochastic depth on a residual branch (per sample), or Identity when ``rate`` is 0.

    torchvision is imported only when a rate is set: inference and cost measurement of our
    models stay on torch alone.
    """
    if rate <= 0.0:
        return nn.Identity()
    return torchvision_ops.StochasticDepth(rate, mode="row")


def init_transformer_weights(module: nn.Module) -> None:
    """ViT/CaiT initialisation: truncated normal (std 0.02) linears, unit LayerNorms."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
