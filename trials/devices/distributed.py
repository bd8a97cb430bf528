"""Data-parallel trials: one trial as N processes (ranks) that train one model with DDP.

The process that runs :func:`trials.runner.run_trial` is rank 0: it measures, evaluates, reports
and checkpoints exactly as a one-process trial does, so everything downstream of a trial (Ray
Tune's reports and checkpoints, retries, the store) is unchanged. Ranks 1..N-1 are *peers*,
started by a :class:`PeerLauncher` before rank 0 joins the group: local processes here
(:class:`LocalPeers`, for ``archsearch trial``), Ray actors in the trial's placement group in a
search (``harness.search.worker.data_parallel``). Peers train only: they skip measurement, evaluation and
reporting, and follow rank 0's decision at the end of every epoch (:func:`agree`).

``data.batch_size`` is the global batch: every rank draws the same epoch plan and trains on its
contiguous part of each batch (:meth:`trials.data.sources.BatchSource.shard`), and each rank's
mean loss is weighted by its share of the batch, so DDP's averaged gradient is the gradient of
the global batch's mean loss: N processes take the optimiser steps one process takes.

Rendezvous is a ``TCPStore`` that rank 0 opens on a free port (port 0: no port is guessed), so
trials of one node never collide.
"""

from __future__ import annotations

import datetime
import enum
import io
import multiprocessing
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist

from trials.configio import ConfigError
from trials.status import TrialStatus

# How long a rank waits for the others at a collective. Rank 0 evaluates, reports and
# checkpoints while the peers wait at the end of an epoch, so this bounds that, not a step.
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)


class EpochSignal(enum.IntEnum):
    """What rank 0 decided at the end of an epoch; every peer does the same."""

    CONTINUE = 0
    STOP = 1  # the epoch callback stopped the trial (a stop rule, the budget of a caller)
    DIVERGED = 2  # rank 0's evaluation loss was not finite


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks of one trial meet: rank 0's store, and the group's size and backend."""

    host: str
    port: int
    world_size: int
    backend: str


def pack_state(state: Mapping[str, Any] | None) -> bytes | None:
    """A checkpoint as bytes, for the peers: each rank gets its own copy.

    Handing the dict itself to a spawned process moves its tensors into shared memory, and the
    optimiser, which takes a loaded state's tensors as its own, would then update rank 0's and a
    peer's Adam moments in one buffer (a Ray object's tensors would be read-only instead)."""
    if state is None:
        return None
    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    return buffer.getvalue()


def unpack_state(packed: bytes | None) -> dict[str, Any] | None:
    """:func:`pack_state`'s checkpoint back; state dicts and plain values only (``weights_only``)."""
    if packed is None:
        return None
    return torch.load(io.BytesIO(packed), map_location="cpu", weights_only=True)


def resolve_backend(setting: str, device: torch.device) -> str:
    """``auto``: NCCL between GPUs, Gloo between CPU processes."""
    if setting != "auto":
        return setting
    return "nccl" if device.type == "cuda" else "gloo"


@dataclass
class Group:
    """This process's place in its trial's process group."""

    rank: int
    world_size: int
    backend: str

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks (in place; returned for chaining)."""
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def agree(self, signal: EpochSignal | None, device: torch.device) -> EpochSignal:
        """Rank 0's ``signal`` on every rank (the peers pass None)."""
        value = torch.tensor([int(signal or 0)], dtype=torch.int64, device=device)
        dist.broadcast(value, src=0)
        return EpochSignal(int(value.item()))


def open_group(rendezvous: Rendezvous, rank: int, store=None, timeout=DEFAULT_TIMEOUT) -> Group:
    """Join the trial's process group as ``rank``; rank 0 passes the store it opened."""
    if store is None:
        store = dist.TCPStore(rendezvous.host, rendezvous.port, rendezvous.world_size, is_master=False, timeout=timeout)
    dist.init_process_group(
        rendezvous.backend, store=store, rank=rank, world_size=rendezvous.world_size, timeout=timeout
    )
    return Group(rank, rendezvous.world_size, rendezvous.backend)


