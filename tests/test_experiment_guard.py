"""Issue 34, item 1: a study's experiment dir on a shared results dir is checked before Ray touches it.
A link planted where Ray will write (``tuner.pkl``, ``.validate_storage_marker``) is never followed,
a resumed experiment holding a link or another user's file is refused, and nothing is written first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import tiny_search_spec

from harness.search.cluster.ray_setup import SearchError
from harness.search.experiment_guard import check_experiment_for_resume, check_new_experiment, remove_stale_experiment
from harness.store import Store

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")
SPEC = tiny_search_spec("tiny", n_trials=1)


@pytest.mark.parametrize("planted", ["tuner.pkl", ".validate_storage_marker"])
def test_a_link_planted_in_a_new_studys_experiment_dir_is_refused_and_nothing_is_written(tmp_path, planted):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    victim.chmod(0o644)
    (tmp_path / "rr" / "plant").mkdir(parents=True)
    (tmp_path / "rr" / "plant" / planted).symlink_to(victim)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = subprocess.run(
        [EXE, "search", str(spec), "--name", "plant", "--results-dir", str(tmp_path / "rr"), "--store", url],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "already holds an experiment" in lines[0] and "Traceback" not in done.stderr
    assert victim.read_text() == "precious" and oct(victim.stat().st_mode & 0o777) == "0o644"
    if (tmp_path / "store.db").exists():
        with Store.open(url, create=False) as store:
            assert "plant" not in store.study_names()


def test_a_new_experiment_dir_may_be_absent_or_an_empty_directory_of_ours_only(tmp_path):
    check_new_experiment(str(tmp_path / "absent"))
    (tmp_path / "empty").mkdir()
    check_new_experiment(str(tmp_path / "empty"))
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(SearchError, match="is a symbolic link"):
        check_new_experiment(str(tmp_path / "link"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(SearchError, match="is not a directory"):
        check_new_experiment(str(tmp_path / "file"))
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)
    with pytest.raises(SearchError, match="writable by other users"):
        check_new_experiment(str(tmp_path / "open"))


def test_a_resumed_experiment_with_a_link_or_a_shared_file_anywhere_is_refused(tmp_path):
    experiment = tmp_path / "exp"
    (experiment / "trial_0" / "checkpoint_000000").mkdir(parents=True, mode=0o700)
    (experiment / "tuner.pkl").write_bytes(b"state")
    (experiment / "tuner.pkl").chmod(0o600)
    for directory in (experiment, experiment / "trial_0", experiment / "trial_0" / "checkpoint_000000"):
        directory.chmod(0o700)
    check_experiment_for_resume(str(experiment))  # ours alone: fine
    deep = experiment / "trial_0" / "checkpoint_000000" / "trainer.pt"
    deep.symlink_to("/etc/passwd")
    with pytest.raises(SearchError, match=r"tampered with: .*trainer.pt is a symbolic link"):
        check_experiment_for_resume(str(experiment))
    deep.unlink()
    (experiment / "tuner.pkl").chmod(0o666)
    with pytest.raises(SearchError, match=r"tuner\.pkl is writable by other users"):
        check_experiment_for_resume(str(experiment))


def test_a_stale_experiment_of_ours_is_removed_but_a_planted_one_stays(tmp_path):
    ours = tmp_path / "ours"
    (ours / "trial_0").mkdir(parents=True, mode=0o700)
    ours.chmod(0o700)
    remove_stale_experiment(str(ours))
    assert not ours.exists()
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    planted.chmod(0o700)
    (planted / "tuner.pkl").symlink_to(tmp_path / "elsewhere")
    remove_stale_experiment(str(planted))
    assert (planted / "tuner.pkl").is_symlink()  # left alone; check_new_experiment then refuses it
    with pytest.raises(SearchError):
        check_new_experiment(str(planted))


def test_resume_refuses_a_tampered_experiment_before_loading_anything(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("tampered", {**SPEC, "name": "tampered"}, {"top1": "max", "flops": "min"})
        store.set_study_status("tampered", "interrupted", message="interrupted by SIGINT")
    experiment = tmp_path / "rr" / "tampered"
    experiment.mkdir(parents=True, mode=0o700)
    experiment.chmod(0o700)
    (experiment / "tuner.pkl").symlink_to(tmp_path / "attacker.pkl")
    done = subprocess.run(
        [EXE, "search", "--resume", "tampered", "--results-dir", str(tmp_path / "rr"), "--store", url],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "tampered with" in done.stderr and "tuner.pkl is a symbolic link" in done.stderr
    assert "Traceback" not in done.stderr
    assert Path(experiment / "tuner.pkl").is_symlink()
