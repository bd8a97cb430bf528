"""Issue 46: a configuration early stopping pruned is run again, to the end of its budget, once the space
has nothing new to propose; replayed through the engine a search builds (searcher, MO-ASHA, simulator)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import search_quality
from benchmarks.front_quality import TrueFront
from benchmarks.table import load_table
from harness.search.propose import searcher

OBJECTIVES = {"top1": "max", "flops": "min"}
EPOCHS = 4


def _table(tmp_path: Path):
    """12 configurations, 4 epochs: cheap models start slowly (pruned at the first rung), end well."""
    rows = []
    for config_id, (width, lr) in enumerate(itertools.product([1, 2, 3, 4, 5, 6], ["a", "b"])):
        final = 60 + 5 * width - (3 if lr == "b" else 0)
        for epoch in range(1, EPOCHS + 1):
            start = 0.3 + 0.1 * width  # the cheapest trail early
            top1 = final * min(1.0, start + (1 - start) * (epoch - 1) / (EPOCHS - 1))
            rows.append({"config_id": config_id, "epoch": epoch, "top1": round(top1, 3), "epoch_s": 1.0,
                         "flops": 10 * width, "params": width, "throughput": 1.0,
                         "width": width, "lr": lr})  # fmt: skip
    path = tmp_path / "retry.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return load_table(path)


@pytest.mark.parametrize("readmit", [True, False])
def test_pruned_configurations_run_again_to_the_end_once_the_space_is_exhausted(tmp_path, monkeypatch, readmit):
    monkeypatch.setattr(searcher, "READMIT_PRUNED", readmit)
    table = _table(tmp_path)
    truth = TrueFront(table, OBJECTIVES)
    budget = 2 * len(table) * EPOCHS  # room for every configuration twice
    url = f"sqlite:///{tmp_path / 'store.db'}"
    # the rule without its rank gate: the cheap models this table prunes end on the front, so the gate (rightly)
    # never lets a rung stop them; the retry is the scheduler's and the searcher's, gated or not
    run = search_quality.replay(table, truth, "random+moasha-ungated", 0, 2, budget, url)
    assert run.pruned, "MO-ASHA pruned nothing: the test table no longer exercises the retry"
    assert len(set(run.completed)) == len(run.completed)  # a retry is never a duplicate completion
    if readmit:
        # every pruned configuration ran again to its last epoch (the budget allowed all of them)
        assert set(run.pruned) <= set(run.completed) and run.spent < budget
        assert set(run.completed) == set(range(len(table)))
        # each resumed from its pruned trial's checkpoint: every configuration's epochs were charged once
        assert run.spent == len(table) * EPOCHS
    else:
        assert not set(run.pruned) & set(run.completed)
        assert run.spent < budget  # the search ended with budget left


def test_a_retry_resumes_from_a_checkpoint_it_can_read_and_else_trains_from_epoch_one(tmp_path):
    """The trainable's side (``pruned_trials_state``): a readable checkpoint of the pruned trial is the state the
    retry resumes from; a missing dir (a results dir this node does not see) or a file that is not a
    checkpoint leaves it to train from epoch 1, as a retry did before resuming existed."""
    import torch

    from harness.search.result_keys import RESUME_KEY, RETRY_KEY
    from harness.search.worker.trainable import CHECKPOINT_FILE, pruned_trials_state

    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    torch.save({"epoch": 2, "step": 10, "history": []}, good / CHECKPOINT_FILE)
    (bad / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")

    def params(directory):
        return {"lr": 0.1, RETRY_KEY: 3, RESUME_KEY: {"checkpoint": str(directory), "epoch": 2}}

    assert pruned_trials_state(params(good))["epoch"] == 2
    assert pruned_trials_state(params(bad)) is None
    assert pruned_trials_state(params(tmp_path / "missing")) is None
    assert pruned_trials_state({"lr": 0.1, RETRY_KEY: 3}) is None  # a retry the searcher found no checkpoint for


def test_a_trial_dir_is_known_by_its_name_until_ray_writes_its_params(tmp_path):
    """A pruned trial's retry may look for its checkpoint before Ray's logger has written the trial's
    params.json (a fast trial did, in CI): the dir's name, Ray's config-derived one, says the number until then."""
    from harness.search.checkpoints import trial_number

    early = tmp_path / "search_trainable_be53f884_2_archsearch_number=13,flops=1368736,lr=0.0030_2026-12-02_01-09-14"
    early.mkdir()
    assert trial_number(early) == 13
    (early / "params.json").write_text('{"archsearch_number": 5}')
    assert trial_number(early) == 5  # once written, the config Ray wrote is what counts
    for name in ("search_trainable_x_archsearch_number=13x", "search_trainable_x_1_lr=0.1"):
        (tmp_path / name).mkdir()
        assert trial_number(tmp_path / name) is None
