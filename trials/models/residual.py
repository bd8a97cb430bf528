"""Residual schemes of CaiT's Table 1: how a transformer block's branches are normalised, gated
and initialised so that deep stacks train.

Each scheme, with the equations of its own paper, for a block with branches F (attention) and
G (FFN):

* ``prenorm`` (DeiT; Touvron et al. 2021): x' = x + F(LN(x)), x'' = x' + G(LN(x')).
* ``layerscale`` (CaiT; Touvron et al. 2021, eq. 3): x' = x + diag(lambda) F(LN(x)),
  lambda in R^d initialised to eps (0.1 up to depth 18, 1e-5 at 24, 1e-6 deeper).
* ``scalar`` (CaiT Table 1's "alpha = eps" column): x' = x + alpha F(LN(x)), one scalar alpha
  per branch initialised to eps, LayerNorm kept.
* ``rezero`` (Bachlechner et al. 2020, eq. 5): x' = x + alpha F(x), no LayerNorm, alpha = 0 at
  initialisation, so every block is the identity at step 0.
* ``skipinit`` (De & Smith 2020, section 4): x' = x + alpha F(x), normalisation removed, alpha
  initialised to 0 "or a small constant" (eps when ``layer_scale`` is a float). On transformer
  blocks at alpha = 0 it is the same network as ReZero; the papers differ in the normalisation
  they remove (BatchNorm for SkipInit's ResNets, LayerNorm for ReZero).
* ``fixup`` (Zhang et al. 2019, section 3, rules 1-3): no normalisation; the classification
  layer and the last layer of each residual branch initialised to 0; the other layers inside
  the branches scaled by L^(-1/(2m-2)) (L residual branches, m = 2 weight layers per branch here,
  so L^(-1/2)); a scalar multiplier (init 1) per branch and a scalar bias (init 0) before each
  linear layer and activation. Every branch outputs 0 at step 0. Fixup's rule is about the
  weight layers the signal passes through in series on a branch (its m): in attention those are
  the value and output projections; the query and key projections only set the mixing weights
  (the softmax), so they are not scaled (scaling both by L^-1/2 would divide every attention
  logit by L, 24 at depth 12, and flatten attention to a uniform average).
* ``t-fixup`` (Huang et al. 2020, section 3.3, encoder rules): no LayerNorm (and no warm-up
  needed: set ``warmup_epochs: 0`` in training); Xavier initialisation of every weight matrix of
  the encoder, each of the query, key and value projections as its own d x d matrix (as the paper's
  separate projections are, not the fused 3d x d one, whose fan-out would shrink V's std from
  d^-1/2 to (2d)^-1/2); the classification head is not the paper's (a translation model has
  none) and keeps the baseline's initialisation, as in every other scheme;
  the input embeddings drawn from N(0, d^-1/2) and scaled by (9N)^(-1/4); in each of the N
  encoder blocks the attention's value and output projections and both FFN matrices scaled by
  0.67 N^(-1/4). Here the embeddings are the positional embedding and the class token (the
  patch projection is a convolution over pixels, not a lookup table, and keeps its init).
  T-Fixup's Xavier is the model option ``init: xavier`` (:func:`init_encoder`, the same draws in the
  same order): a T-Fixup model's ``init_scheme`` is ``"xavier"`` and it refuses any other ``init``.

Every scheme starts from the model's ``init`` (``CaiTConfig.init_scheme``: truncated normal std 0.02
unless set, Xavier or 1/sqrt(fan_in) on each block's linear layers, :func:`init_encoder`); the
scheme's own rules above apply on top of it.

:class:`~trials.models.cait.CaiT` builds the branch modules below and calls :func:`initialise`.
"""

from __future__ import annotations

import torch
from torch import nn

from trials.models.config import DEFAULT_INIT, CaiTConfig
from trials.models.layers import LayerScale, ScalarBias, init_weight


def branch_norm(config: CaiTConfig) -> nn.Module:
    """The LayerNorm a residual branch starts with, or none (ReZero, SkipInit, Fixup, T-Fixup)."""
    return nn.LayerNorm(config.embed_dim, eps=1e-6) if config.branch_norm else nn.Identity()


def branch_gain(config: CaiTConfig) -> nn.Module:
    """What a residual branch ends with: per-channel lambda, one scalar alpha, or nothing."""
    gain = config.residual_gain()
    if gain is None:
        return nn.Identity()
    kind, init = gain
    return LayerScale(config.embed_dim, init, per_channel=kind == "channel")


def fixup_bias(config: CaiTConfig) -> nn.Module:
    """A scalar bias where Fixup puts one (before each linear layer and activation), else nothing."""
    return ScalarBias() if config.residual_scheme == "fixup" else nn.Identity()


