"""Every private field of Ray Tune's OptunaSearch and Optuna's Study that archsearch reads, exercised
on the installed versions (issue 32, item 6): an upgrade that renames one fails here, not in a search."""

from __future__ import annotations

import optuna
import pytest
from ray.tune.search.optuna import OptunaSearch

from harness.search import adapter as fields


def _space(trial):
    trial.suggest_int("x", 0, 3)


@pytest.fixture
def searcher():
    sampler = optuna.samplers.RandomSampler(0)
    searcher = OptunaSearch(space=_space, metric=["a", "b"], mode=["max", "min"], sampler=sampler)
    searcher.set_search_properties(None, None, {})
    return searcher


def test_each_field_reads_and_writes_what_the_searcher_relies_on(searcher):
    fields.check_fields(searcher)
    config = searcher.suggest("t0")
    asked = fields.asked_trial(searcher, "t0")
    assert isinstance(asked, optuna.Trial) and asked.params == config
    assert fields.asked_numbers(searcher) == {asked.number}
    assert fields.space_function(searcher) is _space
    assert isinstance(fields.sampler_of(searcher), optuna.samplers.RandomSampler)
    study = fields.study_of(searcher)
    assert isinstance(study, optuna.Study)
    assert fields.frozen_trial(study, asked.number).state == optuna.trial.TrialState.RUNNING
    assert not fields.was_told(searcher, "t0")
    searcher.on_trial_complete("t0", {"a": 1.0, "b": 2.0})  # Ray's own bookkeeping of a told trial
    assert fields.was_told(searcher, "t0")
    assert fields.frozen_trial(study, asked.number).values == [1.0, 2.0]
    fields.mark_told(searcher, "t9")
    assert fields.was_told(searcher, "t9")
    fields.forget_asked(searcher, "t0")
    assert fields.asked_trial(searcher, "t0") is None and fields.asked_numbers(searcher) == set()
    fields.set_space_function(searcher, print)
    assert fields.space_function(searcher) is print


def test_a_renamed_field_is_named_in_one_error(searcher):
    del searcher._completed_trials
    with pytest.raises(fields.UnsupportedVersion, match="_completed_trials"):
        fields.check_fields(searcher)
