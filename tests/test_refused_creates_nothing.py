"""Issue 44, item 3: a refused command creates nothing: no store, no results dir, no output dir.

Each case runs the real ``archsearch`` in an empty working directory and checks that the refusal
is one line, exit 2, and that the directory is as empty afterwards as before (the default store
``archsearch.db`` and the default results dir ``ray_results`` live there).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from conftest import tiny_search_spec

from harness.store import Store, StoreError

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


def _run(cwd, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ARCHSEARCH_STORE"}
    return subprocess.run([EXE, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def _spec(tmp_path, name: str, **search) -> str:
    spec = tiny_search_spec(name)
    spec["search"].update(search)
    path = tmp_path / "specs" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _refused_in_one_line(done: subprocess.CompletedProcess, said: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0], lines


@pytest.mark.parametrize(
    ("search", "said"),
    [
        ({"warm_start": {"study": "nope"}}, "search.warm_start.study: no study 'nope'"),
        ({"resources": {"gpus": 1}}, "the Ray cluster has none"),
    ],
    ids=["warm-start-from-nowhere", "gpus-the-cluster-lacks"],
)
def test_a_refused_search_leaves_no_store_and_no_results_dir(tmp_path, search, said):
    work = tmp_path / "work"
    work.mkdir()
    done = _run(work, "search", _spec(tmp_path, "refused", **search))
    _refused_in_one_line(done, said)
    assert sorted(os.listdir(work)) == []


def test_a_refused_search_into_an_existing_store_adds_no_study_and_no_results_dir(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    url = f"sqlite:///{work / 'archsearch.db'}"
    with Store.open(url) as store:
        store.create_study("other", {"name": "other"}, {"top1": "max"})
    done = _run(work, "search", _spec(tmp_path, "refused", warm_start={"study": "nope"}))
    _refused_in_one_line(done, "search.warm_start.study: no study 'nope'")
    assert sorted(os.listdir(work)) == ["archsearch.db"]
    with Store.open(url, create=False) as store:
        assert store.study_names() == ["other"]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("sqlite://", "in-memory SQLite database"),
        ("sqlite:///:memory:", "in-memory SQLite database"),
        ("sqlite:///file:x?mode=memory&uri=true", "takes no options"),
    ],
)
def test_an_in_memory_store_is_refused_everywhere_in_one_line(tmp_path, url, said):
    work = tmp_path / "work"
    work.mkdir()
    for command in (["search", _spec(tmp_path, "mem"), "--store", url], ["studies", "--store", url]):
        _refused_in_one_line(_run(work, *command), said)
    assert sorted(os.listdir(work)) == []
    with pytest.raises(StoreError, match=r"in-memory|takes no options"):
        Store.open(url)


def test_a_refused_report_only_reproduction_creates_no_output_dir(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = _run(work, "reproduce", "coatnet-layouts", "--report-only", "--output", "out/deeper")
    _refused_in_one_line(done, "no store at")
    assert sorted(os.listdir(work)) == []


def test_a_store_that_could_not_be_created_is_refused_before_anything_runs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = _run(work, "search", _spec(tmp_path, "nowhere"), "--store", f"sqlite:///{work / 'missing' / 'a.db'}")
    _refused_in_one_line(done, "is not a directory")
    assert sorted(os.listdir(work)) == []


def test_a_warm_start_from_a_study_of_another_family_is_refused_naming_both(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    url = f"sqlite:///{work / 'archsearch.db'}"
    with Store.open(url) as store:
        store.create_study("cait-first", tiny_search_spec("cait-first"), {"top1": "max", "flops": "min"})
    spec = {
        "name": "coatnet-next",
        "family": "coatnet",
        "base_model": "coatnet_tiny32",
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
        "training": {"epochs": 1},
        "params": {"layout": {"choice": ["CCTT", "CTTT"]}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "random", "n_trials": 2, "warm_start": {"study": "cait-first"}},
    }
    path = tmp_path / "coatnet.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = _run(work, "search", str(path))
    _refused_in_one_line(done, "search.warm_start.study: study 'cait-first' searched cait models")
    assert sorted(os.listdir(work)) == ["archsearch.db"]
