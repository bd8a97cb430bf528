"""The keys a Ray Tune trial's config and results carry for archsearch, shared by both sides.

The driver's searcher puts :data:`NUMBER_KEY` and :data:`PRICED_KEY` into each config it
dispatches beside the parameters; the worker's trainable reports :data:`STATUS_KEY` with the final
result. They live apart from the searcher so that a worker reads them without importing Optuna.
"""

from __future__ import annotations

from typing import Any

NUMBER_KEY = "archsearch_number"  # the Optuna trial number: the store's key for the trial
STATUS_KEY = "archsearch_status"  # set on the final report of a trial that ran its whole budget
# The closed-form cost ({"flops": ..., "params": ...}) the searcher priced the config at before
# dispatch (the constraints were checked on it); the worker checks the model it builds costs the same.
PRICED_KEY = "archsearch_priced"
# Set (to the pruned trial's number) on a configuration early stopping pruned, dispatched again once the
# space has nothing new: it runs to the end of its budget, never judged at a rung.
RETRY_KEY = "archsearch_retry_of"
# Beside RETRY_KEY where the pruned trial left a checkpoint: {"checkpoint": its last checkpoint dir, "epoch": the
# epoch it was pruned after}. The retry resumes from that checkpoint (as ASHA's promotions do) instead of training
# the epochs it already trained again; without the key, or where the dir cannot be read, it trains from epoch 1.
RESUME_KEY = "archsearch_resume_from"
# On the final report of a completed trial whose data has a test split: its per-image test predictions
# and labels, compact (``trials.training.predictions.TestPredictions.encode()``), for the store's own table.
PREDICTIONS_KEY = "archsearch_test_predictions"
# On every report of a trial whose model was built: that model's config (JSON), with the image size,
# channels and classes the data gave it. The store records it as the trial's model: what ran.
BUILT_MODEL_KEY = "archsearch_built_model"
# On every epoch's report: the trial's budget in epochs (its ``training.epochs``, or its ``training.steps`` in
# epochs), for the progress line's ``epoch k/E`` and ETA and ``on_epoch``'s record.
EPOCHS_KEY = "archsearch_epochs"


def split_tune_config(config: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None, dict[str, Any]]:
    """(trial number, priced cost, the parameters) of a dispatched Tune config.

    A config dispatched by an older archsearch (restored from Ray's snapshot) has no priced cost: None.
    """
    params = dict(config)
    number = params.pop(NUMBER_KEY, None)
    priced = params.pop(PRICED_KEY, None)
    params.pop(RETRY_KEY, None)
    params.pop(RESUME_KEY, None)
    return number, priced, params
