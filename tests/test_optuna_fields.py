"""The private fields of Optuna's Study that archsearch reads, exercised on the installed version (issue 32,
item 6): an upgrade that renames one fails here, not in a search. The searcher itself is composed over
Optuna's public ask/tell (issue 43) and keeps its own bookkeeping, checked here as well.
"""

from __future__ import annotations

import optuna
import pytest
from ray.tune.search.optuna import OptunaSearch

from harness.search import adapter as fields
from harness.search.propose.samplers import make_sampler
from harness.search.propose.searcher import ArchsearchSearch
from search_space.validation import load_spec


def _spec(tmp_path):
    return load_spec(
        {
            "name": "fields",
            "family": "cait",
            "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
            "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
            "params": {"embed_dim": {"choice": [32, 48, 64]}},
            "objectives": {"top1": "max", "flops": "min"},
            "search": {"sampler": "random", "n_trials": 3, "seed": 0},
        }
    )


def test_the_study_fields_the_adapter_reads_exist_and_work():
    study = optuna.create_study(directions=["maximize", "minimize"])
    fields.check_study(study)
    trial = study.ask()
    trial.suggest_int("x", 0, 3)
    assert fields.frozen_trial(study, trial.number).state == optuna.trial.TrialState.RUNNING
    study.tell(trial, [1.0, 2.0])
    assert fields.frozen_trial(study, trial.number).values == [1.0, 2.0]


def test_a_renamed_study_field_is_named_in_one_error():
    study = optuna.create_study()
    del study._study_id
    with pytest.raises(fields.UnsupportedVersion, match="_study_id"):
        fields.check_study(study)


def test_the_searcher_asks_and_tells_through_optunas_public_api(tmp_path):
    spec = _spec(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    searcher = ArchsearchSearch(spec, url, "fields", optuna.storages.RDBStorage(url), make_sampler(spec))
    assert not isinstance(searcher, OptunaSearch)  # composed over Optuna, not a subclass of Ray's wrapper
    config = searcher.suggest("t0")
    asked = searcher.asked_trial("t0")
    assert isinstance(asked, optuna.Trial) and config["embed_dim"] == asked.params["embed_dim"]
    assert searcher.sampler is searcher.study.sampler
    searcher.on_trial_complete("t0", {"top1": 50.0, "flops": 2.0, "archsearch_status": "completed"})
    assert searcher.study.trials[asked.number].values == [50.0, 2.0]
    searcher.on_trial_complete("t0", {"top1": 10.0, "flops": 9.0, "archsearch_status": "completed"})  # once only
    assert searcher.study.trials[asked.number].values == [50.0, 2.0]
