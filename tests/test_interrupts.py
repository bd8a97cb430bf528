"""Stopping a search on purpose, as a user on a shared cluster does: Ctrl-C, SIGTERM, a bad --name.

The searches run as real ``archsearch search`` processes (real Ray, Optuna, SQLite store) that
these tests start in their own session and signal by PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import psutil
import pytest
import yaml

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


def _spec(name: str, n_trials: int = 4) -> dict:
    return {
        "name": name,
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 512, "val_size": 64, "batch_size": 32},
        "training": {"epochs": 4, "lr": 1e-3},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        "params": {"embed_dim": {"choice": [32, 48, 64]}, "depth": {"int": [1, 2]}, "lr": {"float": [1e-4, 1e-2]}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "random", "n_trials": n_trials, "concurrency": 1, "seed": 1},
    }


def _start(tmp_path: Path, name: str):
    from harness.store import Store

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(name)))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    common = ["--store", url, "--results-dir", str(tmp_path / "ray")]
    driver = subprocess.Popen(
        [EXE, "search", str(spec_path), *common],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline and driver.poll() is None:  # until one trial completed and another runs
        time.sleep(0.5)
        try:
            with Store.open(url, create=False) as store:
                counts = store.counts(name) if name in store.study_names() else {}
        except Exception:
            continue
        if counts.get("completed", 0) >= 1 and counts.get("running", 0) >= 1:
            break
    assert driver.poll() is None, "the search ended before it could be interrupted"
    return driver, url, common


def _cmdline(process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _state(url: str, name: str):
    from harness.store import Store

    with Store.open(url, create=False) as store:
        counts = store.counts(name, epochs=False)
        study = store.study(name)
    trials = optuna.load_study(study_name=name, storage=url).trials
    return counts, study, [t.state.name for t in trials]


@pytest.mark.slow
def test_ctrl_c_interrupts_the_study_and_resume_finishes_exactly_n_trials(tmp_path):
    driver, url, common = _start(tmp_path, "ctrlc")
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 130, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[ctrlc]")]
    assert len(lines) == 1 and lines[0].startswith("search interrupted by SIGINT"), err[-2000:]
    assert "resume with: archsearch search --resume ctrlc --store" in lines[0]
    counts, study, states = _state(url, "ctrlc")
    assert study["status"] == "interrupted" and counts["failed"] == 0 and counts["running"] == 0
    assert counts["interrupted"] >= 1 and "RUNNING" in states  # resumable: nothing told to Optuna
    assert counts["completed"] == states.count("COMPLETE")

    resumed = subprocess.run([EXE, "search", "--resume", "ctrlc", *common], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    counts, study, states = _state(url, "ctrlc")
    assert study["status"] == "completed"
    assert counts["completed"] == 4 and sum(counts.values()) == 4
    assert states == ["COMPLETE"] * 4


@pytest.mark.slow
@pytest.mark.parametrize(("stop", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_to_the_whole_process_group_still_records_the_interruption(tmp_path, stop, code):
    """A batch scheduler's SIGTERM, or the SIGHUP of a closed terminal (a dropped ssh session, a closed
    tmux pane: issue 57, it ended the driver silently with the study left ``running``), reaches the local
    Ray's processes too; the driver records the interruption and says so with the resume line."""
    name = f"stopped-{stop.name.lower()}"
    driver, url, _ = _start(tmp_path, name)
    started = psutil.Process(driver.pid).children(recursive=True)  # the local Ray, its agents and workers
    assert started
    os.killpg(driver.pid, stop)
    _, err = driver.communicate(timeout=180)
    assert driver.returncode == code, err[-2000:]
    assert f"search interrupted by {stop.name}" in err and "resume with:" in err
    # Nothing the driver started outlives it: the raylet's agents were left for 60-90 s after a SIGHUP.
    _, alive = psutil.wait_procs(started, timeout=10)
    assert not alive, [(p.pid, _cmdline(p)[:2]) for p in alive]
    counts, study, _ = _state(url, name)
    assert study["status"] == "interrupted" and counts["running"] == 0 and counts["failed"] == 0
    # Resuming after it is the path the Ctrl-C and the SIGKILL tests (tests/test_search.py) run to the end.


