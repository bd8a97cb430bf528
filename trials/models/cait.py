"""CaiT (Touvron et al. 2021), with DeiT/ViT as the configuration without class attention.

Self-attention stage: patch tokens (positional embedding on patches only) through ``depth``
pre-norm blocks with LayerScale and, optionally, talking-heads attention. Class-attention
stage: the class token attends to ``[cls, patches]`` and is the only token updated, so its
cost is linear in the number of patches. With ``cls_insert_layer`` set, the class token joins
the patch tokens earlier (DeiT: at layer 0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trials.models import residual
from trials.models.config import CaiTConfig
from trials.models.layers import Mlp, ScalarBias, drop_path, init_transformer_weights


class HeadMix(nn.Module):
    """Talking heads: a learned linear map across the head axis of (B, H, N, M) attention scores.

    One batched matmul on the contiguous (B, H, N*M) view, which avoids the two permute-copies
    that an ``nn.Linear`` over a heads-last view would need. Same parameters as that Linear.
    """

    def __init__(self, num_heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_heads, num_heads))
        self.bias = nn.Parameter(torch.zeros(num_heads))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        b, h, n, m = scores.shape
        mixed = torch.baddbmm(self.bias.view(1, h, 1), self.weight.expand(b, h, h), scores.reshape(b, h, n * m))
        return mixed.view(b, h, n, m)


class SelfAttention(nn.Module):
    """Multi-head self-attention; SDPA unless talking heads, which run ``explicit`` or ``fused``.

    Talking heads' softmax runs in the logits' own dtype (``softmax_in_input_dtype``): under bf16
    autocast the logits are bf16 and autocast would otherwise upcast the softmax to fp32, an extra
    fp32 round trip of the N^2 scores (ATen accumulates in fp32 inside the kernel either way). In
    fp32 (every CPU trial) the two are the same computation. The benchmark flips the flag per
    instance to measure the upcast path beside it.

    ``impl`` (``CaiTConfig.talking_heads_impl``) picks how talking heads are computed; both use the
    same parameters (``mix_logits``, ``mix_weights``), so weights move between them unchanged.
    ``"fused"`` (:meth:`_fused_talking_heads`) never materialises the N x N scores; ``"auto"`` is
    fused on CUDA and the explicit path elsewhere (the reference, and 1.4-1.5x faster on a
    2-core CPU at N = 196 and 576, where the fused path's H-fold matmuls are not hidden).
    """

    softmax_in_input_dtype: bool = True

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool,
        talking_heads: bool,
        scalar_bias: bool = False,
        impl: str = "explicit",
    ):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.bias_proj = ScalarBias() if scalar_bias else nn.Identity()  # Fixup: before the projection
        self.talking_heads = talking_heads
        self.impl = impl
        if talking_heads:
            self.mix_logits = HeadMix(num_heads)  # before the softmax
            self.mix_weights = HeadMix(num_heads)  # after the softmax

    def _use_fused(self, x: torch.Tensor) -> bool:
        # fvcore counts FLOPs by tracing: the explicit path there, so the count is the architecture's
        # (the cost model's), not the fused formulation's H-fold attention matmuls.
        if torch.jit.is_tracing():
            return False
        return self.impl == "fused" or (self.impl == "auto" and x.is_cuda)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        if self.talking_heads and self._use_fused(x):
            out = self._fused_talking_heads(x)
            return self.proj(self.bias_proj(out.reshape(b, n, c)))
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if self.talking_heads:
            logits = self.mix_logits((q * self.scale) @ k.transpose(-2, -1))
            dtype = logits.dtype if self.softmax_in_input_dtype else None
            weights = self.mix_weights(logits.softmax(dim=-1, dtype=dtype))
            out = weights @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(self.bias_proj(out.transpose(1, 2).reshape(b, n, c)))

    def _fused_talking_heads(self, x: torch.Tensor) -> torch.Tensor:
        """Talking heads through one SDPA call; returns (B, N, H, d), heads in the explicit order.

        With per-head queries q_g, keys k_g, values v_g (width d), W1, b1 = ``mix_logits`` and
        W2, b2 = ``mix_weights``, the explicit path computes P_h = softmax(sum_g W1[h,g] s q_g k_g^T
        + b1_h) and out_h = sum_g (W2[h,g] P_g + b2_h) v_h. Here:

        * the pre-softmax mix is one dot product of width C = H d: sum_g W1[h,g] q_g k_g^T =
          [W1[h,1] q_1, ..., W1[h,H] q_H] [k_1, ..., k_H]^T, so mixed head h is a query of width C
          against the unsplit keys K. b1_h is the same for every (i, j) of head h and cancels in the
          softmax: P_h does not depend on it (its gradient is zero in exact arithmetic, and here).
        * the post-softmax mix needs P_g against every head's values: SDPA of the mixed queries
          against (K, V) gives A_g = P_g V (N x C) for each g; out_h = sum_g W2[h,g] A_g[:, head h].
        * b2_h adds b2_h to every weight of head h; rows of ones times v_h are v_h's sum over keys.

        The H mixed heads go along SDPA's query axis (H N queries, one attention head of width C),
        so keys and values are shared without copies. The softmax is SDPA's own (fp32 accumulation
        inside the kernel, no N x N tensor in memory); the attention matmuls cost H times the
        explicit path's multiply-adds.
        """
        b, n, c = x.shape
        h, d = self.num_heads, self.head_dim
        q, k, v = self.qkv(x).view(b, n, 3, c).unbind(2)  # each (B, N, C), heads as d-wide column blocks
        w1 = self.mix_logits.weight.to(q.dtype)  # autocast does not cast an elementwise product
        mixed_q = (w1.view(1, h, 1, h, 1) * q.view(b, 1, n, h, d)).reshape(b, 1, h * n, c)
        attended = F.scaled_dot_product_attention(mixed_q, k.unsqueeze(1), v.unsqueeze(1), scale=self.scale)
        per_source = attended.view(b, h, n, h, d)  # [b, g, i, h', :] = (P_g V)[i, head h']
        out = torch.einsum("hg,bgnhd->bnhd", self.mix_weights.weight.to(per_source.dtype), per_source)
        # b1 joins the graph with a zero factor so that it has a gradient (zero, as on the explicit
        # path) rather than none: DDP without find_unused_parameters and the optimiser's weight
        # decay then treat it the same under both implementations.
        b2 = self.mix_weights.bias + 0.0 * self.mix_logits.bias
        value_sums = v.sum(dim=1).view(b, 1, h, d)
        return out + (b2.view(1, 1, h, 1) * value_sums).to(out.dtype)


class ClassAttention(nn.Module):
    """Attention with the class token as the only query; keys/values over [cls, patches]."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, scalar_bias: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.bias_proj = ScalarBias() if scalar_bias else nn.Identity()  # Fixup: before the projection

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` is normalised [cls, patches] (B, 1+N, C); returns the class update (B, 1, C)."""
        b, n, c = tokens.shape
        q = self.q(tokens[:, :1]).view(b, 1, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(tokens).view(b, n, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(self.bias_proj(out.transpose(1, 2).reshape(b, 1, c)))


class SelfAttentionBlock(nn.Module):
    """x + g1 * SA(n1(x)), then x + g2 * FFN(n2(x)), each with drop-path; the norms n, gains g
    and Fixup's scalar biases b are set by the residual scheme (trials.models.residual)."""

    def __init__(self, config: CaiTConfig, drop_path_rate: float):
        super().__init__()
        dim, fixup = config.embed_dim, config.residual_scheme == "fixup"
        self.norm1 = residual.branch_norm(config)
        self.bias1 = residual.fixup_bias(config)
        self.attn = SelfAttention(
            dim,
            config.num_heads,
            config.qkv_bias,
            config.talking_heads,
            scalar_bias=fixup,
            impl=config.talking_heads_impl,
        )
        self.ls1 = residual.branch_gain(config)
        self.norm2 = residual.branch_norm(config)
        self.bias2 = residual.fixup_bias(config)
        self.mlp = Mlp(dim, config.mlp_hidden_dim, scalar_biases=fixup)
        self.ls2 = residual.branch_gain(config)
        self.drop_path = drop_path(drop_path_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.ls1(self.attn(self.bias1(self.norm1(x)))))
        return x + self.drop_path(self.ls2(self.mlp(self.bias2(self.norm2(x)))))


class ClassAttentionBlock(nn.Module):
    """Updates only the class token; patch tokens pass through untouched. No drop-path (as in CaiT)."""

    def __init__(self, config: CaiTConfig):
        super().__init__()
        dim, fixup = config.embed_dim, config.residual_scheme == "fixup"
        self.norm1 = residual.branch_norm(config)
        self.bias1 = residual.fixup_bias(config)
        self.attn = ClassAttention(dim, config.num_heads, config.qkv_bias, scalar_bias=fixup)
        self.ls1 = residual.branch_gain(config)
        self.norm2 = residual.branch_norm(config)
        self.bias2 = residual.fixup_bias(config)
        self.mlp = Mlp(dim, config.mlp_hidden_dim, scalar_biases=fixup)
        self.ls2 = residual.branch_gain(config)

    def forward(self, cls: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
        cls = cls + self.ls1(self.attn(self.bias1(self.norm1(torch.cat((cls, patches), dim=1)))))
        return cls + self.ls2(self.mlp(self.bias2(self.norm2(cls))))


class CaiT(nn.Module):
    """CaiT / DeiT image classifier built from a :class:`CaiTConfig`."""

    def __init__(self, config: CaiTConfig):
        super().__init__()
        self.config = config
        dim = config.embed_dim
        self.patch_embed = nn.Conv2d(config.in_chans, dim, config.patch_size, stride=config.patch_size)
        self.pos_embed = nn.Parameter(torch.zeros(1, config.num_patches, dim))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.blocks = nn.ModuleList(SelfAttentionBlock(config, rate) for rate in config.block_drop_path_rates())
        self.ca_blocks = nn.ModuleList(ClassAttentionBlock(config) for _ in range(config.ca_depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, config.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(init_transformer_weights)
        residual.initialise(self, self.config)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised tokens (B, 1+N, C), class token first."""
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.pos_embed
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        insert_at = self.config.class_token_layer
        for i, block in enumerate(self.blocks):
            if i == insert_at:
                x = torch.cat((cls, x), dim=1)
            x = block(x)
        if insert_at < len(self.blocks):
            cls, x = x[:, :1], x[:, 1:]
        for block in self.ca_blocks:
            cls = block(cls, x)
        return self.norm(torch.cat((cls, x), dim=1))

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features[:, 0])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(images))
