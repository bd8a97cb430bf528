"""BatchNorm over the whole global batch of a data-parallel trial, on CPU (gloo) as on CUDA.

Why a module of its own: a data-parallel rank trains on its contiguous part of every global batch
(:meth:`trials.data.sources.BatchSource.shard`), so a plain BatchNorm normalises with that part's
statistics and N workers no longer take the steps one worker takes (CoAtNet drifted by 1e-3 to
5e-3 in loss where CaiT, LayerNorm only, matches to float tolerance). Here every BatchNorm of a
rank's model normalises with the statistics of the global batch, forward and backward, and its
running statistics move as one worker's would.

``torch.nn.SyncBatchNorm`` does this on CUDA; torch 2.14 refuses it on the CPU (its forward raises
for a CPU tensor, and DDP refuses a CPU module that holds one), so a CPU rank's layers compute the
moments themselves: per-channel sums summed over the ranks by one collective whose backward sums
the gradients over the ranks too, so every rank's inputs get the gradient of the global batch's
loss and DDP's averaged parameter gradient is one worker's.

Synchronised only while switched on: rank 0 alone also runs the model in train mode (BatchNorm
recalibration over the whole un-augmented training split, :mod:`trials.training.batchnorm`), with the peers
waiting at the end-of-epoch agreement; a collective there would wait for them forever. So each
layer syncs only inside a rank's training forward, which :class:`trials.devices.rank.Rank` switches on
around the DDP-wrapped call; everywhere else it is a plain BatchNorm. torch's own SyncBatchNorm
syncs in every train-mode forward, hence the CUDA subclass with the same switch.

The layers are converted in place by changing their class (:func:`synchronise_batchnorm`): the
parameters, buffers, hooks and names stay the very same objects, so checkpoints, ``init_from`` and
``export --weights`` read and load them as a plain model's (the state_dict keys do not change).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# The BatchNorm classes a rank's model may hold, and what each becomes on the CPU.
_PLAIN = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


class _SumOverRanks(torch.autograd.Function):
    """``tensor`` summed over the ranks; its gradient summed over the ranks as well.

    Every rank's loss depends on every rank's part of the sum, so the gradient reaching one rank's
    part is the sum of all the ranks' gradients of the sum. (``torch.distributed.nn.functional
    .all_reduce`` does the same but is deprecated in torch 2.14 with a warning at every call.)
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        total = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        total = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total


def sum_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over the process group, differentiably (see :class:`_SumOverRanks`)."""
    return _SumOverRanks.apply(tensor)


@torch.compiler.disable  # a collective mid-graph: computed eagerly, the graph breaks around it
def global_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Per-channel mean and biased variance of ``x`` over every rank's rows, and their count.

    Each rank centres its own part first (its mean and squared deviations in ``x``'s precision, as
    BatchNorm computes them), then the parts are combined in float64 (Chan's parallel variance:
    ``sum n_r m_r`` and ``sum (M2_r + n_r m_r^2)``, one collective), so the cancellation in
    ``E[x^2] - mean^2`` costs nothing measurable. A rank whose part is empty contributes zeros.
    """
    dims = [0, *range(2, x.dim())]
    shape = [1, -1] + [1] * (x.dim() - 2)
    rows = x.numel() // x.shape[1]
    local_mean = x.sum(dims) / max(rows, 1)
    local_m2 = (x - local_mean.view(shape)).square().sum(dims)
    mean64 = local_mean.double()
    count = torch.full_like(mean64, float(rows))
    total = sum_over_ranks(torch.stack([rows * mean64, local_m2.double() + rows * mean64.square(), count]))
    n = int(total[2, 0].item())  # the same on every rank (the sum is); one host sync per layer
    if n <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got {n} over every rank")
    mean = total[0] / n
    var = (total[1] / n - mean.square()).clamp_min(0.0)
    return mean.to(x.dtype), var.to(x.dtype), n


def _average_factor(module: nn.Module) -> float:
    """The running statistics' update weight for this batch, counting it as BatchNorm does:
    ``momentum``, or a cumulative average (``momentum=None``, as recalibration sets it)."""
    if not (module.training and module.track_running_stats):
        return 0.0
    module.num_batches_tracked.add_(1)
    if module.momentum is None:
        return 1.0 / float(module.num_batches_tracked)
    return float(module.momentum)