def test_a_stop_asked_for_by_a_watcher_thread_reaches_rays_graceful_stop_on_the_main_thread():
    """CI, stop 65: the Ray watch saw Ray's processes end by SIGHUP (a signal to the whole process group)
    before the driver's own handler ran; it asked for the stop from its thread, calling Ray's handler,
    whose ``signal.signal`` raised ValueError there; the driver's handler then took the same SIGHUP for
    a second signal and stopped hard. Now the thread's request waits for Tune's next step (the main
    thread), and the signal that follows it is still the graceful stop."""
    import threading

    from harness.search.record.signals import InterruptCallback
    from harness.search.session import SearchSession

    interrupted = threading.Event()
    previous_sigint = signal.getsignal(signal.SIGINT)

    def rays_graceful_stop(sig, frame):  # what ray.tune.tune's handler does, in its order
        interrupted.set()
        signal.signal(signal.SIGINT, previous_sigint)

    session = SearchSession("watched")
    errors = []
    with session.handling_signals():
        signal.signal(signal.SIGINT, rays_graceful_stop)  # fit() installed Ray's handler
        callback = InterruptCallback(session)
        callback.setup()  # takes the signals over from Ray, as in fit()
        watcher = threading.Thread(
            target=lambda: errors.extend(
                [] if session.request_stop("interrupted by SIGHUP", signal.SIGHUP) else ["not first"]
            )
        )
        threading.excepthook, hook = (lambda args: errors.append(args.exc_value)), threading.excepthook
        try:
            watcher.start()
            watcher.join()
        finally:
            threading.excepthook = hook
        assert errors == [] and not interrupted.is_set()  # nothing raised in the thread; not yet handed over
        callback.on_step_begin(iteration=1, trials=[])  # Tune's loop, on the main thread
        assert interrupted.is_set()
        session.on_signal(signal.SIGHUP, None)  # the same SIGHUP reaching the driver: no KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):  # a second one stops hard, as before
            session.on_signal(signal.SIGHUP, None)
    assert session.stop_request.signum == signal.SIGHUP and session.stop_request.exit_code == 129


