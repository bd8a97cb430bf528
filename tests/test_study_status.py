"""A study's status is always true, and a search that cannot succeed ends cleanly, saying why.

* ``running`` only while a driver runs it: a driver that died (checked by PID on this host, by
  heartbeat elsewhere) leaves ``interrupted``; ``completed`` only with completed trials; ``failed``
  otherwise, with the reason in ``status_message``.
* A search whose trials all fail the same way stops after a few of them (real Ray Tune), exits 1
  and is recorded ``failed``; one that asks for GPUs the cluster lacks exits 2 before writing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import optuna
import pytest
import ray
import yaml
from click.testing import CliRunner
from sqlalchemy import update

from harness.cli import main
from harness.search.record.trial_end import final_status
from harness.search.stop.failures import common_error, error_reason
from harness.store import Store
from harness.store.schema import Study
from search_space.validation import load_spec


@pytest.fixture
def store(store_url):
    with Store.open(store_url) as s:
        yield s


def _status(store: Store, name: str) -> tuple[str, str | None]:
    row = store.studies().set_index("name").loc[name]
    return row["status"], row["message"] if isinstance(row["message"], str) else None


def test_a_study_whose_driver_process_died_is_shown_interrupted(store, store_url):
    code = (
        "import sys; from harness.store import Store\n"
        f"s = Store.open({store_url!r}); s.create_study('orphan', {{}}, {{'top1': 'max'}}); s.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)  # creates the study, then exits
    store.create_study("alive", {}, {"top1": "max"})  # this process: still running
    status, message = _status(store, "orphan")
    assert status == "interrupted" and "stopped before the search ended" in message
    assert _status(store, "alive") == ("running", None)


def test_a_remote_driver_without_a_heartbeat_is_taken_as_gone(store):
    store.create_study("remote", {}, {"top1": "max"})
    store.create_study("remote-fresh", {}, {"top1": "max"})
    stale = datetime.now(timezone.utc) - timedelta(hours=1)
    with store.engine.begin() as conn:
        conn.execute(update(Study).where(Study.name == "remote").values(driver="gpu-node-7 4242 1", updated_at=stale))
        conn.execute(update(Study).where(Study.name == "remote-fresh").values(driver="gpu-node-7 4243 1"))
    status, message = _status(store, "remote")
    assert status == "interrupted" and "no heartbeat from its driver on gpu-node-7" in message
    assert _status(store, "remote-fresh")[0] == "running"  # heard from recently: may well be alive
    store.heartbeat("remote-fresh")
    assert _status(store, "remote-fresh")[0] == "running"


def test_failed_status_keeps_its_reason_and_finished_statuses_clear_the_driver(store):
    store.create_study("s", {}, {"top1": "max"})
    store.set_study_status("s", "failed", message="every trial failed (3), all with: boom")
    assert _status(store, "s") == ("failed", "every trial failed (3), all with: boom")
    assert store.study("s")["driver"] is None


def _finish(store: Store, study: str, rows: list[tuple[str, str | None]]) -> dict[str, int]:
    store.create_study(study, {}, {"top1": "max", "flops": "min"})
    for number, (status, error) in enumerate(rows):
        final = {"top1": 50.0} if status == "completed" else None
        store.finish_trial(study, number, status=status, config={}, error=error, final=final)
    return store.counts(study)


@pytest.mark.parametrize(
    ("rows", "expected", "fragment", "spec_problem"),
    [
        ([("completed", None), ("failed", "x")], "completed", None, False),
        (
            [("infeasible", "violates flops <= 10"), ("infeasible", "violates flops <= 10")],
            "failed",
            "infeasible",
            True,
        ),
        (
            [
                ("failed", "Traceback (most recent call last):\n  ...\nValueError: no data"),
                ("failed", "ValueError: no data"),
            ],
            "failed",
            "every trial failed (2), all with: ValueError: no data",
            False,
        ),
        (
            [("failed", "a"), ("failed", "b"), ("diverged", None)],
            "failed",
            "no trial completed (2 failed, 1 diverged)",
            False,
        ),
    ],
    ids=["completed", "all-infeasible", "same-error", "mixed"],
)
def test_final_status_of_a_search(store, rows, expected, fragment, spec_problem):
    spec = load_spec(
        {
            "name": "s",
            "family": "cait",
            "base_model": "cait_tiny32",
            "objectives": {"top1": "max"},
            "params": {"depth": {"int": [2, 4]}},
        }
    )
    counts = _finish(store, "s", rows)
    status, message, blame_spec = final_status(store, "s", counts, spec)
    assert status == expected and blame_spec == spec_problem
    assert (message is None) if fragment is None else (fragment in message)


def test_a_shared_sampled_value_keeps_a_failing_search_going():
    from harness.search.stop.failures import shared_searched_value

    spec = {"family": "cait", "params": {"data.name": {"choice": ["synthetic", "cifar10"]}, "depth": {"int": [1, 4]}}}
    same_data = [{"data": {"name": "cifar10"}, "model": {"depth": d}} for d in (1, 2, 3)]
    assert shared_searched_value(spec, same_data) == ("data.name", "cifar10")  # cifar10 may be the cause
    spread = [{"data": {"name": n}, "model": {"depth": d}} for n, d in (("cifar10", 1), ("synthetic", 2))]
    assert shared_searched_value(spec, spread) is None  # fails whatever was sampled: the setup is broken


def test_error_reasons():
    assert error_reason("Traceback (most recent call last):\n  File x\nRuntimeError: out of memory\n\n") == (
        "RuntimeError: out of memory"
    )
    assert common_error(["a\nKeyError: 'x'", "KeyError: 'x'"]) == "KeyError: 'x'"
    assert common_error(["KeyError: 'x'", "KeyError: 'y'"]) is None
    assert common_error([]) is None


def _raise_inside(message: str) -> None:
    raise RuntimeError(
        message
    )


def test_a_failure_summary_names_the_error_not_a_line_of_source():
    """Issue 56: a trial's error is ``Type: message`` and then its frames, whose last line is source
    (``raise RuntimeError(``); the summary quoted that line. It is the type and the message's first line."""
    from trials.runner import _error_text

    try:
        _raise_inside("Detected that you are using FX to torch.jit.trace a dynamo-optimized function.\nmore")
    except RuntimeError as error:
        text = _error_text(error)
    assert text.splitlines()[-1].strip().startswith(("raise RuntimeError(", "message", ")"))  # source last
    reason = "RuntimeError: Detected that you are using FX to torch.jit.trace a dynamo-optimized function."
    assert error_reason(text) == reason
    assert common_error([text, text]) == reason
    # Ray's error file: the frames first, the exception last; a chained one names the last exception.
    ray_file = "Failure # 1 (occurred at 2026-11-28)\nray::ImplicitFunc.train() (pid=1)\n  File \"x.py\", line 3\n"
    ray_file += "    raise ValueError(\nValueError: bad value\n"
    assert error_reason(ray_file) == "ValueError: bad value"
    chained = "Traceback (most recent call last):\n  File x\nKeyError: 'a'\n\nDuring handling of the above "
    chained += "exception, another exception occurred:\n\nTraceback (most recent call last):\n  File y\n"
    chained += "torch.OutOfMemoryError: CUDA out of memory\n"
    assert error_reason(chained) == "torch.OutOfMemoryError: CUDA out of memory"
    assert error_reason("the worker died") == "the worker died"  # no exception line: the first line


# -- real searches ------------------------------------------------------------------------------------


@pytest.fixture
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _spec(tmp_path, **changes) -> dict:
    spec = {
        "name": "broken",
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
        "training": {"epochs": 1},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        "params": {"depth": {"int": [1, 2]}, "lr": {"float": [1e-4, 1e-2], "log": True}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "random", "n_trials": 8, "concurrency": 1, "seed": 0},
    }
    spec.update(changes)
    return spec


@pytest.mark.slow
def test_a_search_whose_trials_all_fail_the_same_way_stops_and_is_recorded_failed(local_ray, tmp_path):
    empty = tmp_path / "no-cifar-here"
    empty.mkdir()  # exists, so the spec validates; holds no CIFAR, so every trial fails at load time
    spec = _spec(tmp_path, data={"name": "cifar10", "data_dir": str(empty), "batch_size": 32})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = CliRunner().invoke(main, ["search", str(path), "--store", url, "--results-dir", str(tmp_path / "ray")])
    assert result.exit_code == 1, result.output
    assert "all with: ConfigError: data.data_dir: cifar10 not found" in result.output
    with Store.open(url, create=False) as store:
        counts = store.counts("broken")
        status, message = _status(store, "broken")
    # Stopped early: at 3 failures, or a few more while the failures all shared a sampled depth.
    assert 3 <= counts["failed"] < 8 and counts["completed"] == 0 and counts["running"] == 0
    assert status == "failed" and message.startswith(f"every trial failed ({counts['failed']})")
    study = optuna.load_study(study_name="broken", storage=url)
    assert optuna.trial.TrialState.RUNNING not in {t.state for t in study.trials}
    listed = CliRunner().invoke(main, ["studies", "--store", url, "--format", "json"])
    assert json.loads(listed.output)[0]["status"] == "failed"


@pytest.mark.slow
def test_gpus_on_a_cluster_without_gpus_is_a_clear_error_before_anything_is_written(local_ray, tmp_path):
    spec = _spec(tmp_path, search={"sampler": "random", "n_trials": 2, "resources": {"cpus": 1, "gpus": 1}})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = CliRunner().invoke(main, ["search", str(path), "--store", url, "--results-dir", str(tmp_path / "ray")])
    assert result.exit_code == 2, result.output
    assert "search.resources.gpus: each trial asks for 1 GPU but the Ray cluster has none" in result.output
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "ray").exists()  # no store, no results dir


def test_resume_of_a_completed_study_says_there_is_nothing_to_resume_and_changes_nothing(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main
    from harness.store import Store
    from search_space.validation import load_spec

    spec = load_spec(
        {"name": "done", "family": "cait", "base_model": "cait_tiny32", "objectives": {"top1": "max"}},
        check_paths=False,
    )
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("done", spec.model_dump(mode="json"), dict(spec.objectives))
        store.finish_trial("done", 0, status="completed", config={}, final={"top1": 50.0})
        store.set_study_status("done", "completed")
        before = store.study("done")
    result = CliRunner().invoke(main, ["search", "--resume", "done", "--store", url, "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().startswith("nothing to resume: study done completed 1 trials on ")
    assert len(result.output.strip().splitlines()) == 1
    with Store.open(url, create=False) as store:
        assert store.study("done") == before  # not re-run, not rewritten
    assert list(tmp_path.iterdir()) == [tmp_path / "store.db"]  # no Ray experiment started
