"""``archsearch search``: Optuna proposes, Ray Tune dispatches, the store records.

One Tuner over :func:`harness.trainable.search_trainable`, with :class:`ArchsearchSearch`
(OptunaSearch, multi-objective when the spec says so), optional early stopping (MO-ASHA, or ASHA on one metric),
``max_concurrent_trials``, per-trial resources, ``reuse_actors`` and ``FailureConfig`` retries.
The Optuna study lives in the same database as the store (Optuna's own tables beside ours), so
``optuna-dashboard STORE_URL`` shows it too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import ray
from ray import tune
from ray.tune.logger import JsonLoggerCallback

from dashboards.pareto import study_front
from harness import experiment_guard, initial_design, interrupts, stop_rules, trackers, verify, warm_start
from harness.data_parallel import trial_bundles
from harness.early_stopping import make_scheduler
from harness.interrupts import InterruptCallback, SearchInterrupted
from harness.optuna_searcher import ArchsearchSearch, alias_legacy_modules
from harness.ray_setup import (
    check_resources,
    check_storage,
    check_study_name,
    experiment_path,
    init_ray,
    is_uri,
    json_results_only,
    quiet_ray,
    ray_hardware,
    storage_location,
)
from harness.samplers import make_sampler
from harness.stop_rules import StopRulesStopper
from harness.store import Store, StoreError, mask_url
from harness.store.liveness import HEARTBEAT_S
from harness.store.urls import optuna_storage_url, split_secret
from harness.study_outcome import final_status, hopeless_after, hopeless_reason, reconcile, replay_finished
from harness.trainable import search_trainable
from harness.tune_callbacks import HopelessSearchStopper, ProgressCallback, StoreCallback
from search_space.spec import SearchSpec
from trials.errors import ArchsearchError


class NothingToResume(ArchsearchError):
    """``--resume`` of a study that already completed: nothing runs, nothing is rewritten (exit 0)."""

    kind = "nothing to do"
    exit_code = 0


@dataclass
class SearchSummary:
    study: str
    store_url: str
    counts: dict[str, int]
    front: Any  # DataFrame of the Pareto front
    wall_time_s: float
    status: str = "completed"  # the study's final status: completed, or failed (no trial completed)
    message: str | None = None  # why it failed, in one line
    spec_problem: bool = False  # the failure is the spec's (nothing feasible), not the trials'
    verified: Any = None  # with search.verify_front: the front re-measured alone (harness.verify)


def _trainable(spec: SearchSpec):
    """The trainable with its resources: a dict for one process, a placement group of one bundle
    per rank for a data-parallel trial (reserved together, so a trial never waits half-placed)."""
    wanted = spec.search.resources
    trainable = tune.with_parameters(search_trainable, spec=spec.model_dump(mode="json"))
    if wanted.workers > 1:
        return tune.with_resources(trainable, tune.PlacementGroupFactory(trial_bundles(wanted)))
    return tune.with_resources(trainable, {"cpu": wanted.cpus, "gpu": wanted.gpus})


def _new_tuner(spec: SearchSpec, store_url: str, name: str, storage_path: str, tracking: list | None = None):
    """A new search's Tuner, and the Optuna storage its searcher asks and tells through (the driver
    reuses it to reconcile the study at the end: opening a storage checks Optuna's schema, ~20 ms).

    ``tracking``: the spec's experiment trackers as Tune callbacks (:func:`harness.trackers.tracker_callbacks`).
    """
    storage = optuna.storages.RDBStorage(optuna_storage_url(store_url))
    searcher = ArchsearchSearch(spec, store_url, name, storage, make_sampler(spec))
    if spec.search.warm_start is not None:
        warm_start.apply(searcher, spec, store_url)
    elif initial_design.planned_spread(spec):
        initial_design.apply(searcher, spec)
    scheduler = make_scheduler(spec)  # MO-ASHA, Ray's ASHA (mode single), or None
    spec_dict = spec.model_dump(mode="json")
    callbacks = [
        InterruptCallback(),
        StoreCallback(store_url, name, spec_dict),
        ProgressCallback(
            store_url, name, dict(spec.objectives), n_trials=spec.search.n_trials, concurrency=spec.search.concurrency
        ),
        JsonLoggerCallback(),  # the one per-trial log Tune needs (see ray_setup.json_results_only)
        *(tracking or []),  # search.track: MLflow, TensorBoard (pickled with the run config: no password)
    ]
    stoppers = [HopelessSearchStopper(store_url, name, hopeless_after(spec), spec_dict)]
    rules = spec.search.stop.model_dump(exclude_none=True)
    if rules:
        stoppers.append(StopRulesStopper(store_url, name, dict(spec.objectives), rules))
    tuner = tune.Tuner(
        _trainable(spec),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=spec.search.n_trials,
            max_concurrent_trials=spec.search.concurrency,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage_path,
            callbacks=callbacks,
            stop=stoppers,  # a list: a bare callable Stopper would be wrapped as a per-trial function
            failure_config=tune.FailureConfig(max_failures=spec.search.retries),
            # The last checkpoint of each trial is all a retry or a resume needs.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            verbose=0,
        ),
    )
    return tuner, storage


def run_search(
    spec: SearchSpec,
    store_url: str,
    *,
    study_name: str | None = None,
    address: str | None = None,
    results_dir: str | Path | None = None,
    resume: bool = False,
    verbose: bool = False,
) -> SearchSummary:
    """Run the search the spec describes; every trial lands in the store at ``store_url``.

    ``resume``: continue the interrupted search of that study (``Tuner.restore``): finished trials
    are kept, unfinished ones resume from their last checkpoint, and Optuna trials the driver
    lost are reconciled (told FAIL, stored ``failed`` as interrupted) so none stays RUNNING.
    """
    started = time.perf_counter()
    name = check_study_name(study_name or spec.name)
    # First: nothing below (the store, Ray's pickles) sees a tracking URI's password, and a missing
    # tracker extra is refused before anything is written.
    spec, tracker_secrets = trackers.without_secrets(spec, store_url)
    tracking = trackers.tracker_callbacks(spec, name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage_path, chosen = storage_location(results_dir)
    experiment = experiment_path(storage_path, name)
    command = resume_command(name, store_url, address, storage_path, chosen)
    watchdog = _StopWatchdog(store_url, name, command)
    interrupts.reset(on_stop=watchdog.arm)
    stop_rules.reset()
    previous_umask = os.umask(0o077)  # checkpoints, tuner and searcher state on a shared results dir: ours only
    try:
        with interrupts.handling_signals():
            return _run_search(
                spec,
                store_url,
                name,
                storage_path,
                chosen,
                experiment,
                address,
                resume,
                verbose,
                started,
                (tracking, tracker_secrets),
            )
    finally:
        watchdog.cancel()
        os.umask(previous_umask)


def _hand_password_to_libpq(password: str | None) -> None:
    """The store's password goes to libpq through ``PGPASSWORD`` (this driver process only), so the
    URL that Ray pickles (searcher, callbacks, Optuna's storage) carries none.

    Called after the local Ray has started: its processes do not inherit it.
    """
    if password is not None:
        os.environ["PGPASSWORD"] = password


HARD_STOP_AFTER_S = 45.0  # a graceful stop that takes longer than this (Ray's processes gone too) ends the driver


class _StopWatchdog:
    """When a stop is requested, record the study as interrupted at once; end the driver if Ray cannot stop.

    SIGTERM sent to a whole process group (a batch scheduler, ``kill -- -PGID``) also ends the local
    Ray's own processes, and the driver would then wait a minute for Ray's control store before dying
    with exit 1. The store is marked first (the running trials and the study ``interrupted``); if
    ``fit()`` has not returned after :data:`HARD_STOP_AFTER_S`, the driver prints the resume line
    and exits with the signal's code. Ray's experiment state, saved as the search went, resumes.
    """

    def __init__(self, store_url: str, name: str, command: str):
        self.store_url, self.name, self.command = store_url, name, command
        self._cancelled = threading.Event()

    def arm(self, request) -> None:
        """Called from the signal handler: the work happens on a thread (the main thread may hold a
        store transaction that this must not wait for)."""
        threading.Thread(target=self._run, args=(request,), name="archsearch-stop", daemon=True).start()

    def _run(self, request) -> None:
        _interrupted(self.store_url, self.name, request, self.command)
        if self._cancelled.wait(HARD_STOP_AFTER_S):
            return
        message = _interrupted(self.store_url, self.name, request, self.command)
        print(f"\n{message}", file=sys.stderr, flush=True)
        os._exit(request.exit_code)

    def cancel(self) -> None:
        self._cancelled.set()


def _run_search(
    spec: SearchSpec,
    store_url: str,
    name: str,
    storage_path: str,
    chosen: bool,
    experiment: str,
    address: str | None,
    resume: bool,
    verbose: bool,
    started: float,
    tracking: tuple[list, trackers.TrackerSecrets] = ([], trackers.TrackerSecrets()),
) -> SearchSummary:
    with Store.open(store_url) as store:
        if resume and name not in store.study_names():
            raise StoreError(f"cannot resume: study {name!r} is not in {store.url}")
        if resume and store.study(name)["status"] == "completed":
            record, counts = store.study(name), store.counts(name, epochs=False)
            raise NothingToResume(
                f"nothing to resume: study {name} completed {counts['completed']} trials on "
                f"{record['updated_at']:%Y-%m-%d %H:%M} UTC"
            )
        live = store.live_driver(name) if name in store.study_names() else None
        if live is not None:  # said first: --resume would be refused too while it runs
            raise StoreError(
                f"study {name!r} is being run by another driver ({live}): wait for it to end, or stop it "
                "(Ctrl-C there) and then resume it with --resume"
            )
        if not resume and name in store.study_names() and _has_trials(store, name):
            raise StoreError(
                f"study {name!r} already has trials in {store.url}: use --resume {name} to continue it, "
                "or --name to start a new study"
            )
        # Everything checked before anything is written: the warm start's source, the results dir,
        # the experiment dir (a planted link would be followed by Ray).
        if not resume:
            warm_start.check_source(spec, store_url)
        experiment_guard.check_storage_root(storage_path)
        if resume:
            experiment_guard.check_experiment_for_resume(experiment)
        else:
            if name in store.study_names():  # an earlier attempt that ran no trial: its Ray state is stale
                experiment_guard.remove_stale_experiment(experiment)
            experiment_guard.check_new_experiment(experiment)
        if name in store.study_names():
            store.claim_study(name)  # one driver per study: refused while another live driver holds it
        quiet_ray(verbose)
        with interrupts.deferring_signals():  # a Ctrl-C while Ray starts acts once it has started
            init_ray(address, spec)
        check_resources(spec)
        if address:
            check_storage(
                chosen, storage_path
            )  # before anything is written: a request no node can meet would wait forever
        restarting = not resume and name in store.study_names()
        store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives), hardware=ray_hardware())
        store.claim_study(name)  # the creator holds the lease; a driver that lost the race to create is refused
        if restarting:  # an earlier attempt that ran no trial: the study is this spec's from now on
            store.restart_study(name, spec.model_dump(mode="json"), dict(spec.objectives), hardware=ray_hardware())
            _forget_optuna_study(store_url, name)
    public_url, password = split_secret(store_url)  # what Ray and Optuna get: no password
    _hand_password_to_libpq(password)
    callbacks, tracker_secrets = tracking
    trackers.set_driver_environment(spec, tracker_secrets)  # after Ray started, as the store's password
    optuna_storage = optuna_storage_url(store_url)  # a restored searcher's storage is Ray's: open another
    if resume and tune.Tuner.can_restore(experiment):
        alias_legacy_modules()  # an experiment pickled before the searcher's modules were renamed
        # Tune restores the run config it pickled, callbacks included (the trackers the search started
        # with); Tuner.restore takes no others.
        tuner = tune.Tuner.restore(experiment, trainable=_trainable(spec), resume_errored=True)
        replay_finished(tuner, spec, public_url, name)
    else:
        if resume:
            _set_status(
                store_url, name, "interrupted", f"cannot resume: no Ray Tune experiment state under {experiment}"
            )
            raise StoreError(f"cannot resume study {name!r}: no Ray Tune experiment state under {experiment}")
        tuner, optuna_storage = _new_tuner(spec, public_url, name, storage_path, callbacks)
    command = resume_command(name, store_url, address, storage_path, chosen)
    with _Heartbeat(store_url, name), _RayWatch(store_url, name, command), json_results_only():
        try:
            tuner.fit()
        except KeyboardInterrupt:  # a second Ctrl-C/SIGTERM: Ray stopped hard, the last saved state stands
            interrupts.request_stop("interrupted by a second signal", interrupts.current_signal() or 2)
        except BaseException as error:  # a crash in Ray: the study did not finish
            _set_status(store_url, name, "interrupted", f"interrupted: {type(error).__name__}: {error}"[:500])
            raise
    stop = interrupts.current()
    if stop is not None:
        raise _interrupted(store_url, name, stop, resume_command(name, store_url, address, storage_path, chosen))
    # The search ran to its end: no trial of it may stay running in Optuna or in the store.
    with Store.open(store_url) as store:
        stopped = hopeless_reason(store, name, hopeless_after(spec), spec.model_dump(mode="json"))
        ruled = stop_rules.current()
        if stopped:  # trials still in flight were stopped with the search, not lost
            reconcile(store, name, optuna_storage, stopped=f"stopped: every trial failed with: {stopped}")
        elif ruled:
            reconcile(store, name, optuna_storage, stopped=f"stopped with the search: {ruled}")
        else:
            reconcile(store, name, optuna_storage)
        counts = store.counts(name)
        status, message, spec_problem = final_status(store, name, counts, spec)
        if ruled:  # the user's own rule ended it, trials or not: the study is what they asked for
            none = "" if counts.get("completed") else "; no trial completed before it"
            status, message, spec_problem = "completed", f"stopped early: {ruled}{none}", False
        store.set_study_status(name, status, message=message)
        front = study_front(store, name, dict(spec.objectives))
    if status == "completed" and not spec.search.keep_checkpoints:
        prune_checkpoints(experiment)
    verified = None
    if spec.search.verifies_front and status == "completed":  # on a whole GPU of the cluster, trials done
        verified = verify.verify_front(store_url, name)
    return SearchSummary(
        name, store.url, counts, front, time.perf_counter() - started, status, message, spec_problem, verified
    )


def prune_checkpoints(experiment: str) -> int:
    """Remove the trial checkpoints of a completed study (nothing is left to resume); Ray's small
    experiment state stays. Local or shared directories only; returns the bytes freed."""
    if is_uri(experiment) or not Path(experiment).is_dir():
        return 0
    freed = 0
    for checkpoint in Path(experiment).glob("*/checkpoint_*"):
        if checkpoint.is_dir() and not checkpoint.is_symlink():
            freed += sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file())
            shutil.rmtree(checkpoint, ignore_errors=True)
    return freed


def resume_command(name: str, store_url: str, address: str | None, storage_path: str, chosen: bool) -> str:
    parts = ["archsearch search --resume", name, "--store", mask_url(store_url)]
    if address:
        parts += ["--address", address]
    if chosen:
        parts += ["--results-dir", storage_path]
    return " ".join(parts)


def _interrupted(store_url: str, name: str, stop, command: str):
    """Record an interrupted search (running trials and the study ``interrupted``) and say how to resume."""
    counts: dict[str, int] = {}
    try:
        with Store.open(store_url) as store:
            store.interrupt_running_trials(name)
            store.set_study_status(name, "interrupted", message=f"{stop.reason}; resume with: {command}")
            counts = store.counts(name, epochs=False)
    except Exception:  # the store may be what failed: the message still says how to resume
        pass
    done = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    return SearchInterrupted(stop, f"search {stop.reason}{f' ({done})' if done else ''}; resume with: {command}")


def _set_status(store_url: str, name: str, status: str, message: str | None) -> None:
    try:
        with Store.open(store_url) as store:
            store.set_study_status(name, status, message=message)
    except Exception:  # recording the status must never hide the original error
        pass


class _Heartbeat:
    """Touches the study every ``HEARTBEAT_S`` while the search runs, so that a driver that dies on
    another host is recognised (no heartbeat) and its study shown ``interrupted``."""

    def __init__(self, store_url: str, name: str):
        self.store_url, self.name = store_url, name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="archsearch-heartbeat", daemon=True)

    def _run(self) -> None:
        try:
            with Store.open(self.store_url) as store:
                while not self._stop.wait(HEARTBEAT_S):
                    store.heartbeat(self.name)
        except Exception:  # a missed heartbeat must never stop the search
            return

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


RAY_WATCH_S = 1.0  # how often the driver checks that the local Ray it started is still alive
RAY_WATCH_GRACE_S = 2.0  # after a death is seen, before it is reported (a signal may explain it)
RAY_CORE = ("gcs_server", "raylet")  # without either, no trial can finish and Ray's driver only waits


class _RayWatch:
    """Ends the driver in one line when the local Ray it started dies under it (its GCS or raylet
    killed: the OOM killer, a user's ``kill``), instead of Ray's core worker waiting a minute and
    printing its own lines ("Failed to connect to GCS within 60 seconds") before aborting.

    The study and its running trials are marked ``interrupted``, the resume command is printed,
    and the driver exits 1. A cluster joined with ``--address`` has its processes elsewhere: not
    watched here (its head's failure surfaces through Ray).
    """

    def __init__(self, store_url: str, name: str, command: str):
        self.store_url, self.name, self.command = store_url, name, command
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="archsearch-ray-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(RAY_WATCH_S):
            if interrupts.current() is not None:  # a stop was asked for (a signal to the whole group
                continue  # ends Ray too): the stop's own path reports it, with its exit code
            dead = dead_local_ray_processes()
            if not dead:
                continue
            # Ray's processes ended by SIGINT/SIGTERM: a signal to the whole process group (a batch
            # scheduler, Ctrl-C in a terminal), which this driver got too, even if its handler has not
            # run yet (the main thread may be inside Ray's C++): stopped as that signal asks.
            signalled = [-code for _, code in dead if code < 0 and -code in interrupts.EXIT_CODES]
            if signalled:
                interrupts.request_stop(f"interrupted by {signal.Signals(signalled[0]).name}", signalled[0])
                continue
            if self._stop.wait(RAY_WATCH_GRACE_S) or interrupts.current() is not None:
                continue
            if not self._stop.is_set():
                what = ", ".join(f"{kind} (exit {code})" for kind, code in dead)
                request = interrupts.StopRequest(f"stopped: Ray's local processes died under the driver: {what}")
                message = _interrupted(self.store_url, self.name, request, self.command)
                print(f"\n{message}", file=sys.stderr, flush=True)
                _kill_local_ray()  # what is left of it: nothing would stop it after os._exit
                os._exit(request.exit_code)

    def __enter__(self) -> _RayWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def dead_local_ray_processes() -> list[tuple[str, int]]:
    """(kind, exit code) of the local Ray's core processes that have exited; empty when this driver
    did not start Ray itself (a cluster) or everything is alive."""
    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not getattr(node, "head", False):
        return []
    dead = []
    for kind in RAY_CORE:
        for info in node.all_processes.get(kind, ()):
            code = info.process.poll()
            if code is not None:
                dead.append((kind, code))
    return dead


def _kill_local_ray() -> None:
    node = getattr(ray._private.worker, "_global_node", None)
    with contextlib.suppress(Exception):
        if node is not None and node.head:
            node.kill_all_processes(check_alive=False, allow_graceful=False)


def _forget_optuna_study(store_url: str, name: str) -> None:
    """Delete an earlier attempt's Optuna study (it ran no trial; its objectives may differ)."""
    storage = optuna.storages.RDBStorage(optuna_storage_url(store_url))
    with contextlib.suppress(KeyError):  # KeyError: Optuna never created it
        optuna.delete_study(study_name=name, storage=storage)


def _has_trials(store, name: str) -> bool:
    return store.study_counts(name).total > 0