def test_every_stop_signal_takes_the_interrupt_path_in_a_search_and_in_a_command():
    """One list (harness.stop_signals): a search's session and every command install a handler for each."""
    from harness.search.session import SearchSession
    from harness.stop_signals import EXIT_CODES, STOP_SIGNALS

    assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT} <= set(STOP_SIGNALS)
    assert EXIT_CODES[signal.SIGINT] == 130 and EXIT_CODES[signal.SIGTERM] == 143 and EXIT_CODES[signal.SIGHUP] == 129
    session = SearchSession("s")
    with session.handling_signals():
        assert all(signal.getsignal(stop) == session.on_signal for stop in STOP_SIGNALS)
    assert all(signal.getsignal(stop) != session.on_signal for stop in STOP_SIGNALS)  # put back
    from harness import cli

    previous = cli._catch_signals()  # what every command runs under
    try:
        assert signal.getsignal(signal.SIGINT) is cli._raise_interrupt
        assert all(signal.getsignal(stop) is cli._raise_terminated for stop in STOP_SIGNALS if stop != signal.SIGINT)
        with pytest.raises(cli._Terminated) as terminated:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)  # the handler raises in this thread first
        assert terminated.value.signum == signal.SIGHUP
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".hidden", "x" * 200, "bad name", "ümlaut"])
def test_study_names_that_could_leave_the_results_dir_are_refused(tmp_path, name):
    from click.testing import CliRunner

    from harness.cli import main

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(_spec("ok")))
    store = tmp_path / "s.db"
    result = CliRunner().invoke(
        main,
        ["search", str(spec_path), "--name", name, "--store", f"sqlite:///{store}", "--results-dir", str(tmp_path)],
    )
    assert result.exit_code == 2, result.output
    assert "is not a valid study name" in result.output and len(result.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # nothing written anywhere


def test_the_experiment_path_stays_under_its_root(tmp_path):
    from harness.search.cluster.ray_setup import SearchError, check_study_name, experiment_path

    assert experiment_path(str(tmp_path), "study-1.a_b") == str(tmp_path / "study-1.a_b")
    with pytest.raises(SearchError):
        check_study_name("../../x")
    with pytest.raises(SearchError, match="outside"):
        experiment_path(str(tmp_path), "..")


# -- one driver per study --------------------------------------------------------------------------


def test_a_study_held_by_a_live_driver_cannot_be_claimed_until_that_driver_is_gone(store_url):
    from harness.store import Store, StoreError
    from harness.store.store import driver_identity

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store.open(store_url) as store:
            store.create_study("held", {"name": "held"}, {"top1": "max"})
            store.set_study_status("held", "running", driver=driver_identity(holder.pid))
            with pytest.raises(StoreError, match=rf"being run by another driver \(pid {holder.pid} on "):
                store.claim_study("held")
            holder.kill()
            holder.wait()
            store.claim_study("held")  # a dead driver's lease is taken over
            assert store.study("held")["driver"] == driver_identity()
            store.claim_study("held")  # claiming again is harmless
    finally:
        holder.kill()


@pytest.mark.slow
def test_two_drivers_started_together_on_one_study_only_one_runs(tmp_path):
    from harness.store import Store

    spec = _spec("twice", n_trials=2)
    spec["training"]["epochs"] = 2
    paths = []
    for i in range(2):
        path = tmp_path / f"spec{i}.yaml"
        spec["params"]["depth"] = {"int": [1, 2]} if i == 0 else {"int": [1, 3]}
        path.write_text(yaml.safe_dump(spec))
        paths.append(path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    drivers = [
        subprocess.Popen(
            [EXE, "search", str(p), "--store", url, "--results-dir", str(tmp_path / "ray")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for p in paths
    ]
    outputs = [d.communicate(timeout=600) for d in drivers]
    codes = sorted(d.returncode for d in drivers)
    assert codes == [0, 2], [o[1][-1500:] for o in outputs]
    loser = outputs[[d.returncode for d in drivers].index(2)][1]
    errors = [line for line in loser.splitlines() if line.startswith("Error")]
    assert len(errors) == 1
    assert "being run by another driver (pid" in errors[0] or "already has trials" in errors[0], loser[-1500:]
    with Store.open(url, create=False) as store:
        assert store.counts("twice", epochs=False)["completed"] == 2
        assert len(store.trials("twice")) == 2


@pytest.mark.slow
def test_a_store_that_fills_its_disk_mid_search_stops_it_in_one_line_and_resume_completes(tmp_path):
    """A real outage: the SQLite store lives on a small tmpfs that a file fills mid-search."""
    import shutil

    from harness.store import Store

    fs = tmp_path / "fs"
    fs.mkdir()
    if (
        shutil.which("mount") is None
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(fs)], capture_output=True).returncode
    ):
        pytest.skip("cannot mount a tmpfs here")
    try:
        spec_path = tmp_path / "spec.yaml"
        spec_path.write_text(yaml.safe_dump(_spec("outage")))
        url = f"sqlite:///{fs / 'store.db'}"
        common = ["--store", url, "--results-dir", str(tmp_path / "ray")]
        driver = subprocess.Popen(
            [EXE, "search", str(spec_path), *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.time() + 180
        while time.time() < deadline and driver.poll() is None:
            time.sleep(0.5)
            try:
                with Store.open(url, create=False, read_only=True) as store:
                    if "outage" in store.study_names() and store.counts("outage")["completed"] >= 1:
                        break
            except Exception:
                continue
        assert driver.poll() is None, "the search ended before the disk filled"
        filler = fs / "filler"
        with open(filler, "wb") as handle:  # fill the disk
            try:
                while True:
                    handle.write(b"\0" * 2**20)
            except OSError:
                pass
        _, err = driver.communicate(timeout=300)
        assert driver.returncode == 1, err[-3000:]
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[outage]")]
        assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
        assert lines[0].startswith("search stopped: the store failed while") and "resume with:" in lines[0]
        filler.unlink()

        resumed = subprocess.run([EXE, "search", "--resume", "outage", *common], capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        counts, study, states = _state(url, "outage")
        assert study["status"] == "completed" and counts["completed"] == 4 and sum(counts.values()) == 4
        assert states == ["COMPLETE"] * 4
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def test_a_storage_error_while_asking_optuna_stops_the_search_with_one_line(tmp_path):
    """Optuna wraps a failed commit (a full disk, a server gone) in StorageInternalError, not a
    SQLAlchemy error; the searcher must turn it into the graceful, resumable stop, not raise into Tune."""
    from harness.search.propose.samplers import make_sampler
    from harness.search.propose.searcher import ArchsearchSearch
    from harness.search.session import SearchSession
    from search_space.validation import load_spec

    spec = load_spec(_spec("faulty"))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    storage = optuna.storages.RDBStorage(url)
    session = SearchSession("faulty")
    searcher = ArchsearchSearch(spec, url, "faulty", storage, make_sampler(spec), session)
    assert searcher.suggest("t0") is not None  # the storage works

    def disk_full(*args, **kwargs):
        raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.")

    searcher.study._storage.set_trial_param = disk_full
    assert searcher.suggest("t1") is None
    request = session.stop_request
    assert request is not None and request.exit_code == 1
    assert "StorageInternalError" in request.reason and "\n" not in request.reason


def test_a_grid_searcher_pickled_under_its_old_module_names_still_unpickles():
    """Experiments saved before the rename (``harness.searcher``, ``search_space.grid_sampler``)
    hold those names in Ray's pickles; resume aliases them (harness.search.legacy.LEGACY_MODULES)."""
    import pickle

    from harness.search.legacy import LEGACY_MODULES, alias_legacy_modules
    from harness.search.propose.samplers import TuneGridSampler

    data = pickle.dumps(TuneGridSampler({"depth": [1, 2, 3]}, seed=0), protocol=0)
    old = data.replace(b"charness.search.propose.samplers\n", b"csearch_space.grid_sampler\n")
    assert old != data  # the pickle names the old module
    for name in LEGACY_MODULES:
        sys.modules.pop(name, None)
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old)
    alias_legacy_modules()
    sampler = pickle.loads(old)
    assert isinstance(sampler, TuneGridSampler) and sampler.size == 3


def test_a_searcher_restored_from_an_old_snapshot_counts_the_store_and_reruns_what_the_driver_lost(tmp_path):
    """A driver killed between two of Ray's experiment snapshots: Ray restores the searcher as it was
    at the snapshot, which knows nothing of the trials dispatched after it. Those that finished must
    count towards n_trials (not be trained again); one that was running is lost with the driver and
    its budget slot is dispatched again, so exactly n_trials end with an outcome."""
    from ray.tune.search import Searcher

    from harness.search.propose.samplers import make_sampler
    from harness.search.propose.searcher import ArchsearchSearch
    from harness.search.result_keys import NUMBER_KEY, STATUS_KEY, split_tune_config
    from harness.store import Store
    from search_space.sampling import build_trial_config
    from search_space.validation import load_spec

    spec = load_spec(_spec("lost", n_trials=4))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store.open(url)
    store.create_study("lost", spec.model_dump(mode="json"), dict(spec.objectives))

    def make():
        return ArchsearchSearch(spec, url, "lost", optuna.storages.RDBStorage(url), make_sampler(spec))

    def dispatch(searcher, trial_id):
        number, _, params = split_tune_config(searcher.suggest(trial_id))
        store.start_trial("lost", number, build_trial_config(spec, params), optuna_number=number)
        return number, params

    def complete(searcher, trial_id, number, params, top1):
        result = {STATUS_KEY: "completed", "top1": top1, "flops": 1e6}
        searcher.on_trial_complete(trial_id, {**result, "config": params})
        store.finish_trial("lost", number, status="completed", config=build_trial_config(spec, params), final=result)

    first = make()
    n0, p0 = dispatch(first, "t0")
    complete(first, "t0", n0, p0, 0.5)
    n1, _ = dispatch(first, "t1")  # still running at the snapshot: Ray knows it and resumes it
    first.save(str(tmp_path / "snapshot.pkl"))
    n2, p2 = dispatch(first, "t2")  # after the snapshot: completes, then the driver is killed
    complete(first, "t2", n2, p2, 0.6)
    n3, _ = dispatch(first, "t3")  # after the snapshot, running when the driver is killed: lost

    restored = make()
    restored.restore(str(tmp_path / "snapshot.pkl"))
    assert restored.dispatched == 2  # what the snapshot knew: trials 0 and 1
    # The restored (seeded) sampler proposes trial 2's configuration again first: that is trial 2,
    # recorded as a replayed duplicate that takes no budget; then the lost trial's slot runs again.
    again = restored.suggest("t4")
    assert isinstance(again, dict) and again[NUMBER_KEY] not in (n0, n1, n2, n3)
    assert restored.suggest("t5") == Searcher.FINISHED  # 0, 1 (resumed by Ray), 2 (finished), the new one

    trials = store.trials("lost").set_index("number")
    assert trials.loc[n2, "status"] == "completed" and trials.loc[n3, "status"] == "interrupted"
    duplicates = trials[trials["status"] == "duplicate"]
    assert list(duplicates["duplicate_of"]) == [n2] and duplicates["replayed"].eq(True).all()
    trained = set(trials.index[trials["status"].isin(["completed", "running"])]) | {again[NUMBER_KEY]}
    assert trained == {n0, n1, n2, again[NUMBER_KEY]}  # four trials for n_trials 4, none trained twice
    study = optuna.load_study(study_name="lost", storage=url)
    assert study.trials[n3].state == optuna.trial.TrialState.FAIL
    store.close()


def test_a_second_search_on_a_running_study_names_its_driver_not_resume(tmp_path):
    """Issue 34: it said "use --resume", and --resume was then refused as another driver's."""
    import yaml

    from harness.store import Store
    from harness.store.store import driver_identity

    url = f"sqlite:///{tmp_path / 'store.db'}"
    spec = _spec("busy")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store.open(url) as store:
            store.create_study("busy", spec, {"top1": "max", "flops": "min"})
            store.start_trial("busy", 0, {"model": {}})
            store.set_study_status("busy", "running", driver=driver_identity(holder.pid))
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        for args in (["search", str(tmp_path / "spec.yaml")], ["search", "--resume", "busy"]):
            done = subprocess.run([EXE, *args, "--store", url], capture_output=True, text=True, timeout=120)
            assert done.returncode == 2 and f"being run by another driver (pid {holder.pid} on" in done.stderr
            assert "use --resume" not in done.stderr
            assert f"then continue it with: archsearch search --resume busy --store {url}" in done.stderr
    finally:
        holder.kill()


def test_a_resume_with_no_ray_state_left_records_the_trials_a_killed_driver_left_running(tmp_path):
    """``search --resume`` of a study whose driver was killed, where Ray's experiment state is gone (a new
    machine, a cleaned results dir), cannot resume: it recorded the study ``interrupted`` and left the
    trials the killed driver ran ``running`` under it, for ever. They are recorded ``interrupted`` too."""
    from harness.store import Store
    from harness.store.store import driver_identity

    url = f"sqlite:///{tmp_path / 'store.db'}"
    spec = _spec("killed")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with Store.open(url) as store:
        store.create_study("killed", spec, {"top1": "max", "flops": "min"})
        store.start_trial("killed", 0, {"model": {}})
        store.set_study_status("killed", "running", driver=driver_identity(holder.pid))
    holder.kill()
    holder.wait()
    done = subprocess.run([EXE, "search", "--resume", "killed", "--store", url, "--results-dir", str(tmp_path / "ray")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0 and "cannot resume study 'killed': no Ray Tune experiment state" in done.stderr
    with Store.open(url, create=False) as store:
        assert store.study("killed")["status"] == "interrupted"
        assert store.counts("killed")["running"] == 0 and store.counts("killed")["interrupted"] == 1


def test_a_second_reproduce_on_a_study_another_driver_runs_names_the_reproduce_command(tmp_path):
    """A reproduction's study run by a live driver: the second ``reproduce`` is refused before Ray starts,
    and the way on it names is that ``reproduce`` command with its store, not ``search --resume`` (which
    would write no summary)."""
    from harness.reproduce import coatnet_layouts_spec
    from harness.store import Store
    from harness.store.store import driver_identity

    url = f"sqlite:///{tmp_path / 'store.db'}"
    spec = coatnet_layouts_spec("tiny", "generalisation", 2, dataset="synthetic")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store.open(url) as store:
            store.create_study(spec["name"], spec, {"top1": "max", "train_loss": "min"})
            store.set_study_status(spec["name"], "running", driver=driver_identity(holder.pid))
        args = ["reproduce", "coatnet-layouts", "--scale", "tiny", "--seeds", "2", "--protocol", "generalisation",
                "--dataset", "synthetic", "--output", "out", "--store", url]  # fmt: skip
        done = subprocess.run([EXE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and f"being run by another driver (pid {holder.pid} on" in done.stderr
        assert "--resume" not in done.stderr, done.stderr
        rerun = "archsearch reproduce coatnet-layouts --scale tiny --seeds 2 --protocol generalisation"
        assert f"then continue it with: {rerun} --dataset synthetic --output out --store {url}" in done.stderr
    finally:
        holder.kill()


def test_a_reproduce_whose_continuation_another_driver_runs_is_refused_not_run_twice(tmp_path):
    """Only the sitting being written was checked for a live driver: with the first sitting stopped and
    its continuation ``.2`` run by a live driver whose Ray state is elsewhere (another machine on a
    shared store, another results dir), a second ``reproduce`` started ``.3`` on the very runs ``.2``
    was training, so each was trained and recorded twice. It is refused before Ray starts, naming the
    sitting, its driver and the command that continues the study once that driver is done."""
    from harness.reproduce import coatnet_layouts_spec
    from harness.store import Store
    from harness.store.store import driver_identity
    from search_space.validation import load_spec

    url = f"sqlite:///{tmp_path / 'store.db'}"
    spec = load_spec(coatnet_layouts_spec("tiny", "generalisation", 2, dataset="synthetic")).model_dump(mode="json")
    name = spec["name"]
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store.open(url) as store:
            store.create_study(name, spec, {"top1": "max", "train_loss": "min"})
            run = {"name": "CCTT", "seed": 0}
            store.start_trial(name, 0, run)  # the first sitting, stopped: a run interrupted
            store.finish_trial(name, 0, status="interrupted", config=run, error="interrupted by SIGINT")
            store.set_study_status(name, "interrupted")
            store.create_study(f"{name}.2", {**spec, "name": f"{name}.2"}, {"top1": "max", "train_loss": "min"})
            store.start_trial(f"{name}.2", 0, run)
            store.set_study_status(f"{name}.2", "running", driver=driver_identity(holder.pid))
        args = ["reproduce", "coatnet-layouts", "--scale", "tiny", "--seeds", "2", "--protocol", "generalisation",
                "--dataset", "synthetic", "--output", "out", "--store", url]  # fmt: skip
        done = subprocess.run([EXE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"study '{name}.2' is being run by another driver (pid {holder.pid} on" in done.stderr
        assert f"then continue it with: archsearch {' '.join(args)}" in done.stderr
        with Store.open(url, create=False) as store:
            assert store.study_names() == [name, f"{name}.2"]  # no third sitting
            assert store.study(f"{name}.2")["status"] == "running" and store.counts(f"{name}.2")["running"] == 1
        assert not (tmp_path / "out").exists()
        planned = subprocess.run([EXE, *args, "--plan"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert planned.returncode == 0, planned.stderr[-2000:]  # the plan says so too
        assert f"{name}.2 is being run now by another driver (pid {holder.pid} on" in planned.stdout
        planned = subprocess.run([EXE, *args, "--plan", "--format", "json"], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=120)  # fmt: skip
        (entry,) = json.loads(planned.stdout)["studies"]
        assert [r["study"] for r in entry["running_now"]] == [f"{name}.2"]
    finally:
        holder.kill()


@pytest.mark.parametrize(("signum", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("swallowed", [False, True])
def test_a_signal_reaching_a_command_before_its_own_handlers_exits_in_one_line(monkeypatch, signum, code, swallowed):
    """Issue 34: a SIGINT while a command still imports or starts Ray printed click's "Aborted!" and
    exited 1, or (an import cut short, the KeyboardInterrupt swallowed) failed later with another error.
    The signal is sent to this process from inside a command, so the test does not race a clock."""
    import signal

    from click.testing import CliRunner

    from harness.cli import main, read_commands

    def command(*args, **kwargs):
        try:
            os.kill(os.getpid(), getattr(signal, signum))
        except BaseException:
            if not swallowed:
                raise
        raise AttributeError("partially initialized module 'ray' has no attribute '_private'")

    monkeypatch.setattr(read_commands.studies_command, "callback", command)
    result = CliRunner().invoke(main, ["studies"])
    assert result.exit_code == code, result.output
    assert "Aborted!" not in result.output and "internal error" not in result.stderr
    assert result.stderr.strip() in (f"studies interrupted by {signum}", f"studies terminated by {signum}")


@pytest.mark.parametrize(("signum", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_ray_starts_is_acted_on_once_it_has_started(signum, code):
    """Issue 34: a SIGINT raised as KeyboardInterrupt inside ray.init left a half-connected core
    worker whose teardown crashed the driver (Segmentation fault, exit 139, 1 start in 4). While Ray
    starts, the signal is recorded; the start completes; then the search ends in one resumable line."""
    import signal

    from harness.search import interrupts
    from harness.search.session import SearchSession

    finished = []

    def starting_ray() -> None:
        os.kill(os.getpid(), getattr(signal, signum))  # delivered here, in the middle of the start
        finished.append("the start ran to its end")

    session = SearchSession("starting")
    with (
        session.handling_signals(),
        pytest.raises(interrupts.SearchInterrupted) as stopped,
        session.deferring_signals(),
    ):
        starting_ray()
    assert finished == ["the start ran to its end"]
    assert stopped.value.exit_code == code and f"interrupted by {signum} while Ray started" in str(stopped.value)
    session = SearchSession("started")  # a new search: no stop yet
    with session.handling_signals(), pytest.raises(KeyboardInterrupt):  # outside the start: at once
        os.kill(os.getpid(), getattr(signal, signum))
        finished.append("not reached")
    assert finished == ["the start ran to its end"]


@pytest.mark.slow
def test_ray_dying_under_the_driver_ends_the_search_in_one_line_not_rays_own(tmp_path):
    """Issue 34: when the local Ray died under the driver (its GCS killed), Ray's core worker printed
    "Failed to connect to GCS within 60 seconds" and aborted a minute later. The driver now notices
    within a second, marks the study interrupted, prints one line with the resume command, exits 1."""
    import psutil

    driver, url, _ = _start(tmp_path, "raydied")
    gcs = [p for p in psutil.Process(driver.pid).children(recursive=True) if "gcs_server" in p.name()]
    assert gcs, "no gcs_server among the driver's processes"
    started = time.time()
    gcs[0].kill()
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 1, err[-2000:]
    assert time.time() - started < 45  # Ray's own GCS timeout is 60 s
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[raydied]")]
    assert len(lines) == 1 and "Ray's local processes died under the driver: gcs_server" in lines[0], err[-2000:]
    assert "resume with: archsearch search --resume raydied" in lines[0] and "Failed to connect to GCS" not in err
    counts, study, _ = _state(url, "raydied")
    assert study["status"] == "interrupted" and counts["running"] == 0


def test_a_stop_ends_the_driver_once_the_local_rays_core_is_gone_not_at_the_hard_stop(monkeypatch):
    """Issue 58: with the local Ray's raylet dead under a stop, fit() has nothing to wait for; the watchdog
    gives up after RAY_GONE_GRACE_S, not after HARD_STOP_AFTER_S (set here past any test's timeout, so a
    watchdog that waited for it would fail by pytest's timeout). A returned fit() still cancels it."""
    from harness.search import watch

    monkeypatch.setattr(watch, "HARD_STOP_AFTER_S", 1e6)
    monkeypatch.setattr(watch, "RAY_GONE_GRACE_S", 0.1)
    monkeypatch.setattr(watch, "STOP_POLL_S", 0.01)
    monkeypatch.setattr(watch.adapter, "dead_local_ray_processes", lambda kinds: [("raylet", -15)])
    assert watch.StopWatchdog("sqlite://", "s", "resume")._stopped_in_time() is False
    monkeypatch.setattr(watch.adapter, "dead_local_ray_processes", lambda kinds: [])
    cancelled = watch.StopWatchdog("sqlite://", "s", "resume")
    cancelled.cancel()
    assert cancelled._stopped_in_time() is True


RAY_STARTED_BY_THE_DRIVER = textwrap.dedent(
    """
    import json, os, signal, ray
    from harness.search.cluster.ray_setup import init_ray
    from search_space.validation import load_spec
    from tests.conftest import tiny_search_spec

    init_ray(None, load_spec(tiny_search_spec("mask")))
    node = ray._private.worker._global_node
    pids = {kind: [p.process.pid for p in infos] for kind, infos in node.all_processes.items()}
    def blocked(pid):
        line = next(l for l in open(f"/proc/{pid}/status") if l.startswith("SigBlk:"))
        mask = int(line.split()[1], 16)
        return sorted(s.name for s in signal.Signals if 0 < s < 64 and mask >> (s - 1) & 1)
    worker = ray.get(ray.remote(lambda: os.getpid()).remote())
    seen = {kind: blocked(found[0]) for kind, found in pids.items() if found}
    seen["a worker"] = blocked(worker)
    seen["the driver"] = blocked(os.getpid())
    ray.shutdown()
    left = [pid for found in pids.values() for pid in found if os.path.exists(f"/proc/{pid}")
            and open(f"/proc/{pid}/stat").read().split()[2] != "Z"]
    print(json.dumps({"blocked": seen, "left": left}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal masks in /proc")
def test_the_local_rays_processes_leave_a_group_stop_signal_to_the_driver_and_end_with_it():
    """CI: a SIGTERM to the whole process group ended the raylet before the driver's handler ran, and
    Ray's core worker terminated the driver ("the connection to the plasma store is failed", exit 1)
    with the study left ``running``. The local Ray's processes, its workers too, now block every stop
    signal as Ray blocks SIGINT, so the driver alone acts on it; the driver's own mask is unchanged,
    and Ray's shutdown still ends every process it started."""
    import json

    script = subprocess.run(
        [sys.executable, "-c", RAY_STARTED_BY_THE_DRIVER],
        capture_output=True, text=True, timeout=180, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert script.returncode == 0, script.stderr[-2000:]
    found = json.loads(script.stdout.strip().splitlines()[-1])
    stops = {"SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"}
    for kind in ("gcs_server", "raylet", "a worker"):
        assert stops <= set(found["blocked"][kind]), (kind, found["blocked"])
    assert not stops & set(found["blocked"]["the driver"]), found["blocked"]
    assert found["left"] == [], "Ray's shutdown left processes running"


@pytest.mark.slow
@pytest.mark.parametrize("left_on_disk", ["a-newer-checkpoint", "no-checkpoint"])
def test_a_trial_whose_saved_checkpoint_was_deleted_after_the_last_saved_state_resumes_not_fails(
    tmp_path, left_on_disk
):
    """Ray deletes a trial's older checkpoint as soon as it registers a newer one (``num_to_keep=1``) but
    saves the experiment state naming the latest only every 10 s or more: a driver SIGKILLed in between
    left a state naming a checkpoint that was gone, and ``--resume`` failed that trial at every retry
    ("does not exist on storage anymore"; the SIGKILL test in tests/test_search.py, under load). Made
    here exactly: a stopped search's running trial loses the checkpoint its saved state names, a newer
    one on disk (or none). The resume takes the newest one on disk (or starts the trial again): every
    trial completes, none fails, none is lost."""
    import shutil

    from harness.store import Store

    name = "lost-checkpoint"
    driver, url, common = _start(tmp_path, name)
    deadline = time.time() + 120
    while time.time() < deadline:  # until a trial still running has a checkpoint to resume from
        with Store.open(url, create=False) as store:
            curves = store.learning_curves(name)
        if (curves["status"] == "running").any():
            break
        time.sleep(0.3)
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 130, err[-2000:]
    with Store.open(url, create=False) as store:
        stopped = store.trials(name)
    lost = []
    for number in stopped.loc[stopped["status"] == "interrupted", "number"]:
        (trial_dir,) = (tmp_path / "ray" / name).glob(f"*archsearch_number={number},*")
        on_disk = sorted(trial_dir.glob("checkpoint_*"))
        if not on_disk:
            continue
        named = on_disk[0]  # the older one left is the one the saved state names (Ray deletes the rest)
        newer = named.with_name(f"checkpoint_{int(named.name.split('_')[1]) + 1:06d}")
        if left_on_disk == "a-newer-checkpoint" and not newer.exists():
            shutil.copytree(named, newer)  # registered by the driver that died, after its last saved state
        for checkpoint in on_disk if left_on_disk == "no-checkpoint" else [named]:
            shutil.rmtree(checkpoint)
        lost.append(number)
    assert lost, "no interrupted trial had a checkpoint"
    resumed = subprocess.run([EXE, "search", "--resume", name, *common], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    counts, study, states = _state(url, name)
    assert study["status"] == "completed" and counts["failed"] == 0, resumed.stderr[-3000:]
    assert counts["completed"] == 4 and sum(counts.values()) == 4 and states == ["COMPLETE"] * 4
    with Store.open(url, create=False) as store:
        trials = store.trials(name).set_index("number")
    resumed_from = trials.reindex(columns=["resumed_from_epoch"]).loc[lost, "resumed_from_epoch"].fillna(0)
    if left_on_disk == "a-newer-checkpoint":  # from the newer checkpoint, not from its first epoch
        assert (resumed_from >= 1).all(), resumed_from
    else:
        assert (resumed_from == 0).all(), resumed_from
