"""Data-parallel trials in a search: rank 0 is the Tune trial, ranks 1..N-1 Ray tasks beside it.

Why not Ray Train's ``TorchTrainer`` inside each Tune trial (Ray 2.60's Train V2 way): there, the
workers' reports reach Tune through ``TuneReportCallback``, which forwards rank 0's metrics and
only the *path* of a checkpoint, never a Tune checkpoint; a retried Tune trial would start from
nothing unless a second checkpoint mechanism were added, and every trial would run a Train
controller actor besides its workers. Here the Tune trial itself is rank 0, so its reports,
checkpoints, retries (``search.retries``: the whole group restarts from rank 0's last checkpoint)
and the store are exactly those of a one-process trial; the peers are plain Ray tasks in the
trial's placement group (one bundle per rank, which Ray reserves for the trial as a whole, the
way Ray Train's own ``ScalingConfig`` reserves its workers), and torch.distributed does the rest
(:mod:`trials.devices.distributed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from search_space.spec import Resources
from trials.lazy import lazy_import
from trials.status import TrialStatus

ray = lazy_import("ray")
placement = lazy_import("ray.util.scheduling_strategies")
runner = lazy_import("trials.runner")

# A peer's Ray task: its own failures are the trial's (never retried alone: the group would wait).
PEER_OPTIONS = {"max_retries": 0, "retry_exceptions": False}


def trial_bundles(resources: Resources) -> list[dict[str, float]]:
    """The placement group a trial asks for: one bundle per rank (rank 0, the Tune trial, first)."""
    bundle = {"CPU": resources.cpus, **({"GPU": resources.gpus} if resources.gpus else {})}
    return [dict(bundle) for _ in range(resources.workers)]


def _run_peer(config: Mapping[str, Any], rank: int, rendezvous, resume_state) -> dict[str, Any]:
    return runner.run_peer(config, rank, rendezvous, resume_state)


class RayPeers:
    """Ranks 1..N-1 of a search's trial as Ray tasks, each in its own bundle of the trial's group."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self._refs: list[Any] = []

    def host(self) -> str:
        return ray.util.get_node_ip_address()

    def start(self, config: Mapping[str, Any], rendezvous, resume_state: Any) -> None:
        group = ray.util.get_current_placement_group()
        state = ray.put(resume_state) if resume_state is not None else None  # bytes: one copy per rank
        task = ray.remote(_run_peer)
        for rank in range(1, rendezvous.world_size):
            strategy = (
                placement.PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank)
                if group is not None
                else None
            )
            options = {
                **PEER_OPTIONS,
                "num_cpus": self.resources.cpus,
                "num_gpus": self.resources.gpus,
                "name": f"archsearch-rank{rank}",
                **({"scheduling_strategy": strategy} if strategy is not None else {}),
            }
            self._refs.append(task.options(**options).remote(dict(config), rank, rendezvous, state))

    def failures(self) -> list[str]:
        errors = []
        for rank, ref in enumerate(self._refs, start=1):
            try:
                outcome = ray.get(ref, timeout=60)
            except ray.exceptions.TaskCancelledError:  # ended by stop(): rank 0's error says why
                continue
            except Exception as error:  # the task crashed, or its node died
                errors.append(f"rank {rank}: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
                continue
            if outcome["status"] == TrialStatus.FAILED:
                errors.append(f"rank {rank}: {outcome['error']}")
        return errors

    def stop(self) -> None:
        for ref in self._refs:
            with contextlib.suppress(Exception):  # already finished: nothing to end
                ray.cancel(ref, force=True)
