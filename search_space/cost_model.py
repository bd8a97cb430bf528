"""Closed-form cost model: exact parameter and FLOP counts of a model config, without building it.

A search proposes many configurations and most budgets (parameters, FLOPs) are hard limits, so
an over-budget configuration should be rejected before it costs a GPU (or even a model build).
This module prices a :class:`~trials.models.config.CaiTConfig` or
:class:`~trials.models.config.CoAtNetConfig` with arithmetic alone: standard library only, and
it never imports torch, so the search space can use it at import and sampling time.

The counts mirror the models in ``trials/models`` layer by layer and follow the conventions of
``trials.measurement.flops.count_flops`` (fvcore), so the two agree exactly:

* one multiply-add is one FLOP; biases, activations, residual adds, softmax, pooling and
  ``mean`` are free;
* ``linear``: tokens x in x out; ``conv``: out_channels x in_channels/groups x k x k x output pixels;
* ``layer_norm``: 5 per input element (fvcore's rough estimate with an affine transform);
  ``batch_norm`` (eval mode, affine): 2 per input element;
* attention (SDPA, the explicit matmuls of talking-heads attention): queries x keys x
  (head_dim + value_dim) per head; the talking-heads head mixing (``baddbmm``): heads^2 x
  queries x keys.

Each block type has its own function below; they all add into a :class:`_Tally`.

Beside the exact counts, the tally estimates the **activations** a training step keeps for the
backward pass: the output elements of every counted layer (a layer's input is its predecessor's
output, which autograd saves), the attention scores and their softmax, the MLP's GELU. It is an
estimate (element-wise gains, dropout masks and allocator slack are left out), used for the memory
pre-flight (:mod:`search_space.memory`), never as a measurement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trials.models.config import CaiTConfig, CoAtNetConfig

# Keys of ``Cost.flops_by_component``. "attention" holds the token-mixing products (QK^T,
# weights @ V, talking-heads mixing); the projections around them are "linear".
COMPONENTS = ("conv", "linear", "attention", "layer_norm", "batch_norm")

_LAYER_NORM_FLOPS_PER_ELEMENT = 5  # fvcore norm_flop_counter with an affine transform
_BATCH_NORM_FLOPS_PER_ELEMENT = 2  # fvcore batchnorm_flop_jit, eval mode, affine


@dataclass(frozen=True)
class Cost:
    """Size and compute of one model configuration.

    ``params`` equals ``sum(p.numel() for p in model.parameters())`` of the built model;
    ``flops`` equals ``trials.measurement.flops.count_flops(model, torch.randn(1, C, H, W)).total`` at the
    config's image size (multiply-adds for one image). ``flops_by_component`` splits ``flops``
    over :data:`COMPONENTS`.
    """

    params: int
    flops: int
    flops_by_component: dict[str, int] = field(default_factory=dict, hash=False)
    activations: int = 0  # elements per image kept for the backward pass (an estimate: see the module docstring)
    peak_activation: int = 0  # elements per image of the largest single layer output (live at once in any forward)


class _Tally:
    """Running parameter and FLOP totals, with one method per counted layer type."""

    def __init__(self) -> None:
        self.params = 0
        self.flops: Counter[str] = Counter()
        self.activations = 0
        self.peak = 0

    def _output(self, elements: int) -> None:
        """One layer's output: saved for backward, and a lower bound of any forward's live memory."""
        self.activations += elements
        self.peak = max(self.peak, elements)

    def parameter(self, numel: int) -> None:
        """A bare ``nn.Parameter`` (embeddings, class token, gains, bias tables): no FLOPs."""
        self.params += numel

    def linear(self, tokens: int, in_features: int, out_features: int, bias: bool = True) -> None:
        self.params += in_features * out_features + (out_features if bias else 0)
        self.flops["linear"] += tokens * in_features * out_features
        self._output(tokens * out_features)

    def conv(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        out_side: int,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        """A square ``nn.Conv2d`` whose (square) output map has side ``out_side``."""
        weights = out_channels * (in_channels // groups) * kernel * kernel
        self.params += weights + (out_channels if bias else 0)
        self.flops["conv"] += weights * out_side * out_side
        self._output(out_channels * out_side * out_side)

    def layer_norm(self, tokens: int, dim: int) -> None:
        self.params += 2 * dim
        self.flops["layer_norm"] += _LAYER_NORM_FLOPS_PER_ELEMENT * tokens * dim
        self._output(tokens * dim)

    def batch_norm(self, channels: int, side: int) -> None:
        self.params += 2 * channels  # running mean/var are buffers, not parameters
        self.flops["batch_norm"] += _BATCH_NORM_FLOPS_PER_ELEMENT * channels * side * side
        self._output(channels * side * side)

    def attention(self, heads: int, queries: int, keys: int, head_dim: int) -> None:
        """Scores (QK^T) plus the weighted sum of values, for every head."""
        self.flops["attention"] += heads * queries * keys * 2 * head_dim
        self._output(heads * queries * keys)  # the scores
        self.activations += heads * queries * (keys + head_dim)  # their softmax, the output

    def head_mix(self, heads: int, queries: int, keys: int) -> None:
        """Talking heads: a (heads x heads) map plus bias over the head axis of the scores."""
        self.params += heads * heads + heads
        self.flops["attention"] += heads * heads * queries * keys
        self._output(heads * queries * keys)

    def repeat(self, times: int, block: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Count ``block(*args, **kwargs)`` (one call adding one block) ``times`` times: identical blocks cost the
        same, so one is tallied and multiplied. O(1) in depth, so a spec asking for a billion
        blocks is priced (and rejected by its budget) at once instead of looping forever."""
        if times <= 0:
            return None
        params, flops, activations = self.params, Counter(self.flops), self.activations
        result = block(*args, **kwargs)
        self.params += (self.params - params) * (times - 1)
        self.activations += (self.activations - activations) * (times - 1)
        for name in COMPONENTS:
            self.flops[name] += (self.flops[name] - flops[name]) * (times - 1)
        return result

    def cost(self) -> Cost:
        by_component = {name: int(self.flops[name]) for name in COMPONENTS}
        return Cost(
            params=self.params,
            flops=sum(by_component.values()),
            flops_by_component=by_component,
            activations=self.activations,
            peak_activation=self.peak,
        )


