"""How uniform a CaiT's self-attention is at initialisation, measured on the built model.

The argument the CaiT controls rest on (issue 59): with LayerNorm'd inputs and q, k weights drawn with
std ``s``, an attention logit ``q . k / sqrt(d_head)`` has a standard deviation of about ``width * s**2``
whatever the number of heads, so at the base initialisation (``s`` = 0.02) it is 0.026 at width 64 and
0.31 at width 768: near-uniform attention at every width CaiT uses. :func:`initial_attention` measures
it instead of deriving it: the logits of every self-attention block of a freshly built model on a batch
of images (before talking heads mix them), their standard deviation, and the softmax's entropy as a
share of the uniform distribution's (1.0: uniform).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from trials.models import build_model
from trials.models.cait import SelfAttention


@dataclass(frozen=True)
class InitialAttention:
    width: int
    logit_sd: float  # over every logit of every self-attention block and head
    entropy_share: float  # mean softmax entropy / log(tokens): 1.0 is uniform attention
    predicted_sd: float  # width x 0.02^2: the argument's number for the base initialisation (std 0.02)


def initial_attention(model_config: dict[str, Any], *, images: int = 8, seed: int = 0) -> InitialAttention:
    """The self-attention logits of the model ``model_config`` builds (seeded), at initialisation."""
    torch.manual_seed(seed)
    model = build_model(model_config).eval()
    logits: list[torch.Tensor] = []

    def capture(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        (x,) = inputs[:1]
        b, n, _ = x.shape
        q, k, _ = module.qkv(x).view(b, n, 3, module.num_heads, module.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        logits.append(((q * module.scale) @ k.transpose(-2, -1)).detach())

    hooks = [m.register_forward_pre_hook(capture) for m in model.modules() if isinstance(m, SelfAttention)]
    if not hooks:
        raise ValueError(f"{model_config!r} has no self-attention block to measure")
    size = model.config.image_size
    with torch.no_grad():
        model(torch.randn(images, model.config.in_chans, size, size))
    for hook in hooks:
        hook.remove()
    every = torch.cat([t.flatten() for t in logits])
    entropies = []
    for t in logits:
        p = t.softmax(dim=-1)
        entropies.append((-(p * p.clamp_min(1e-12).log()).sum(-1) / math.log(t.shape[-1])).mean())
    width = model.config.embed_dim
    return InitialAttention(
        width=width,
        logit_sd=float(every.std()),
        entropy_share=float(torch.stack(entropies).mean()),
        predicted_sd=width * 0.02**2,
    )
