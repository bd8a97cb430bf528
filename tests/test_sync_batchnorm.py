"""Synchronised BatchNorm: a data-parallel rank's BatchNorm normalises over the whole global batch.

The layer alone against ``nn.BatchNorm2d`` on the concatenated batch (two gloo processes with
unequal parts), and a whole CoAtNet trial with two workers against one worker with the same global
batch, as ``tests/test_data_parallel.py`` does for CaiT (LayerNorm only).
"""

from __future__ import annotations

import math
import multiprocessing
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_data_parallel import TOLERANCE
from torch import nn

from trials.devices.sync_batchnorm import (
    CrossRankBatchNorm2d,
    SwitchedSyncBatchNorm,
    set_synchronising,
    switched_layers,
    synchronise_batchnorm,
)
from trials.models import build_model
from trials.runner import run_trial
from trials.training.batchnorm import batch_norms

CHANNELS = 3
ROWS = (5, 2)  # unequal parts of a global batch of 7 (contiguous, as BatchSource.shard cuts them)


def _global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s whole batch and the gradient its output receives (the same on every rank)."""
    generator = torch.Generator().manual_seed(step)
    images = torch.randn(sum(ROWS), CHANNELS, 4, 3, generator=generator) * 2 + 1.5
    return images, torch.randn(images.shape, generator=generator)


def _layer() -> nn.BatchNorm2d:
    layer = nn.BatchNorm2d(CHANNELS)
    with torch.no_grad():  # not the identity init, so weight and bias show in the output
        layer.weight.copy_(torch.tensor([0.5, 2.0, -1.0]))
        layer.bias.copy_(torch.tensor([0.1, -0.3, 0.7]))
    return layer


def _run_steps(layer: nn.Module, parts: slice | None) -> dict[str, torch.Tensor]:
    """Two training steps at momentum 0.1, then two at ``None`` (recalibration's cumulative
    average): each step's output and input gradient (this part's rows), the weight and bias
    gradients (this part's share, summed over the steps), and the running statistics."""
    out: dict[str, torch.Tensor] = {}
    layer.train()
    for step in range(4):
        layer.momentum = 0.1 if step < 2 else None
        images, grad = _global_batch(step)
        rows = parts if parts is not None else slice(None)
        x = images[rows].clone().requires_grad_(True)
        y = layer(x)
        (y * grad[rows]).sum().backward()
        out[f"y{step}"], out[f"dx{step}"] = y.detach(), x.grad
    out |= {"dweight": layer.weight.grad, "dbias": layer.bias.grad}
    out |= {"running_mean": layer.running_mean, "running_var": layer.running_var}
    out["num_batches_tracked"] = layer.num_batches_tracked
    return {key: value.detach().clone() for key, value in out.items()}  # not the layer's own buffers


def _rank(rank: int, store: str, results: str, synchronise: bool) -> None:
    """One gloo rank: its contiguous rows of each global batch through a converted layer."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=len(ROWS))
    try:
        layer = _layer()
        assert synchronise_batchnorm(layer, torch.device("cpu")) == 1
        set_synchronising(switched_layers(layer), synchronise)
        start = sum(ROWS[:rank])
        out = _run_steps(layer, slice(start, start + ROWS[rank]))
        # Switched off (rank 0's recalibration, alone): a plain BatchNorm of this rank's rows, and
        # no collective, so a rank that the others do not join does not wait for them.
        set_synchronising(switched_layers(layer), False)
        alone = layer(torch.randn(ROWS[rank], CHANNELS, 2, 2, generator=torch.Generator().manual_seed(rank)))
        out["alone_mean"] = layer.running_mean.clone()
        out["alone_y"] = alone.detach()
        torch.save(out, f"{results}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _two_ranks(tmp_path: Path, synchronise: bool = True) -> list[dict[str, torch.Tensor]]:
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_rank, args=(rank, str(tmp_path / "store"), str(tmp_path), synchronise))
        for rank in range(len(ROWS))
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * len(ROWS)
    return [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(len(ROWS))]


def test_the_layer_over_two_unequal_parts_is_batchnorm_over_the_concatenated_batch(tmp_path):
    """Forward, input gradient, weight and bias gradients, running statistics (unbiased variance,
    momentum 0.1 and the cumulative average), counted in images, not in ranks."""
    ranks = _two_ranks(tmp_path)
    whole = _run_steps(_layer(), None)
    for step in range(4):
        for key in (f"y{step}", f"dx{step}"):
            joined = torch.cat([r[key] for r in ranks])
            assert torch.allclose(joined, whole[key], atol=1e-5, rtol=1e-5), (key, (joined - whole[key]).abs().max())
    for key in ("dweight", "dbias"):  # each rank's share of the gradient; DDP sums (averages) them
        total = sum(r[key] for r in ranks)
        assert torch.allclose(total, whole[key], atol=1e-5, rtol=1e-5), (key, total, whole[key])
    for r in ranks:
        for key in ("running_mean", "running_var", "num_batches_tracked"):
            assert torch.allclose(r[key].double(), whole[key].double(), atol=1e-6, rtol=1e-6), (key, r[key])
    # switched off: this rank's own statistics (the running mean moved by its rows alone)
    for rank, r in enumerate(ranks):
        local = _layer()
        local.load_state_dict({k: v for k, v in whole.items() if k in local.state_dict()}, strict=False)
        images = torch.randn(ROWS[rank], CHANNELS, 2, 2, generator=torch.Generator().manual_seed(rank))
        local.momentum = None
        expected = local(images)
        assert torch.allclose(r["alone_y"], expected, atol=1e-5)
        assert torch.allclose(r["alone_mean"], local.running_mean, atol=1e-6)


def test_unsynchronised_the_parts_differ_from_the_whole_batch(tmp_path):
    """The comparison above can fail: the same layers with the switch left off normalise each part
    alone, and their outputs and running statistics are not the whole batch's."""
    ranks = _two_ranks(tmp_path, synchronise=False)
    whole = _run_steps(_layer(), None)
    assert (torch.cat([r["y0"] for r in ranks]) - whole["y0"]).abs().max() > 1e-2
    assert (ranks[0]["running_var"] - whole["running_var"]).abs().max() > 1e-3


def test_conversion_keeps_the_weights_buffers_and_state_dict_keys():
    """In place, by class: a checkpoint of the converted model loads into a plain one (``export
    --weights``, ``init_from``) and back; the optimiser's parameters stay the same objects; the
    layers are still BatchNorms to recalibration."""
    model = build_model({"preset": "coatnet_tiny32", "depths": [1, 1, 1, 1, 1], "dims": [8, 8, 16, 32, 32]})
    plain_norms = len(batch_norms(model))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    assert synchronise_batchnorm(model, torch.device("cpu")) == plain_norms > 0
    assert all(isinstance(m, CrossRankBatchNorm2d) for m in batch_norms(model))
    assert len(batch_norms(model)) == plain_norms == len(switched_layers(model))
    assert list(model.parameters()) == params and all(a is b for a, b in zip(model.parameters(), params, strict=True))
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    fresh = build_model({"preset": "coatnet_tiny32", "depths": [1, 1, 1, 1, 1], "dims": [8, 8, 16, 32, 32]})
    fresh.load_state_dict(after)  # strict
    model.load_state_dict(fresh.state_dict())
    # the CUDA kind: torch's SyncBatchNorm under the same names, a plain BatchNorm while switched off
    other = _layer()
    reference = _layer()
    assert synchronise_batchnorm(other, torch.device("cuda")) == 1 and isinstance(other, SwitchedSyncBatchNorm)
    assert list(other.state_dict()) == list(reference.state_dict())
    images = torch.randn(6, CHANNELS, 2, 2)
    assert torch.allclose(other(images), reference(images)) and torch.equal(other.running_var, reference.running_var)
    assert synchronise_batchnorm(other, torch.device("cpu")) == 0  # converted once


# A CoAtNet small enough for two CPU processes: BatchNorm in the stem and the MBConv blocks, no
# drop-path, no augmentation. Same global batches as the CaiT test (96 images in batches of 31:
# parts of 15 and 16 images, so the layers' counts differ between the ranks).
COATNET = {
    "model": {
        "preset": "coatnet_tiny32",
        "depths": [1, 1, 1, 1, 1],
        "dims": [8, 8, 16, 32, 32],
        "drop_path_rate": 0.0,
    },
    "data": {"name": "synthetic", "num_classes": 4, "train_size": 96, "val_size": 32, "batch_size": 31},
    "training": {"epochs": 3, "lr": 3e-3, "label_smoothing": 0.0},
    "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False, "throughput": False},
    "device": "cpu",
}


def _run_keeping_state(config: dict) -> tuple[object, dict[str, torch.Tensor], dict[str, float]]:
    """The trial's result, rank 0's model state (weights and running statistics) at its end, and
    the norm of each parameter's gradient at its last step."""
    kept: dict[str, torch.Tensor] = {}
    grads: dict[str, float] = {}

    def keep(metrics, trainer) -> None:
        kept.update({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
        grads.update({k: float(p.grad.norm()) for k, p in trainer.model.named_parameters() if p.grad is not None})

    return run_trial(config, callback=keep), kept, grads


def _free_directions(grads: dict[str, float]) -> set[str]:
    """State the training loss does not determine: an MBConv block's ``pre_norm.bias`` feeds a 1x1
    convolution and then ``norm1``, which subtracts any per-channel constant, so its gradient is
    zero up to float noise (1e-9), which AdamW's step turns into +-lr in the noise's sign; and
    ``norm1``'s running mean, which follows that bias. Neither changes a training-mode output, and
    the eval-mode loss compared above covers them; every other tensor is compared."""
    biases = {name for name, norm in grads.items() if name.endswith("pre_norm.bias") and norm < 1e-6}
    return biases | {name.removesuffix("pre_norm.bias") + "norm1.running_mean" for name in biases}


@pytest.mark.parametrize("recalibrate", [False, True])
def test_two_gloo_processes_train_a_coatnet_as_one_process_on_the_global_batch(recalibrate):
    """Losses per epoch, final weights and running statistics: the steps of one worker.

    Eval-mode losses read the running statistics, so a rank that updated them from its part alone
    shows there too. With recalibration (rank 0 alone, switched off: no collective) the peers
    learn rank 0's recalibrated statistics from DDP's buffer broadcast at the next step.
    """
    config = {**COATNET, "training": {**COATNET["training"], "recalibrate_batchnorm": recalibrate}}
    one, one_state, one_grads = _run_keeping_state(config)
    two, two_state, _ = _run_keeping_state({**config, "distributed": {"workers": 2}})
    assert one.status == two.status == "completed", (one.error, two.error)
    assert two.runtime["world_size"] == 2 and two.runtime["synced_batchnorms"] > 0
    assert two.final["synced_batchnorms"] == two.runtime["synced_batchnorms"]  # in the trial's record
    assert "synced_batchnorms" not in one.runtime
    assert len(one.epochs) == len(two.epochs) == 3
    for a, b in zip(one.epochs, two.epochs, strict=True):
        assert a.step == b.step
        assert math.isclose(a.train_loss, b.train_loss, abs_tol=TOLERANCE), (a.train_loss, b.train_loss)
        assert math.isclose(a.eval_loss, b.eval_loss, abs_tol=TOLERANCE), (a.eval_loss, b.eval_loss)
        if recalibrate:
            assert math.isclose(a.train_eval_loss, b.train_eval_loss, abs_tol=TOLERANCE)
    assert list(one_state) == list(two_state)  # the same names: a checkpoint of either loads into the other
    free = _free_directions(one_grads)
    assert len(free) < len(one_state) // 10
    for key in one_state.keys() - free:
        difference = (one_state[key].double() - two_state[key].double()).abs().max()
        assert difference < TOLERANCE, (key, difference)
    # the training moved (a comparison of two untrained models would prove nothing)
    assert abs(one.epochs[-1].train_loss - one.epochs[0].train_loss) > 100 * TOLERANCE
