"""Issue 44, item 2: a study's results dir is owned by identity, not by name.

A study records the results-dir entry its Ray experiment was created under (schema 0007); rename
leaves it, delete/purge/resume act on it, a name is reusable after delete (a leftover is left alone
and the new study takes the next free entry), and a stored entry that is not a legal study name is
refused before any path is built from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner
from conftest import tiny_search_spec
from sqlalchemy import text

from harness.cli import main
from harness.search.cluster.ray_setup import SearchError
from harness.search.experiment_guard import choose_new_experiment, create_experiment_dir
from harness.store import Store

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


def _private_dir(path):
    path.mkdir(parents=True, mode=0o700)
    path.chmod(0o700)
    return path


def test_a_study_keeps_its_entry_across_a_rename(store_url):
    with Store.open(store_url) as store:
        store.create_study("a", {"name": "a"}, {"top1": "max"}, experiment="a.2")
        store.create_study("b", {"name": "b"}, {"top1": "max"})  # none given: its name
        assert store.study_experiment("a") == "a.2" and store.study_experiment("b") == "b"
        store.rename_study("a", "c")
        assert store.study_experiment("c") == "a.2"
        assert store.recorded_experiments() == {"a.2", "b"}


def test_a_new_study_takes_its_name_or_the_next_entry_no_experiment_and_no_study_holds(tmp_path):
    results = tmp_path / "rr"
    results.mkdir()
    assert choose_new_experiment(str(results), "a", set()) == "a"
    _private_dir(results / "a" / "trial_0")  # a deleted study's leftover, ours alone: left as it is
    assert choose_new_experiment(str(results), "a", set()) == "a.2"
    assert choose_new_experiment(str(results), "a", {"a.2"}) == "a.3"  # owned by a study of the store
    _private_dir(results / "empty")
    assert choose_new_experiment(str(results), "empty", set()) == "empty"  # empty and ours: taken up
    assert choose_new_experiment("s3://bucket/rr", "a", {"a"}) == "a.2"  # remote: only the store's record


def test_an_entry_that_is_not_ours_alone_is_refused_not_stepped_over(tmp_path):
    results = _private_dir(tmp_path / "rr")
    _private_dir(results / "a")
    (results / "a" / "tuner.pkl").symlink_to("/etc/passwd")
    with pytest.raises(SearchError, match="already holds an experiment"):
        choose_new_experiment(str(results), "a", set())


def test_purge_and_rename_act_on_the_recorded_entry_and_refuse_an_illegal_one(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    results = tmp_path / "rr"
    with Store.open(url) as store:
        store.create_study("a", {"name": "a"}, {"top1": "max"})
        store.create_study("x", {"name": "x"}, {"top1": "max"})
    (_private_dir(results / "a" / "trial_0") / "result.json").write_text("{}")
    runner = CliRunner()
    common = ["studies", "--store", url, "--results-dir", str(results)]
    for old, new in (("a", "b"), ("b", "c")):
        done = runner.invoke(main, [*common, "--rename", old, new])
        assert done.exit_code == 0, done.output
        assert "results stay under the entry a " in done.output, done.output  # twice: still the one it made
    done = runner.invoke(main, [*common, "--delete", "c", "--yes", "--purge-results"])
    assert done.exit_code == 0, done.output
    assert f"removed {results / 'a'}" in done.output and not (results / "a").exists()
    # A damaged row naming a path outside the results dir: refused before any path is built, nothing deleted.
    with Store.open(url) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE archsearch_studies SET experiment = '../../etc' WHERE name = 'x'"))
    done = runner.invoke(main, [*common, "--delete", "x", "--yes", "--purge-results"])
    assert done.exit_code == 2 and "not a valid study name" in done.output, done.output
    assert len(done.output.strip().splitlines()) == 1
    with Store.open(url, create=False) as store:
        assert store.study_names() == ["x"]


def test_yes_alone_and_an_unknown_huge_name_are_one_short_line(store_url):
    with Store.open(store_url) as store:
        store.create_study("a", {"name": "a"}, {"top1": "max"})
    done = CliRunner().invoke(main, ["studies", "--store", store_url, "--yes"])
    assert done.exit_code == 2 and "--yes confirms --delete" in done.output, done.output
    huge = "n" * 100_000
    for command in (["trials", huge], ["pareto", huge], ["studies", "--delete", huge, "--yes"]):
        done = CliRunner().invoke(main, [*command, "--store", store_url])
        assert done.exit_code == 2, done.output[:300]
        lines = done.output.strip().splitlines()
        assert len(lines) == 1 and len(lines[0]) < 400 and "100,000 characters" in lines[0], lines[0][:400]


def test_a_store_from_before_0007_gives_each_study_its_name_as_its_entry(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Store.open(url) as store:
        store.create_study("old", {"name": "old"}, {"top1": "max"})
        with store.engine.begin() as conn:  # the row as schema 0006 left it: no entry recorded
            conn.execute(text("UPDATE archsearch_studies SET experiment = NULL"))
        assert store.study_experiment("old") == "old"


@pytest.mark.slow
def test_a_name_is_reusable_after_a_rename_and_each_study_purges_its_own_results(tmp_path):
    results, url = tmp_path / "rr", f"sqlite:///{tmp_path / 'store.db'}"
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_search_spec("a", n_trials=1)))

    def archsearch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [EXE, *args, "--store", url, "--results-dir", str(results)], capture_output=True, text=True, timeout=600
        )

    first = archsearch("search", str(spec), "--name", "a")
    assert first.returncode == 0, first.stderr[-2000:]
    assert archsearch("studies", "--rename", "a", "b").returncode == 0
    second = archsearch("search", str(spec), "--name", "a")  # rr/a is b's: the new a takes rr/a.2
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"study a's results go to {results / 'a.2'}" in second.stderr
    assert any((results / "a.2").iterdir()) and any((results / "a").iterdir())
    purged = archsearch("studies", "--delete", "b", "--yes", "--purge-results")
    assert purged.returncode == 0 and f"removed {results / 'a'}" in purged.stdout, purged.stdout + purged.stderr
    assert not (results / "a").exists() and (results / "a.2").exists()
    purged = archsearch("studies", "--delete", "a", "--yes", "--purge-results")
    assert purged.returncode == 0 and f"removed {results / 'a.2'}" in purged.stdout, purged.stdout + purged.stderr
    assert sorted(os.listdir(results)) == []


@pytest.mark.parametrize("entry", ["", "a/b", "../x", ".hidden", "n" * 300])
def test_a_damaged_recorded_entry_is_refused_and_nothing_is_removed(tmp_path, entry):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    results = tmp_path / "rr"
    with Store.open(url) as store:
        store.create_study("a", {"name": "a"}, {"top1": "max"}, experiment="a.2")
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE archsearch_studies SET experiment = :e"), {"e": entry})
    (_private_dir(results / "a" / "trial_0") / "result.json").write_text("{}")  # someone else's: must stay
    done = CliRunner().invoke(
        main, ["studies", "--store", url, "--results-dir", str(results), "--delete", "a", "--yes", "--purge-results"]
    )
    assert done.exit_code == 2 and "recorded results entry" in done.output, done.output
    assert (results / "a" / "trial_0" / "result.json").exists()
    with Store.open(url, create=False) as store:
        assert store.study_names() == ["a"]


def test_a_purge_acts_on_the_recorded_absolute_dir_and_refuses_one_put_there_since(tmp_path, monkeypatch):
    """Issue 57 (2): the results dir is recorded as an absolute path with the experiment's identity
    (device and inode). From another working directory a delete names, and a purge removes, the
    study's own directory, never a same-named one under the reader's directory; a directory replaced
    since the study created it is refused, naming the path and both identities, and nothing is deleted."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    mine, elsewhere = _private_dir(tmp_path / "a" / "ray_results"), _private_dir(tmp_path / "b" / "ray_results")
    (_private_dir(elsewhere / "s" / "trial_0") / "result.json").write_text("another user's")
    with Store.open(url) as store:
        for name in ("s", "r"):  # as the driver records a new study's results
            store.create_study(name, {"name": name}, {"top1": "max"})
            store.record_results(name, str(mine), create_experiment_dir(str(mine / name)))
        root, identity = store.study_results("s")
        info = os.lstat(mine / "s")
        assert root == str(mine) and identity.startswith(f"{info.st_dev}:{info.st_ino}:") and len(identity) > 40
    (_private_dir(mine / "s" / "trial_0") / "result.json").write_text("{}")
    replaced = mine / "r"
    shutil.rmtree(replaced)
    _private_dir(replaced)  # another directory at the recorded path (its inode number may even be the same)
    monkeypatch.chdir(tmp_path / "b")
    runner = CliRunner()
    done = runner.invoke(main, ["studies", "--store", url, "--delete", "r", "--yes", "--purge-results"])
    assert done.exit_code == 2 and f"refusing to act on {replaced}" in done.output
    assert "recorded identity" in done.output
    with Store.open(url, create=False) as store:
        assert sorted(store.study_names()) == ["r", "s"]  # refused before any row went
    done = runner.invoke(main, ["studies", "--store", url, "--delete", "s", "--yes", "--results-dir", str(elsewhere)])
    assert done.exit_code == 2 and f"results are under {mine}" in done.output, done.output  # a wrong place, named
    done = runner.invoke(main, ["studies", "--store", url, "--delete", "s", "--yes", "--purge-results"])
    assert done.exit_code == 0 and f"removed {mine / 's'}" in done.output, done.output
    assert not (mine / "s").exists() and (elsewhere / "s" / "trial_0" / "result.json").read_text() == "another user's"


@pytest.mark.slow
def test_a_search_records_its_results_dir_absolutely_and_a_purge_from_elsewhere_removes_only_it(tmp_path):
    """Issue 57 (2), end to end: a search run in /a with the default results dir; ``studies --delete
    NAME --yes --purge-results`` from /b removes /a/ray_results/NAME and leaves /b/ray_results/NAME
    (another user's directory that happens to have the name) with its files."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    (second / "ray_results" / "here").mkdir(parents=True)
    (second / "ray_results" / "here" / "theirs.txt").write_text("keep")
    spec = first / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_search_spec("here", n_trials=1)))
    search = [EXE, "search", str(spec), "--store", url]
    done = subprocess.run(search, cwd=first, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(url, create=False) as store:
        root, identity = store.study_results("here")
    assert root == str(first / "ray_results") and identity
    assert (first / "ray_results" / "here").is_dir()
    purge = [EXE, "studies", "--store", url, "--delete", "here", "--yes", "--purge-results"]
    done = subprocess.run(purge, cwd=second, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed {first / 'ray_results' / 'here'}" in done.stdout, done.stdout
    assert not (first / "ray_results" / "here").exists()
    assert (second / "ray_results" / "here" / "theirs.txt").read_text() == "keep"
