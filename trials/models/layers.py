"""Building blocks shared by the model families: FFN, residual scaling, stochastic depth, init."""

from __future__ import annotations

import torch
from torch import nn


class Mlp(nn.Module):
    """Transformer FFN: Linear -> GELU -> Linear.

    ``scalar_biases``: Fixup's scalar biases before the activation and before the second linear
    (the one before the first linear belongs to the branch, see trials.models.residual).
    """

    def __init__(self, dim: int, hidden_dim: int, out_dim: int | None = None, scalar_biases: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, out_dim or dim)
        self.bias_act = ScalarBias() if scalar_biases else nn.Identity()
        self.bias_fc2 = ScalarBias() if scalar_biases else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.bias_fc2(self.act(self.bias_act(self.fc1(x)))))


class ScalarBias(nn.Module):
    """Fixup's scalar bias: one learned number added to every element, initialised to 0."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


class LayerScale(nn.Module):
    """Learned gain on a residual branch: ``diag(gamma) * branch`` (CaiT), or a scalar.

    Per-channel: ``gamma`` has one entry per channel, initialised to ``init`` (CaiT's eps).
    Scalar: a single gain initialised to ``init`` (0 for ReZero and SkipInit, 1 for Fixup's
    multiplier, eps for CaiT Table 1's alpha = eps).
    """

    def __init__(self, dim: int, init: float, per_channel: bool = True):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim if per_channel else 1,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class DropPath(nn.Module):
    """Stochastic depth (Huang et al. 2016): in training, drop the whole branch of a sample with
    probability ``rate`` and scale the kept ones by ``1 / (1 - rate)``; the identity in eval.

    Our own few lines rather than torchvision's ``StochasticDepth``: importing ``torchvision.ops``
    imports ``torch._dynamo`` (about 3 s per Ray worker, on every search's first trial per worker).
    """

    def __init__(self, rate: float):
        super().__init__()
        self.rate = float(rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        if keep > 0.0:
            mask.div_(keep)
        return x * mask

    def extra_repr(self) -> str:
        return f"rate={self.rate}"


def drop_path(rate: float) -> nn.Module:
    """Stochastic depth on a residual branch (per sample), or Identity when ``rate`` is 0."""
    if rate <= 0.0:
        return nn.Identity()
    return DropPath(rate)


def init_weight(weight: torch.Tensor, scheme: str) -> None:
    """Draw one weight matrix (or a row block of a fused one: a view) by the model's ``init`` scheme
    (``INIT_SCHEME_DOCS`` in trials/models/config.py), on its own fans (rows: fan_out, columns: fan_in).

    ``trunc_normal``: std 0.02 (ViT/CaiT); ``xavier``: uniform on +-sqrt(6 / (fan_in + fan_out)), std
    sqrt(2 / (fan_in + fan_out)); ``scaled``: normal with std 1/sqrt(fan_in).
    """
    with torch.no_grad():
        if scheme == "trunc_normal":
            nn.init.trunc_normal_(weight, std=0.02)
        elif scheme == "xavier":
            nn.init.xavier_uniform_(weight)
        elif scheme == "scaled":
            nn.init.normal_(weight, std=weight.shape[1] ** -0.5)
        else:
            raise ValueError(f"unknown init scheme {scheme!r}")


def init_linears(module: nn.Module, scheme: str, fused: dict[nn.Linear, int] | None = None) -> None:
    """Every ``nn.Linear`` weight under ``module`` drawn again by ``scheme`` (module order; biases kept).

    ``fused``: a linear that stacks k projections (attention's qkv: 3) -> k, each row block drawn on its
    own fans, as separate projections would be (a fused 3d x d matrix's fan-out would shrink Xavier's
    std from d^-1/2 to (2d)^-1/2).
    """
    fused = fused or {}
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            for block in layer.weight.chunk(fused.get(layer, 1), dim=0):
                init_weight(block, scheme)


def init_transformer_weights(module: nn.Module) -> None:
    """ViT/CaiT initialisation: truncated normal (std 0.02) linears, unit LayerNorms."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
