"""What a finished trial and a finished search leave in the store: a trial's outcome, the study's final status.

:func:`record_outcome` is what the store callback writes when Ray reports a trial's end (and what a
resume replays for trials that ended after the driver's last record); :func:`final_status` decides whether
the study completed, or failed and why (in one line).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from harness.search.result_keys import BUILT_MODEL_KEY, PREDICTIONS_KEY, STATUS_KEY, split_tune_config
from harness.search.stop.failures import common_error
from search_space.sampling import build_trial_config, split_params
from search_space.spec import SearchSpec
from trials.status import StudyStatus, TrialStatus
from trials.training.predictions import PredictionsError, TestPredictions


def final_status(store, name: str, counts: dict[str, int], spec: SearchSpec) -> tuple[str, str | None, bool]:
    """(status, one-line reason, whether the spec is to blame) of a search that has ended.

    ``completed`` if any trial completed; otherwise ``failed``, with the trials' common error, or
    the constraint that excluded every sampled config.
    """
    if counts.get(TrialStatus.COMPLETED, 0) > 0:
        return StudyStatus.COMPLETED, None, False
    ran = sum(counts.get(s, 0) for s in (TrialStatus.PRUNED, TrialStatus.FAILED, TrialStatus.DIVERGED))
    if ran == 0 and counts.get(TrialStatus.INFEASIBLE, 0) > 0:
        errors = store.trial_errors(name, (TrialStatus.INFEASIBLE,), limit=1)
        detail = f": the last one {errors[0]}" if errors else ""
        return (
            StudyStatus.FAILED,
            f"all {counts[TrialStatus.INFEASIBLE]} sampled configurations were infeasible{detail}; "
            f"the constraints {spec.constraints} leave (almost) nothing of the search space",
            True,
        )
    common = common_error(store.trial_errors(name, (TrialStatus.FAILED,), limit=50))
    if counts.get(TrialStatus.FAILED, 0) and common:
        return StudyStatus.FAILED, f"every trial failed ({counts[TrialStatus.FAILED]}), all with: {common}", False
    if ran == 0:
        return StudyStatus.FAILED, "no trial ran", False
    parts = ", ".join(
        f"{counts[s]} {s}" for s in (TrialStatus.FAILED, TrialStatus.DIVERGED, TrialStatus.PRUNED) if counts.get(s)
    )
    return StudyStatus.FAILED, f"no trial completed ({parts})", False


class DispatchedTrial(NamedTuple):
    """What the store records of a dispatched Tune trial's config."""

    number: int  # the store's trial number (Optuna's)
    config: dict[str, Any]  # the trial config the worker builds: the spec's base, sampled and fixed values applied
    parameters: dict[str, dict[str, Any]]  # {"sampled": ..., "fixed": ...}


# (spec, sampled and fixed params) -> the trial config stored for them: build_trial_config in a search;
# a replay against a table, whose configurations are looked up and never built, stores its params.
ConfigBuilder = Callable[[SearchSpec, dict[str, Any]], dict[str, Any]]


def dispatched_trial(
    spec: dict[str, Any], tune_config: dict[str, Any], build: ConfigBuilder = build_trial_config
) -> DispatchedTrial:
    """The store's view of a Tune trial's config (the same config the worker builds, see
    :func:`harness.search.worker.trainable.worker_trial_config`)."""
    number, _, params = split_tune_config(tune_config)
    search_spec = SearchSpec.model_validate(spec)
    return DispatchedTrial(number, build(search_spec, params), split_params(search_spec, params))


def with_built_model(config: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the model the worker built (its report's :data:`BUILT_MODEL_KEY`) in place of the
    driver's view of it: an image folder's class count is known only where the folder is read."""
    built = result.get(BUILT_MODEL_KEY)
    if not isinstance(built, str):
        return config
    try:
        model = json.loads(built)
    except ValueError:
        return config
    return {**config, "model": model} if isinstance(model, dict) else config


def record_outcome(
    store,
    study: str,
    spec: dict[str, Any],
    params: dict[str, Any],
    result: dict[str, Any],
    build: ConfigBuilder = build_trial_config,
) -> None:
    """Write a finished trial's final record from its last Tune result (its outcome mark, cost, final metrics)."""
    number, config, parameters = dispatched_trial(spec, params, build)
    config = with_built_model(config, result)
    status = result.get(STATUS_KEY) or TrialStatus.PRUNED  # no outcome mark: stopped early by the scheduler
    final = {k.removeprefix("final_"): v for k, v in result.items() if k.startswith("final_")}
    if status == TrialStatus.PRUNED and result.get("top1") is not None:
        final = {"top1": result.get("top1"), "epochs": result.get("epoch")}
    measurement = {k.removeprefix("cost_"): v for k, v in result.items() if k.startswith("cost_")}
    if result.get("resumed_from_epoch"):
        final["resumed_from_epoch"] = result["resumed_from_epoch"]
    if result.get("resumed_from_trial") is not None:  # a pruned configuration run again, from that trial's checkpoint
        final["resumed_from_trial"] = result["resumed_from_trial"]
    predictions = None
    if status == TrialStatus.COMPLETED and result.get(PREDICTIONS_KEY) is not None:
        try:  # checked here, once: the store keeps only predictions that read back
            predictions = TestPredictions.decode(result[PREDICTIONS_KEY])
        except PredictionsError:
            predictions = None
    gpus = result.get("worker_gpus")
    device = f"GPU {gpus} on node {result.get('worker_node', '?')[:8]}" if gpus else measurement.get("device")
    store.finish_trial(
        study,
        number,
        status=status,
        config=config,
        measurement=measurement or None,
        final=final or None,
        error=result.get("error"),
        diverged_at_step=result.get("diverged_at_step"),
        device=device,
        host=result.get("hostname"),
        optuna_number=number,
        parameters=parameters,
        test_predictions=predictions,
    )
