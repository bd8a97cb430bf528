"""Issue 45 item 7: Optuna's users keep their tools. Every epoch's accuracy reaches Optuna's storage
as an intermediate value (optuna-dashboard draws the learning curves; read back here through
``optuna.load_study``), and every trial says what archsearch calls it as a user attribute: an
infeasible one (PRUNED to Optuna, never trained) with its reason."""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest
import yaml
from conftest import tiny_search_spec

from harness.search.propose.searcher import REASON_ATTR, STATUS_ATTR
from harness.store import Store

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


@pytest.mark.slow
def test_epochs_reach_optuna_as_intermediate_values_and_statuses_as_user_attributes(tmp_path):
    spec = tiny_search_spec("eco", n_trials=2)
    spec["training"]["epochs"] = 2
    spec["params"] = {"depth": {"choice": [1, 2]}, "embed_dim": {"choice": [32, 64]}}
    spec["constraints"] = ["params <= 60000"]  # embed_dim 64 (~108k params at depth 1) never trains
    spec["search"]["initial_spread"] = 0  # the sampler alone: the spread proposes only feasible configurations
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = subprocess.run([EXE, "search", str(path), "--store", url, "--results-dir", str(tmp_path / "rr")],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(url, create=False) as store:
        curves = store.learning_curves("eco")
        trials = store.trials("eco", flatten_config=False)
    optuna_trials = {t.number: t for t in optuna.load_study(study_name="eco", storage=url).trials}
    completed = trials[trials["status"] == "completed"]
    assert len(completed) == 2
    for number in completed["number"]:
        stored = curves[curves["number"] == number].set_index("epoch")["top1"].to_dict()
        assert optuna_trials[number].intermediate_values == {int(k): float(v) for k, v in stored.items()}
        assert optuna_trials[number].user_attrs[STATUS_ATTR] == "completed"
    infeasible = trials[trials["status"] == "infeasible"]
    assert len(infeasible) >= 1  # the seeded sampler proposes embed_dim 64 before its second feasible trial
    for number in infeasible["number"]:
        attrs = optuna_trials[number].user_attrs
        assert attrs[STATUS_ATTR] == "infeasible" and "params <= 60000" in attrs[REASON_ATTR]
        assert optuna_trials[number].state == optuna.trial.TrialState.PRUNED
