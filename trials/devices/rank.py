"""What one rank of a data-parallel trial does differently inside the training loop.

Why a module of its own: under ``distributed: {workers: N}`` the loop wraps its forward in DDP,
weights each rank's loss by its share of the global batch, sums the step losses before a
divergence check and the epoch's totals at its end, and the peers follow rank 0's decision at the
end of every epoch; BatchNorm layers synchronised over the ranks (:mod:`trials.devices.sync_batchnorm`)
sync inside the DDP forward alone. :class:`Rank` gathers those few points; for a one-process trial it is the
identity everywhere (``group`` None), so the loop has no branch per case. Setting the group up
(rendezvous, peers) is :mod:`trials.devices.distributed`'s job.
"""

from __future__ import annotations

import torch
from torch import nn

from trials.devices.distributed import EpochSignal, Group
from trials.devices.sync_batchnorm import set_synchronising, switched_layers


class Rank:
    """This process's part in its trial's training: alone (``group`` None) or one rank of a group."""

    def __init__(self, group: Group | None, device: torch.device):
        self.group = group
        self.device = device
        self._data_parallel: dict[int, nn.Module] = {}  # DDP wrappers of the forward callables

    @property
    def world_size(self) -> int:
        return 1 if self.group is None else self.group.world_size

    @property
    def leads(self) -> bool:
        """Whether this process evaluates and reports (rank 0, or a one-process trial)."""
        return self.group is None or self.group.lead

    def wrap(self, forward: nn.Module) -> nn.Module:
        """``forward`` (the compiled or the eager model) under DDP, made once per callable.

        Built at the first step on every rank together (DDP broadcasts rank 0's weights as it is
        made); a compile fallback on one rank happens on all, since every rank compiles the same
        graph. Buffers (BatchNorm statistics) are broadcast from rank 0 at every forward; BatchNorm
        layers the runner synchronised normalise over the global batch inside this forward alone.
        """
        if self.group is None:
            return forward
        key = id(forward)
        if key not in self._data_parallel:
            ids = [self.device.index if self.device.index is not None else 0] if self.device.type == "cuda" else None
            wrapped = nn.parallel.DistributedDataParallel(forward, device_ids=ids)
            self._switch_sync_batchnorm(wrapped, switched_layers(forward))
            self._data_parallel[key] = wrapped
        return self._data_parallel[key]

    @staticmethod
    def _switch_sync_batchnorm(wrapped: nn.Module, layers: list[nn.Module]) -> None:
        """Synchronised BatchNorm (:mod:`trials.devices.sync_batchnorm`) on for the DDP forward alone.

        Only the training step runs through this wrapper, on every rank together; rank 0's passes
        alone (recalibration, measurement, evaluation) call the model itself and keep the layers
        local, so no collective waits for peers that are not there. The backward needs no switch:
        its collectives are in the graph the forward built. DDP's ``broadcast_buffers`` stays on:
        synchronised running statistics are the same on every rank anyway, and the broadcast is what
        hands rank 0's recalibrated statistics to the peers at the next step.
        """
        if not layers:
            return
        wrapped.register_forward_pre_hook(lambda module, args: set_synchronising(layers, True))
        wrapped.register_forward_hook(lambda module, args, output: set_synchronising(layers, False), always_call=True)

    def loss_share(self, rows: int, batch_rows: int | None) -> float:
        """The weight of this rank's mean loss: its ``rows`` of the global batch's ``batch_rows``
        times the world size, so the gradient DDP averages is the global batch's (the ranks' parts
        may differ in size by one image). 1 for one process."""
        if self.group is None or not batch_rows:
            return 1.0
        return rows * self.group.world_size / batch_rows

    def share_losses(self, losses: torch.Tensor, begin: int, end: int) -> None:
        """Steps ``[begin, end)``'s losses summed over the ranks, in place.

        Every rank then sees the same non-finite loss at the same step and ends as diverged there
        together (gradient norms are equal on every rank already: DDP averaged the gradients).
        """
        if self.group is None or end <= begin:
            return
        losses[begin:end] = self.group.all_sum(losses[begin:end].clone())

    def epoch_totals(self, loss_sum: torch.Tensor, images: int) -> tuple[torch.Tensor, int]:
        """The global batch's summed mean loss and every rank's images (this process's alone)."""
        if self.group is None:
            return loss_sum, images
        totals = torch.stack([loss_sum.double(), torch.full_like(loss_sum, images, dtype=torch.float64)])
        self.group.all_sum(totals)
        return totals[0] / self.group.world_size, int(totals[1].item())

    def agree(self, signal: EpochSignal | None) -> EpochSignal | None:
        """Rank 0's end-of-epoch ``signal`` on every rank (the peers pass None); nothing alone."""
        if self.group is None:
            return signal
        return self.group.agree(signal, self.device)
