"""One training step and one inference call, as every benchmark times them (torch alone).

A single definition so that "training throughput" means the same thing in ``benchmarks.models``
(ours vs timm on any device) and ``benchmarks.gpu`` (224 training, MFU): forward under autocast,
cross-entropy, ``zero_grad(set_to_none=True)``, backward, AdamW step (fused on CUDA, where it is
the fast path and what a trial uses).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _autocast(device: torch.device, dtype: torch.dtype):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


def train_step(
    model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype, device: torch.device
) -> Callable[[], None]:
    """A closure running one optimiser step of ``model`` on ``images``/``labels`` (puts it in train mode)."""
    model.train()
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
    autocast = _autocast(device, dtype)

    def step() -> None:
        with autocast:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def infer_step(
    model: torch.nn.Module, images: torch.Tensor, dtype: torch.dtype, device: torch.device
) -> Callable[[], None]:
    """A closure running one forward pass in inference mode (puts ``model`` in eval mode)."""
    model.eval()
    autocast = _autocast(device, dtype)

    def infer() -> None:
        with torch.inference_mode(), autocast:
            model(images)

    return infer
