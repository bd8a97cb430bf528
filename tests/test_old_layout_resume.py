"""An experiment saved by the archsearch before the search engine moved into ``harness/search/``
still resumes (issue 43): its Ray pickles name ``harness.optuna_searcher``, ``harness.tune_callbacks``,
``harness.interrupts`` and ``harness.stop_rules`` (see ``harness.search.legacy``).

The fixture is a real search (3 trials, TPE) written by commit 595a8b1's layout and stopped by
SIGINT after its first trial completed, with its second running: the SQLite store, the spec and
Ray Tune's experiment directory, as ``tests/fixtures/old_layout_experiment.tar.gz``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import optuna
import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "old_layout_experiment.tar.gz"
EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


def test_the_fixture_pickles_name_the_old_modules():
    with tarfile.open(FIXTURE) as archive:
        tuner = archive.extractfile("ray/old-layout/tuner.pkl").read()
    for old in (b"harness.optuna_searcher", b"harness.tune_callbacks", b"harness.interrupts", b"harness.stop_rules"):
        assert old in tuner


@pytest.mark.slow
def test_a_search_saved_by_the_old_layout_resumes_and_finishes_its_trials(tmp_path):
    from harness.store import Store

    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path, filter="data")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url, create=False) as store:
        before = store.counts("old-layout", epochs=False)
        assert before["completed"] == 1 and store.study("old-layout")["status"] == "interrupted"
    done = subprocess.run(
        [EXE, "search", "--resume", "old-layout", "--store", url, "--results-dir", str(tmp_path / "ray")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with Store.open(url, create=False) as store:
        counts = store.counts("old-layout", epochs=False)
        assert store.study("old-layout")["status"] == "completed"
    assert counts["completed"] == 3 and counts["running"] == 0  # n_trials, none trained twice or left running


def test_the_fixture_was_saved_with_another_store_and_results_dir_than_it_resumes_with():
    """What makes the tests here speak to a moved or copied experiment: Ray pickled the paths of the
    machine that made the fixture, and the tests resume it from a fresh temporary directory."""
    with tarfile.open(FIXTURE) as archive:
        tuner = archive.extractfile("ray/old-layout/tuner.pkl").read()
    assert b"/tmp/oldexp" in tuner


@pytest.mark.slow
def test_a_renamed_study_resumes_under_its_new_name_in_the_store_it_is_given(tmp_path):
    """Issue 44 (adversarial pass): after `studies --rename`, `--resume NEW` failed ("study 'old' not
    found"), and a resume of a copied store wrote into the store pickled in Ray's state."""
    from harness.store import Store

    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path, filter="data")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    common = ["--store", url]
    renamed = subprocess.run([EXE, "studies", "--rename", "old-layout", "renamed", *common], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert renamed.returncode == 0, renamed.stderr
    done = subprocess.run(
        [EXE, "search", "--resume", "renamed", *common, "--results-dir", str(tmp_path / "ray")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with Store.open(url, create=False) as store:
        assert store.study_names() == ["renamed"]
        counts = store.counts("renamed", epochs=False)
        assert store.study("renamed")["status"] == "completed"
    assert counts["completed"] == 3 and counts["running"] == 0
    optuna_names = optuna.get_all_study_names(storage=url)
    assert optuna_names == ["renamed"]
    assert len(optuna.load_study(study_name="renamed", storage=url).trials) >= 3