def _conv_out(side: int, kernel: int, stride: int, padding: int) -> int:
    return (side + 2 * padding - kernel) // stride + 1


# ---------------------------------------------------------------------------------------------
# Shared pieces


def _mlp(t: _Tally, tokens: int, dim: int, hidden: int) -> None:
    """``Mlp``: Linear(dim, hidden) -> GELU -> Linear(hidden, dim)."""
    t.linear(tokens, dim, hidden)
    t.activations += tokens * hidden  # the GELU's output (its input is the first linear's)
    t.linear(tokens, hidden, dim)


def _residual_scale(t: _Tally, config: CaiTConfig) -> None:
    """A branch's gain: per-channel lambda, one scalar, or nothing (element-wise: free in FLOPs)."""
    gain = config.residual_gain()
    if gain is not None:
        t.parameter(config.embed_dim if gain[0] == "channel" else 1)


def _fixup_biases(t: _Tally, config: CaiTConfig, count: int) -> None:
    """Fixup's ``count`` scalar biases of one branch (2 for attention, 3 for the FFN)."""
    if config.residual_scheme == "fixup":
        t.parameter(count)


def _branch_norm(t: _Tally, config: CaiTConfig, tokens: int) -> None:
    """The LayerNorm a pre-norm branch starts with; none for ReZero, SkipInit, Fixup, T-Fixup."""
    if config.branch_norm:
        t.layer_norm(tokens, config.embed_dim)


# ---------------------------------------------------------------------------------------------
# CaiT / DeiT


def _cait_self_attention_block(t: _Tally, config: CaiTConfig, tokens: int) -> None:
    """Pre-norm SA block over ``tokens`` tokens (patches, plus the class token once it joined)."""
    dim, heads, head_dim = config.embed_dim, config.num_heads, config.head_dim
    _branch_norm(t, config, tokens)
    t.linear(tokens, dim, 3 * dim, bias=config.qkv_bias)
    if config.talking_heads:
        # Explicit (q * scale) @ k^T and weights @ v, with a head mix before and after the softmax.
        t.attention(heads, tokens, tokens, head_dim)
        t.head_mix(heads, tokens, tokens)
        t.head_mix(heads, tokens, tokens)
    else:
        t.attention(heads, tokens, tokens, head_dim)
    t.linear(tokens, dim, dim)
    _residual_scale(t, config)
    _fixup_biases(t, config, 2)
    _branch_norm(t, config, tokens)
    _mlp(t, tokens, dim, config.mlp_hidden_dim)
    _residual_scale(t, config)
    _fixup_biases(t, config, 3)