def _local_forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A plain BatchNorm's forward (this rank's rows alone), for a layer whose sync is off."""
    factor = _average_factor(module)
    batch_stats = module.training or (module.running_mean is None and module.running_var is None)
    tracked = not module.training or module.track_running_stats
    return F.batch_norm(
        x,
        module.running_mean if tracked else None,
        module.running_var if tracked else None,
        module.weight,
        module.bias,
        batch_stats,
        factor,
        module.eps,
    )


# Input dimensions each BatchNorm class takes: (N, C) or (N, C, L); (N, C, H, W); (N, C, D, H, W).
BATCHNORM_DIMS = {nn.BatchNorm1d: (2, 3), nn.BatchNorm2d: (4,), nn.BatchNorm3d: (5,)}


def _check_dims(module: nn.Module, x: torch.Tensor) -> None:
    """BatchNorm's own input check, in our words (torch's ``_check_input_dim`` is private)."""
    for kind, dims in BATCHNORM_DIMS.items():
        if isinstance(module, kind) and x.dim() not in dims:
            raise ValueError(f"{kind.__name__} expects {' or '.join(map(str, dims))}-D input (got {x.dim()}-D input)")


class _Switched:
    """The switch both kinds of synchronised layer share: off (a plain BatchNorm) unless a rank's
    training forward is running (:func:`set_synchronising`)."""

    synchronising: bool = False


class CrossRankBatchNorm(_Switched):
    """A BatchNorm (1d, 2d or 3d: mixed into each) that, switched on in train mode, normalises
    with the global batch's statistics over the process group: the CPU/gloo one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.synchronising and self.training):
            return super().forward(x)  # type: ignore[misc]
        _check_dims(self, x)
        factor = _average_factor(self)  # type: ignore[arg-type]
        mean, var, n = global_moments(x)
        if self.track_running_stats and self.running_mean is not None:  # type: ignore[attr-defined]
            with torch.no_grad():  # as BatchNorm: the unbiased variance, over the global batch
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)  # type: ignore[attr-defined]
                unbiased = var.detach() * (n / (n - 1))
                self.running_var.mul_(1 - factor).add_(unbiased, alpha=factor)  # type: ignore[attr-defined]
        shape = [1, -1] + [1] * (x.dim() - 2)
        scale = torch.rsqrt(var + self.eps)  # type: ignore[attr-defined]
        if self.weight is not None:  # type: ignore[attr-defined]
            scale = scale * self.weight  # type: ignore[attr-defined]
        y = (x - mean.view(shape)) * scale.view(shape)
        return y + self.bias.view(shape) if self.bias is not None else y  # type: ignore[attr-defined]


class CrossRankBatchNorm1d(CrossRankBatchNorm, nn.BatchNorm1d):
    """:class:`CrossRankBatchNorm` of a ``BatchNorm1d``."""


class CrossRankBatchNorm2d(CrossRankBatchNorm, nn.BatchNorm2d):
    """:class:`CrossRankBatchNorm` of a ``BatchNorm2d`` (CoAtNet's)."""


class CrossRankBatchNorm3d(CrossRankBatchNorm, nn.BatchNorm3d):
    """:class:`CrossRankBatchNorm` of a ``BatchNorm3d``."""


class SwitchedSyncBatchNorm(_Switched, nn.SyncBatchNorm):
    """torch's SyncBatchNorm (CUDA), synchronising only while switched on; a plain BatchNorm otherwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.synchronising:
            return self._synchronised_forward(x)
        return _local_forward(self, x)

    @torch.compiler.disable  # Dynamo breaks the graph at SyncBatchNorm anyway (pytorch#161302): said here
    def _synchronised_forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x)


_ON_CPU: dict[type[nn.Module], type[nn.Module]] = {
    nn.BatchNorm1d: CrossRankBatchNorm1d,
    nn.BatchNorm2d: CrossRankBatchNorm2d,
    nn.BatchNorm3d: CrossRankBatchNorm3d,
}


def synchronise_batchnorm(model: nn.Module, device: torch.device) -> int:
    """Every plain BatchNorm of ``model`` made to synchronise over the ranks; how many there were.

    In place, by class: the same parameters and buffers under the same names (a checkpoint of the
    converted model loads into a plain one and back). torch's SyncBatchNorm on CUDA (and other
    accelerators it supports), :class:`CrossRankBatchNorm` on the CPU. Layers already converted,
    and subclasses of BatchNorm that may override its forward, are left alone.
    """
    converted = 0
    for module in model.modules():
        kind = type(module)
        if kind not in _PLAIN:
            continue
        if device.type == "cpu":
            module.__class__ = _ON_CPU[kind]
        else:
            module.__class__ = SwitchedSyncBatchNorm
            module.process_group = None  # the default group: the trial's ranks
        converted += 1
    return converted


def switched_layers(model: nn.Module) -> list[nn.Module]:
    """The layers of ``model`` (a model, its compiled wrapper) that :func:`set_synchronising` switches."""
    return [m for m in model.modules() if isinstance(m, _Switched)]


def set_synchronising(layers: list[nn.Module], on: bool) -> None:
    """Switch ``layers``' synchronisation on (a rank's training forward) or off (anything else)."""
    for layer in layers:
        layer.synchronising = on  # type: ignore[attr-defined]