def open_store(host: str, world_size: int, timeout=DEFAULT_TIMEOUT):
    """Rank 0's rendezvous store on a port the OS picks."""
    return dist.TCPStore(host, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)


def close_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class PeerLauncher(Protocol):
    """Starts ranks 1..N-1 of a trial whose rank 0 is the calling process."""

    def host(self) -> str:
        """The address the peers reach rank 0 at."""

    def start(self, config: Mapping[str, Any], rendezvous: Rendezvous, resume_state: bytes | None) -> None:
        """Start the peers; each runs :func:`trials.runner.run_peer` with its rank and the packed
        checkpoint to resume from (:func:`pack_state`)."""

    def failures(self) -> list[str]:
        """Errors of peers that failed (after the run; waits briefly for them to end)."""

    def stop(self) -> None:
        """End every peer still running (rank 0 has finished, failed or been stopped)."""


def peer_device(config: Mapping[str, Any], rank: int, local: bool) -> str:
    """The device a peer trains on: on one node with several GPUs, local rank r uses ``cuda:r``;
    a peer in its own Ray actor sees only its own GPU (``auto``)."""
    wanted = str(config.get("device", "auto"))
    if not local or wanted == "cpu" or not torch.cuda.is_available():
        return wanted
    return f"cuda:{rank}"


def _local_peer(target, config, rank, rendezvous, resume_state, errors) -> None:
    try:
        outcome = target(config, rank, rendezvous, resume_state)
        if outcome["status"] == TrialStatus.FAILED:
            errors.put(f"rank {rank}: {outcome['error']}")
    except BaseException as error:  # a peer's crash is reported to rank 0, not lost
        errors.put(f"rank {rank}: {type(error).__name__}: {error}\n{traceback.format_exc()}")
        raise


class LocalPeers:
    """Peers as local processes (``spawn``: CUDA cannot be forked), for ``archsearch trial``.

    ``target(config, rank, rendezvous, resume_state) -> {"status", "error"}`` is what each peer
    runs (:func:`trials.runner.run_peer`; passed in, so that this module does not import the runner).
    """

    def __init__(self, target: Callable[..., dict[str, Any]]) -> None:
        self._target = target
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[Any] = []
        self._stopped = False
        self._errors = self._context.SimpleQueue()

    def host(self) -> str:
        return "127.0.0.1"

    def start(self, config: Mapping[str, Any], rendezvous: Rendezvous, resume_state: Any) -> None:
        wanted = str(config.get("device", "auto"))
        if wanted != "cpu" and torch.cuda.is_available() and torch.cuda.device_count() < rendezvous.world_size:
            raise ConfigError(
                "distributed.workers",
                f"{rendezvous.world_size} workers on one node need as many GPUs; this node has "
                f"{torch.cuda.device_count()} (on a Ray cluster, a search places workers on several nodes)",
            )
        for rank in range(1, rendezvous.world_size):
            peer_config = {**config, "device": peer_device(config, rank, local=True)}
            process = self._context.Process(
                target=_local_peer,
                args=(self._target, peer_config, rank, rendezvous, resume_state, self._errors),
                daemon=True,
                name=f"archsearch-rank{rank}",
            )
            process.start()
            self._processes.append(process)

    def failures(self) -> list[str]:
        for process in self._processes:
            process.join(timeout=10)
        errors = []
        while not self._errors.empty():
            errors.append(self._errors.get())
        errors += [
            f"rank {rank}: exited with code {p.exitcode}"
            for rank, p in enumerate(self._processes, start=1)
            if p.exitcode not in (0, None)
            and not (self._stopped and p.exitcode < 0)  # ended by stop(): rank 0's error says why
            and not any(e.startswith(f"rank {rank}:") for e in errors)
        ]
        return errors

    def stop(self) -> None:
        self._stopped = True
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        for process in self._processes:
            process.join(timeout=10)