def _cait_class_attention_block(t: _Tally, config: CaiTConfig) -> None:
    """CA block: norm over [cls, patches], the class token is the only query and the only token updated."""
    dim, tokens = config.embed_dim, 1 + config.num_patches
    _branch_norm(t, config, tokens)
    t.linear(1, dim, dim, bias=config.qkv_bias)  # q from the class token
    t.linear(tokens, dim, 2 * dim, bias=config.qkv_bias)  # k, v from [cls, patches]
    t.attention(config.num_heads, 1, tokens, config.head_dim)
    t.linear(1, dim, dim)
    _residual_scale(t, config)
    _fixup_biases(t, config, 2)
    _branch_norm(t, config, 1)
    _mlp(t, 1, dim, config.mlp_hidden_dim)
    _residual_scale(t, config)
    _fixup_biases(t, config, 3)


def _cait_cost(config: CaiTConfig) -> Cost:
    t = _Tally()
    dim, patches = config.embed_dim, config.num_patches
    t.conv(config.in_chans, dim, config.patch_size, config.image_size // config.patch_size)
    t.parameter(patches * dim)  # positional embedding (patches only)
    t.parameter(dim)  # class token
    before_cls = min(config.depth, max(config.class_token_layer, 0))  # blocks before the class token joins
    t.repeat(before_cls, _cait_self_attention_block, t, config, patches)
    t.repeat(config.depth - before_cls, _cait_self_attention_block, t, config, patches + 1)
    t.repeat(config.ca_depth, _cait_class_attention_block, t, config)
    t.layer_norm(1 + patches, dim)  # final norm over all tokens, although the head reads only cls
    t.linear(1, dim, config.num_classes)
    return t.cost()


# ---------------------------------------------------------------------------------------------
# CoAtNet / ViT-REL


def _coatnet_conv_stem(t: _Tally, in_chans: int, dim: int, depth: int, image_size: int) -> int:
    """S0: stride-2 3x3 conv, then ``depth - 1`` x (BN, GELU, 3x3 conv); returns the output side."""
    side = _conv_out(image_size, 3, 2, 1)
    t.conv(in_chans, dim, 3, side, bias=False)
    for _ in range(depth - 1):
        t.batch_norm(dim, side)
        t.activations += dim * side * side  # the GELU's output
        t.conv(dim, dim, 3, side, bias=False)
    return side


def _squeeze_excite(t: _Tally, channels: int, reduced: int) -> None:
    """SE on a globally averaged (1x1) map: two 1x1 convs with bias; the mean is free."""
    t.conv(channels, reduced, 1, 1)
    t.conv(reduced, channels, 1, 1)


def _coatnet_mbconv_block(t: _Tally, config: CoAtNetConfig, in_dim: int, dim: int, side: int, stride: int) -> int:
    """Pre-norm MBConv (BN -> 1x1 expand -> BN -> 3x3 depthwise -> BN -> SE -> 1x1 project) plus
    the shortcut (max pool when strided, 1x1 conv when the width changes); returns the output side."""
    hidden = dim * config.expansion
    expand_stride = stride if config.mbconv_downsample == "expand" else 1
    depthwise_stride = stride if config.mbconv_downsample == "depthwise" else 1
    expand_side = _conv_out(side, 1, expand_stride, 0)
    out_side = _conv_out(expand_side, 3, depthwise_stride, 1)
    shortcut_side = side // 2 if stride == 2 else side  # MaxPool2d(2)
    if in_dim != dim:
        t.conv(in_dim, dim, 1, shortcut_side)
    t.batch_norm(in_dim, side)
    t.conv(in_dim, hidden, 1, expand_side, bias=False)
    t.batch_norm(hidden, expand_side)
    t.activations += hidden * expand_side * expand_side  # the GELU's output
    t.conv(hidden, hidden, 3, out_side, groups=hidden, bias=False)
    t.batch_norm(hidden, out_side)
    t.activations += hidden * out_side * out_side  # the GELU's output
    if config.se_ratio > 0:
        _squeeze_excite(t, hidden, max(1, round(dim * config.se_ratio)))
        t.activations += 2 * hidden * out_side * out_side  # the gate's sigmoid, broadcast, and the gated map
    t.conv(hidden, dim, 1, out_side)
    return out_side


def _coatnet_transformer_block(
    t: _Tally, config: CoAtNetConfig, in_dim: int, dim: int, in_side: int, downsample: bool
) -> int:
    """Pre-norm relative-attention block; LN before the (optional) stride-2 max pool, so it sees
    the full-resolution tokens. Returns the output side."""
    side = in_side // 2 if downsample else in_side
    tokens, heads = side * side, dim // config.head_size
    t.layer_norm(in_side * in_side, in_dim)
    t.linear(tokens, in_dim, 3 * dim)
    t.parameter(heads * (2 * side - 1) ** 2)  # relative position bias table
    t.attention(heads, tokens, tokens, config.head_size)  # the bias is added inside SDPA: free
    t.linear(tokens, dim, dim)
    if in_dim != dim:
        t.linear(tokens, in_dim, dim)  # shortcut projection
    t.layer_norm(tokens, dim)
    _mlp(t, tokens, dim, round(dim * config.mlp_ratio))
    return side


def _coatnet_head(t: _Tally, config: CoAtNetConfig, dim: int) -> None:
    """Global average pool (free), LayerNorm, optional Linear+Tanh pre-logits, classifier."""
    t.layer_norm(1, dim)
    if config.head_hidden_dim:
        t.linear(1, dim, config.head_hidden_dim)
        dim = config.head_hidden_dim
    t.linear(1, dim, config.num_classes)


def _coatnet_cost(config: CoAtNetConfig) -> Cost:
    t = _Tally()
    if config.is_vit_rel:
        width, patch = config.dims[3], config.vit_patch_size
        side = _conv_out(config.image_size, patch, patch, 0)
        t.conv(config.in_chans, width, patch, side)
        t.repeat(
            config.num_blocks(), lambda: _coatnet_transformer_block(t, config, width, width, side, downsample=False)
        )
        _coatnet_head(t, config, width)
        return t.cost()
    side = _coatnet_conv_stem(t, config.in_chans, config.dims[0], config.depths[0], config.image_size)
    for stage, kind in enumerate(config.layout, start=1):
        dim = config.dims[stage]
        if config.depths[stage] == 0:
            continue
        in_dim = config.dims[stage - 1]
        # The first block of a stage downsamples (and changes the width); the others are identical.
        if kind == "C":
            side = _coatnet_mbconv_block(t, config, in_dim, dim, side, stride=2)
            t.repeat(config.depths[stage] - 1, _coatnet_mbconv_block, t, config, dim, dim, side, stride=1)
        else:
            side = _coatnet_transformer_block(t, config, in_dim, dim, side, downsample=True)
            t.repeat(config.depths[stage] - 1, _coatnet_transformer_block, t, config, dim, dim, side, downsample=False)
    _coatnet_head(t, config, config.dims[4])
    return t.cost()


# ---------------------------------------------------------------------------------------------
# Public API


def estimate_cost(config: CaiTConfig | CoAtNetConfig) -> Cost:
    """Exact parameter count and fvcore FLOP count (one image) of the model ``config`` describes.

    Pure arithmetic (microseconds, no torch), so a search can reject configurations over a
    parameter or FLOP budget before building, let alone training, them on a GPU.
    """
    if isinstance(config, CaiTConfig):
        return _cait_cost(config)
    if isinstance(config, CoAtNetConfig):
        return _coatnet_cost(config)
    raise TypeError(f"expected a CaiTConfig or CoAtNetConfig, got {type(config).__name__}")


def estimate_params(config: CaiTConfig | CoAtNetConfig) -> int:
    """Exact number of parameters of the built model (what ``count_parameters`` returns)."""
    return estimate_cost(config).params


def estimate_flops(config: CaiTConfig | CoAtNetConfig, batch_size: int = 1) -> int:
    """Multiply-adds of one forward pass over ``batch_size`` images at ``config.image_size``.

    Every counted op scales linearly with the batch, so this is ``batch_size`` times the
    one-image count (what ``trials.measurement.flops.count_flops`` reports for that batch).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size * estimate_cost(config).flops


__all__ = ["COMPONENTS", "Cost", "estimate_cost", "estimate_flops", "estimate_params"]