def initialise(model: nn.Module, config: CaiTConfig) -> None:
    """Apply the model's ``init`` and then the scheme's rules on top of the ViT initialisation
    (truncated normal 0.02, zero biases); the default ``init`` draws nothing more, so a model without
    the option is the model it always was, bit for bit."""
    if config.residual_scheme == "t-fixup":
        _t_fixup(model, config)  # its Xavier is init_encoder(..., "xavier"), config.init_scheme
        return
    if config.init_scheme != DEFAULT_INIT:
        init_encoder(model, config, config.init_scheme)
    if config.residual_scheme == "fixup":
        _fixup(model, config)


def _blocks(model: nn.Module) -> list[nn.Module]:
    return [*model.blocks, *model.ca_blocks]


def _value_rows(attention: nn.Module, dim: int) -> torch.Tensor:
    """The value projection's weight: rows [2d, 3d) of the fused qkv, rows [d, 2d) of class attention's kv."""
    if hasattr(attention, "qkv"):
        return attention.qkv.weight[2 * dim :]
    return attention.kv.weight[dim:]


def _projections(attention: nn.Module, dim: int) -> list[torch.Tensor]:
    """Each d x d projection (query, key, value) of an attention layer, as views of its fused weights."""
    if hasattr(attention, "qkv"):
        return [attention.qkv.weight[i * dim : (i + 1) * dim] for i in range(3)]
    return [attention.q.weight, attention.kv.weight[:dim], attention.kv.weight[dim:]]


@torch.no_grad()
def init_encoder(model: nn.Module, config: CaiTConfig, scheme: str) -> None:
    """Every linear layer of the self- and class-attention blocks drawn by ``scheme`` (biases kept at 0),
    each of the query, key and value projections on its own d x d fans (not the fused matrix's). The
    patch projection, embeddings, talking-heads mixes and the head keep the base initialisation.

    The order of the draws is T-Fixup's as it always ran (so its models, and the committed runs, are
    unchanged bit for bit): per block, the unfused linear layers in module order, then each
    projection; class attention's query is an unfused layer and a projection both, so it is drawn
    twice and the second draw stays (the same distribution either way)."""
    dim = config.embed_dim
    for block in _blocks(model):
        fused = {id(getattr(block.attn, name, None)) for name in ("qkv", "kv")}
        for module in block.modules():
            if isinstance(module, nn.Linear) and id(module) not in fused:
                init_weight(module.weight, scheme)
        for projection in _projections(block.attn, dim):  # each d x d projection on its own fans
            init_weight(projection, scheme)


@torch.no_grad()
def _fixup(model: nn.Module, config: CaiTConfig) -> None:
    scale = fixup_branch_scale(config)
    for block in _blocks(model):
        attention = block.attn
        _value_rows(attention, config.embed_dim).mul_(scale)  # the attention branch's first layer in series
        block.mlp.fc1.weight.mul_(scale)
        for last in (attention.proj, block.mlp.fc2):  # each branch's last layer: 0
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
    nn.init.zeros_(model.head.weight)
    nn.init.zeros_(model.head.bias)


@torch.no_grad()
def _t_fixup(model: nn.Module, config: CaiTConfig) -> None:
    blocks = _blocks(model)
    n = len(blocks)
    dim = config.embed_dim
    init_encoder(model, config, config.init_scheme)  # "xavier": the config refuses any other for t-fixup
    for embedding in (model.pos_embed, model.cls_token):
        nn.init.normal_(embedding, std=dim**-0.5)
        embedding.mul_((9 * n) ** -0.25)
    scale = t_fixup_scale(config)
    for block in blocks:
        attention = block.attn
        _value_rows(attention, dim).mul_(scale)
        attention.proj.weight.mul_(scale)
        block.mlp.fc1.weight.mul_(scale)
        block.mlp.fc2.weight.mul_(scale)


def fixup_branch_scale(config: CaiTConfig) -> float:
    """Fixup's factor for the non-final layers of a branch, L^(-1/(2m-2)) with m = 2 (for tests and docs)."""
    return config.num_residual_branches ** (-1.0 / 2)


def t_fixup_scale(config: CaiTConfig) -> float:
    """T-Fixup's encoder factor 0.67 N^(-1/4) (N blocks, class attention included)."""
    return 0.67 * (config.depth + config.ca_depth) ** -0.25


__all__ = [
    "branch_gain",
    "branch_norm",
    "fixup_bias",
    "fixup_branch_scale",
    "init_encoder",
    "initialise",
    "t_fixup_scale",
]
