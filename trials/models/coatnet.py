"""CoAtNet (Dai et al. 2021): MBConv and relative-attention stages in a C-C-T-T style layout.

S0 is a convolution stem at stride 2; S1..S4 each halve the resolution in their first block,
separately on the two branches as in the paper:

* C (MBConv): ``x <- Proj(Pool(x)) + MBConv(BN(x))``, the stride inside the branch;
* T (Transformer): ``x <- Proj(Pool(x)) + Attn(Pool(LN(x)))``, then a pre-norm FFN.

Pool is a stride-2 max pool. Transformer stages work on (B, H*W, C) token tensors, convolution
stages on (B, C, H, W) maps; the switch happens once, at the first T stage.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trials.models.config import DEFAULT_INIT, CoAtNetConfig
from trials.models.layers import Mlp, drop_path, init_linears, init_transformer_weights


def _max_pool_tokens(x: torch.Tensor, side: int) -> torch.Tensor:
    """Stride-2 max pool on a (B, side*side, C) token tensor."""
    b, _, c = x.shape
    grid = x.transpose(1, 2).reshape(b, c, side, side)
    return F.max_pool2d(grid, 2).flatten(2).transpose(1, 2)


def relative_position_index(side: int) -> torch.Tensor:
    """(N, N) index into a (2*side-1)^2 table of 2-D relative offsets, N = side*side."""
    coords = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (side - 1)
    return rel[..., 0] * (2 * side - 1) + rel[..., 1]


class SqueezeExcite(nn.Module):
    def __init__(self, dim: int, reduced: int):
        super().__init__()
        self.fc1 = nn.Conv2d(dim, reduced, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(reduced, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.fc2(self.act(self.fc1(x.mean((2, 3), keepdim=True)))).sigmoid()


class MBConvBlock(nn.Module):
    """Pre-norm inverted bottleneck: BN -> 1x1 expand -> 3x3 depthwise -> SE -> 1x1 project."""

    def __init__(self, config: CoAtNetConfig, in_dim: int, dim: int, stride: int, drop_path_rate: float):
        super().__init__()
        hidden = dim * config.expansion
        stride_in_expand = stride if config.mbconv_downsample == "expand" else 1
        stride_in_depthwise = stride if config.mbconv_downsample == "depthwise" else 1
        shortcut: list[nn.Module] = [nn.MaxPool2d(2)] if stride == 2 else []
        if in_dim != dim:
            shortcut.append(nn.Conv2d(in_dim, dim, 1))
        self.shortcut = nn.Sequential(*shortcut) if shortcut else nn.Identity()
        self.pre_norm = nn.BatchNorm2d(in_dim)
        self.expand = nn.Conv2d(in_dim, hidden, 1, stride=stride_in_expand, bias=False)
        self.norm1 = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, stride=stride_in_depthwise, padding=1, groups=hidden, bias=False)
        self.norm2 = nn.BatchNorm2d(hidden)
        self.act = nn.GELU()
        reduced = max(1, round(dim * config.se_ratio))
        self.se = SqueezeExcite(hidden, reduced) if config.se_ratio > 0 else nn.Identity()
        self.project = nn.Conv2d(hidden, dim, 1)
        self.drop_path = drop_path(drop_path_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.norm1(self.expand(self.pre_norm(x))))
        y = self.se(self.act(self.norm2(self.depthwise(y))))
        return self.shortcut(x) + self.drop_path(self.project(y))


class RelativeAttention(nn.Module):
    """Multi-head attention with a learned bias per head per 2-D relative offset.

    The bias table is (heads, (2*side-1)^2), sized from the stage's actual resolution, and is
    added to the logits inside SDPA as a float attention mask.
    """

    def __init__(self, in_dim: int, dim: int, head_size: int, side: int):
        super().__init__()
        self.num_heads = dim // head_size
        self.head_size = head_size
        self.qkv = nn.Linear(in_dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.relative_bias = nn.Parameter(torch.zeros(self.num_heads, (2 * side - 1) ** 2))
        self.register_buffer("relative_index", relative_position_index(side), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self.relative_bias[:, self.relative_index].unsqueeze(0).to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.proj(out.transpose(1, 2).reshape(b, n, -1))


class TransformerBlock(nn.Module):
    """Pre-norm relative-attention block on (B, side*side, C) tokens; optionally downsamples by 2."""

    def __init__(
        self,
        config: CoAtNetConfig,
        in_dim: int,
        dim: int,
        in_side: int,
        downsample: bool,
        drop_path_rate: float,
    ):
        super().__init__()
        self.in_side = in_side
        self.downsample = downsample
        side = in_side // 2 if downsample else in_side
        self.norm1 = nn.LayerNorm(in_dim)
        self.attn = RelativeAttention(in_dim, dim, config.head_size, side)
        self.shortcut_proj = nn.Linear(in_dim, dim) if in_dim != dim else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, round(dim * config.mlp_ratio))
        self.drop_path = drop_path(drop_path_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        if self.downsample:
            x, y = _max_pool_tokens(x, self.in_side), _max_pool_tokens(y, self.in_side)
        x = self.shortcut_proj(x) + self.drop_path(self.attn(y))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ConvStem(nn.Module):
    """S0: a stride-2 3x3 convolution, then ``depth - 1`` BN-GELU-3x3 convolutions."""

    def __init__(self, in_chans: int, dim: int, depth: int):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_chans, dim, 3, stride=2, padding=1, bias=False)]
        for _ in range(depth - 1):
            layers += [nn.BatchNorm2d(dim), nn.GELU(), nn.Conv2d(dim, dim, 3, padding=1, bias=False)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class CoAtNet(nn.Module):
    """CoAtNet (or the VIT-REL baseline) built from a :class:`CoAtNetConfig`."""

    def __init__(self, config: CoAtNetConfig):
        super().__init__()
        self.config = config
        rates = iter(config.block_drop_path_rates())
        if config.is_vit_rel:
            width, side = config.dims[3], config.stage_resolutions()[0]
            p = config.vit_patch_size
            self.stem: nn.Module = nn.Conv2d(config.in_chans, width, p, stride=p)
            self.conv_stages = nn.Sequential()
            self.transformer_blocks = nn.Sequential(
                *(
                    TransformerBlock(config, width, width, side, downsample=False, drop_path_rate=next(rates))
                    for _ in range(config.num_blocks())
                )
            )
        else:
            self.stem = ConvStem(config.in_chans, config.dims[0], config.depths[0])
            conv_blocks: list[nn.Module] = []
            attn_blocks: list[nn.Module] = []
            side = config.image_size // 2
            for stage, kind in enumerate(config.layout, start=1):
                for i in range(config.depths[stage]):
                    in_dim = config.dims[stage - 1] if i == 0 else config.dims[stage]
                    dim = config.dims[stage]
                    if kind == "C":
                        conv_blocks.append(MBConvBlock(config, in_dim, dim, 2 if i == 0 else 1, next(rates)))
                    else:
                        attn_blocks.append(TransformerBlock(config, in_dim, dim, side, i == 0, next(rates)))
                    if i == 0:
                        side //= 2
            self.conv_stages = nn.Sequential(*conv_blocks)
            self.transformer_blocks = nn.Sequential(*attn_blocks)
        final_dim = config.dims[3] if config.is_vit_rel else config.dims[4]
        self.norm = nn.LayerNorm(final_dim)
        if config.head_hidden_dim:
            self.pre_logits: nn.Module = nn.Sequential(nn.Linear(final_dim, config.head_hidden_dim), nn.Tanh())
            final_dim = config.head_hidden_dim
        else:
            self.pre_logits = nn.Identity()
        self.head = nn.Linear(final_dim, config.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, RelativeAttention):
                nn.init.trunc_normal_(module.relative_bias, std=0.02)
        self.apply(init_transformer_weights)
        if self.config.init_scheme != DEFAULT_INIT:  # the default draws nothing more: models as they were
            for block in self.transformer_blocks:
                init_linears(block, self.config.init_scheme, fused={block.attn.qkv: 3})

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """Pooled, normalised features (B, C)."""
        x = self.conv_stages(self.stem(images))
        if len(self.transformer_blocks):
            x = self.transformer_blocks(x.flatten(2).transpose(1, 2)).mean(1)
        else:
            x = x.mean((2, 3))
        return self.norm(x)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(self.pre_logits(features))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(images))
