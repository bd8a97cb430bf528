"""The Ray Tune trainable: one trial of a search, run on a worker with torch alone (no database).

It rebuilds the trial config from the sampled parameters, runs :func:`trials.runner.run_trial`,
reports every epoch to Tune with a checkpoint at the pace the spec sets (every epoch by default,
so a trial retried on another node resumes from its last finished epoch; ``search.checkpoint_every``
and ``checkpoint_min_interval_s`` space them out; the final epoch's only with
``search.keep_checkpoints`` true or front), and marks its
last report with the outcome (``archsearch_status``): the driver's searcher and store callback
read the outcome from there.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.preflight import memory_preflight
from harness.search.result_keys import (
    BUILT_MODEL_KEY,
    EPOCHS_KEY,
    NUMBER_KEY,
    PREDICTIONS_KEY,
    RESUME_KEY,
    RETRY_KEY,
    STATUS_KEY,
    split_tune_config,
)
from harness.search.worker.data_parallel import RayPeers
from search_space.sampling import build_trial_config, cost_violations
from search_space.spec import Resources, SearchSpec
from trials.lazy import lazy_import
from trials.status import TrialStatus

# The driver imports this module only to name the trainable: torch and the trial code load on the worker.
ray = lazy_import("ray")
tune = lazy_import("ray.tune")
torch = lazy_import("torch")
runner = lazy_import("trials.runner")

CHECKPOINT_FILE = "trainer.pt"


class WorkerUnusable(RuntimeError):
    """A sticky CUDA error broke this worker's CUDA context; raised so Ray ends the actor.

    Ray Tune never reuses the actor of a trial that raised (``reuse_actors`` caches only actors
    whose trial ended cleanly), so the next trial starts in a fresh process instead of failing on
    the broken context; with ``search.retries`` this trial itself is retried on a fresh worker.
    """


def pruned_trials_state(params: dict[str, Any]) -> dict[str, Any] | None:
    """The training state a pruned configuration run again resumes from: the last checkpoint its pruned trial
    wrote (:data:`RESUME_KEY`, set by the searcher). None where there is none, or it cannot be read here (a
    results dir this node does not see): the retry then trains from epoch 1, as it did before resuming existed."""
    resume = params.get(RESUME_KEY)
    directory = resume.get("checkpoint") if isinstance(resume, dict) else None
    if not directory:
        return None
    try:
        return load_checkpoint(directory)
    except (OSError, RuntimeError, ValueError, pickle.UnpicklingError):
        return None


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """A trial's checkpoint, loaded onto the CPU (the trainer copies it to the device as it applies it).

    ``map_location="cpu"``: loading straight to the GPU would keep a second copy of the model and
    optimiser state there for the whole trial. ``weights_only=True``: state dicts and plain values
    only, so a tampered checkpoint on a shared results dir cannot run code on resume.
    """
    return torch.load(Path(directory) / CHECKPOINT_FILE, map_location="cpu", weights_only=True)


class CheckpointPace:
    """When an epoch's checkpoint is due: ``every`` epochs and ``min_interval_s`` seconds after the
    last one (or after this attempt started, at ``start_epoch``; a retried trial resumes from it).

    A checkpoint holds the model and the optimiser state (~0.5 GB for CaiT-S24): with short epochs,
    one per epoch is mostly writing. ``search.checkpoint_every`` and ``checkpoint_min_interval_s``
    set the pace; 1 and 0 (the defaults) write one every epoch.
    """

    def __init__(
        self,
        every: int = 1,
        min_interval_s: float = 0.0,
        start_epoch: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.every, self.min_interval_s, self.clock = every, min_interval_s, clock
        self.last_epoch, self.last_time = start_epoch, clock()

    def due(self, epoch: int) -> bool:
        """Whether the checkpoint of finished ``epoch`` should be written."""
        return epoch - self.last_epoch >= self.every and self.clock() - self.last_time >= self.min_interval_s

    def written(self, epoch: int) -> None:
        self.last_epoch, self.last_time = epoch, self.clock()


def trial_cpus() -> float | None:
    """The CPUs Ray assigned to this trial (what its DataLoader workers must stay within)."""
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return float(cpus) if cpus else None


def _cost_metrics(cost) -> dict[str, Any]:
    if cost is None:
        return {}
    return {f"cost_{k}": v for k, v in cost.to_dict().items()} | {
        "flops": cost.flops,
        "params": cost.params,
        "throughput": cost.throughput,
        "latency_ms": cost.latency_ms,
    }


class PriceMismatch(RuntimeError):
    """The config a worker builds is not the one the searcher priced: a driver/worker disagreement."""


def worker_trial_config(search_spec: SearchSpec, tune_config: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """(trial number, trial config) of a dispatched Tune config, as this worker trains it.

    The config is the spec's base with the sampled and the fixed values applied
    (:func:`search_space.sampling.build_trial_config`, the same call the searcher priced and the
    store records). The searcher's price travels with the config; the model built here must cost
    exactly that, or the trial fails naming both (a fixed value once got lost between the two, and
    the search trained other models than the ones its constraints had admitted).
    """
    number, priced, params = split_tune_config(tune_config)
    config = build_trial_config(search_spec, params)
    if priced:
        built, _ = cost_violations(search_spec, config)
        differs = {m: (priced[m], built[m]) for m in priced if priced[m] is not None and priced[m] != built.get(m)}
        if differs:
            said = ", ".join(f"{m} priced {p:,} but the model built costs {b:,}" for m, (p, b) in differs.items())
            raise PriceMismatch(f"trial {number}: {said}; the config the worker built: {config['model']}")
    return number, config


def place_trial(config: dict[str, Any], wanted: Resources, assigned_cpus: float | None) -> None:
    """Fit the trial config to what the trial asked Ray for (``search.resources``), in place, and hide
    the GPUs from a CPU trial's process (:func:`fit_to_resources` is the config's part alone)."""
    fit_to_resources(config, wanted, assigned_cpus)
    if wanted.gpus == 0:  # and the trial's DataLoader workers see none either
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def fit_to_resources(config: dict[str, Any], wanted: Resources, assigned_cpus: float | None) -> None:
    """The trial config fitted to ``search.resources``, in place, touching nothing else: what a worker
    trains, and what ``archsearch check`` shows of a proposal without running it."""
    if 0 < wanted.gpus < 1:  # packed trials: each keeps to its share, so one's OOM never kills a neighbour
        config["gpu_memory_fraction"] = wanted.gpus
        if wanted.mps:  # a client of the node's MPS daemon, capped by MPS itself
            config["mps"] = True
    if wanted.gpus == 0:
        # No GPU asked for means the CPU, on any node: Ray 2.60 no longer hides a GPU node's GPUs
        # from zero-GPU workers, so ``device: auto`` would put every such trial on cuda:0, uncapped.
        config["device"] = "cpu"
    config["cpus"] = assigned_cpus or wanted.cpus
    if wanted.workers > 1:  # rank 0 here, the other ranks Ray tasks in this trial's placement group
        config["distributed"] = {"workers": wanted.workers}


def search_trainable(params: dict[str, Any], spec: dict[str, Any]) -> None:
    """Tune function trainable; ``spec`` is bound with ``tune.with_parameters``.

    Long because it is a trial's whole life inside Ray (placement, pre-flight, the runner, each epoch's report, the
    outcome) in the order it happens.
    """
    search_spec = SearchSpec.model_validate(spec)
    number, config = worker_trial_config(search_spec, params)
    wanted = search_spec.search.resources
    place_trial(config, wanted, trial_cpus())
    pending: list[dict[str, Any]] = []  # the checkpoint to resume from, handed over once and then dropped
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            pending.append(load_checkpoint(directory))
    resumed_from_trial = None
    if not pending and (state := pruned_trials_state(params)) is not None:  # a pruned configuration run again
        pending.append(state)
        resumed_from_trial = params.get(RETRY_KEY)

    # Where this attempt runs, and from which epoch it resumed (> 0 after a retry from a checkpoint).
    placement = {
        "worker_node": ray.get_runtime_context().get_node_id(),
        "worker_gpus": ",".join(str(g) for g in ray.get_gpu_ids()),
        "resumed_from_epoch": int(pending[0]["epoch"]) if pending else 0,
        **({"resumed_from_trial": resumed_from_trial} if resumed_from_trial is not None else {}),
    }

    # The last epoch's checkpoint is written only where it may be kept (search.keep_checkpoints: true,
    # or front: the trained weights, every trial's or the front's): a completed study's checkpoints are
    # removed otherwise, and a one-epoch trial then writes none at all (a model's state saved, copied
    # to the results dir and deleted, per trial). Which trials will be on the front is known only
    # at the end: with front, every trial writes its final one and the driver prunes the rest.
    keep_final = search_spec.search.keep_checkpoints in (True, "front")
    settings = search_spec.search
    pace = CheckpointPace(
        settings.checkpoint_every, settings.checkpoint_min_interval_s, placement["resumed_from_epoch"]
    )

    def report_epoch(metrics, trainer) -> None:
        payload: dict[str, Any] = {**metrics.to_dict(), **_cost_metrics(trainer.cost), NUMBER_KEY: number, **placement}
        payload[BUILT_MODEL_KEY] = json.dumps(trainer.model.config.to_dict())  # the model that ran, for its record
        payload[EPOCHS_KEY] = trainer.total_epochs  # the progress line's epoch k/E
        if trainer.finished:  # the whole budget ran: this is the trial's final result
            payload.update({f"final_{k}": v for k, v in runner.final_metrics(trainer.history).items()})
            payload.update({f"final_{k}": v for k, v in runner.trial_facts(trainer).items()})
            payload.update({f"final_{k}": v for k, v in runner.test_metrics(trainer).items()})  # test: once, at the end
            predictions = runner.test_predictions(trainer)  # from that same pass
            if predictions is not None:
                payload[PREDICTIONS_KEY] = predictions.encode()
            if trainer.notes:  # e.g. a torch.compile fallback: kept with the trial's final record
                payload["final_notes"] = "; ".join(trainer.notes)
            payload["best_top1"] = max(m.top1 for m in trainer.history)
            payload[STATUS_KEY] = TrialStatus.COMPLETED
        # Nothing will resume a finished trial: its checkpoint is written only to be kept. Before that,
        # at the pace the spec sets (every epoch by default).
        if not (keep_final if trainer.finished else pace.due(trainer.epoch)):
            tune.report(payload)
            return
        with tempfile.TemporaryDirectory() as directory:
            torch.save(trainer.state_dict(), Path(directory) / CHECKPOINT_FILE)
            tune.report(payload, checkpoint=tune.Checkpoint.from_directory(directory))
        pace.written(trainer.epoch)

    result = runner.run_trial(
        config,
        callback=report_epoch,
        resume_state=pending.pop if pending else None,
        progress=False,
        launcher=RayPeers(wanted) if wanted.workers > 1 else None,
        preflight=memory_preflight,
    )
    runtime = {f"final_{k}": float(v) for k, v in result.runtime.items() if isinstance(v, (int, float, bool))}
    if result.worker_unusable:
        raise WorkerUnusable(f"this worker's CUDA context is broken; the trial failed with: {result.error}")
    if result.status != TrialStatus.COMPLETED:
        payload = {
            **(result.epochs[-1].to_dict() if result.epochs else {}),
            **_cost_metrics(result.cost),
            NUMBER_KEY: number,
            **placement,
            STATUS_KEY: result.status,
            **({BUILT_MODEL_KEY: json.dumps(result.built_model)} if result.built_model is not None else {}),
            "error": result.error,
            "diverged_at_step": result.diverged_at_step,
            **runtime,
        }
        # Tune insists on every objective in every result; these NaNs never reach Optuna (the
        # searcher tells FAIL without values) nor the store (which records the outcome).
        payload.update({m: float("nan") for m in search_spec.objectives if payload.get(m) is None})
        tune.report(payload)
