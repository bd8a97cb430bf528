"""Issue 34, items 2 and 3: nothing is written until everything is checked (the warm start's source,
the results dir), and the stored spec is always the spec of the run that wrote it."""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest
import yaml
from conftest import tiny_search_spec

from harness.store import Store

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")
SPEC = tiny_search_spec("w", n_trials=2)


def _search(tmp_path, spec: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}"]
    return subprocess.run([EXE, "search", str(path), *store, *args], capture_output=True, text=True, timeout=600)


def _nothing_of(tmp_path, name: str) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    if not (tmp_path / "store.db").exists():
        return
    with Store.open(url, create=False) as store:
        assert name not in store.study_names()
    assert name not in [s.study_name for s in optuna.get_all_study_summaries(storage=url)]


@pytest.mark.parametrize(
    ("warm_start", "message"),
    [
        ({"study": "missing"}, "search.warm_start.study: no study 'missing'"),
        ({"study": "x", "store": "sqlite:////nonexistent/dir/a.db"}, "search.warm_start.store:"),
    ],
)
def test_a_bad_warm_start_writes_nothing(tmp_path, warm_start, message):
    done = _search(tmp_path, {**SPEC, "search": {**SPEC["search"], "warm_start": warm_start}})
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    _nothing_of(tmp_path, "w")


def test_a_results_dir_that_cannot_be_created_writes_nothing(tmp_path):
    done = _search(tmp_path, SPEC, "--results-dir", "/proc/x")
    assert done.returncode == 2 and "--results-dir: /proc/x: cannot create it" in done.stderr
    assert "Traceback" not in done.stderr
    _nothing_of(tmp_path, "w")


@pytest.mark.slow
def test_a_rerun_after_an_attempt_that_ran_nothing_stores_the_spec_that_ran(tmp_path):
    """An earlier attempt (stopped before any trial) left the study with another spec and objectives:
    the run that follows replaces both, so --resume and the report read what ran."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stale = {**SPEC, "search": {**SPEC["search"], "n_trials": 7}, "objectives": {"top1": "max"}}
    with Store.open(url) as store:
        store.create_study("w", stale, {"top1": "max"})
        store.set_study_status("w", "interrupted", message="interrupted by SIGINT")
    optuna.create_study(study_name="w", storage=url, directions=["maximize"])
    done = _search(tmp_path, SPEC, "--results-dir", str(tmp_path / "rr"))
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(url, create=False) as store:
        record = store.study("w")
        assert record["spec"]["search"]["n_trials"] == 2 and store.objectives("w") == {"top1": "max", "flops": "min"}
        assert record["status"] == "completed" and store.counts("w")["completed"] == 2
    assert len(optuna.load_study(study_name="w", storage=url).directions) == 2
