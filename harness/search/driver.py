"""The search driver: ``run_search`` wires Optuna, Ray Tune and the store into one Tuner and runs it.

One Tuner over :func:`harness.search.worker.trainable.search_trainable`, with the searcher of
:mod:`harness.search.propose` (Optuna's ask/tell, multi-objective when the spec says so), optional early
stopping (:mod:`harness.search.stop`), ``max_concurrent_trials``, per-trial resources, ``reuse_actors`` and
``FailureConfig`` retries; the callbacks of :mod:`harness.search.record` write the store. The Optuna study
lives in the same database as the store (Optuna's own tables beside ours), so ``optuna-dashboard STORE_URL``
shows it too. What the hooks share during one search is a :class:`harness.search.session.SearchSession`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from ray import exceptions, tune
from ray.tune.logger import JsonLoggerCallback

from dashboards.pareto import study_front
from harness import verify
from harness.search import adapter, experiment_guard
from harness.search.checkpoints import prune_checkpoints
from harness.search.cluster.ray_setup import (
    SearchError,
    check_resources,
    check_storage,
    check_study_name,
    experiment_path,
    init_ray,
    json_results_only,
    quiet_ray,
    ray_hardware,
    storage_location,
)
from harness.search.engine import build_engine
from harness.search.legacy import alias_legacy_modules
from harness.search.propose import warm_start
from harness.search.propose.searcher import leased_optuna_storage
from harness.search.record import trackers
from harness.search.record.reconcile import reconcile, replay_finished
from harness.search.record.trial_end import final_status
from harness.search.session import SearchSession, process_state_restored
from harness.search.stop.hopeless import hopeless_after, hopeless_reason
from harness.search.watch import (
    Heartbeat,
    RayWatch,
    StopWatchdog,
    record_interruption,
    set_study_status,
)
from harness.search.worker.data_parallel import trial_bundles
from harness.search.worker.trainable import search_trainable
from harness.store import Store, StoreError, mask_url
from harness.store.urls import optuna_storage_url, split_secret
from search_space.spec import SearchSpec
from trials.epoch_progress import OnEpoch
from trials.errors import ArchsearchError
from trials.ownership import compile_cache_problem
from trials.status import StudyStatus, TrialStatus


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
    status: str = StudyStatus.COMPLETED  # the study's final status: completed, or failed (no trial completed)
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


def _new_tuner(
    spec: SearchSpec,
    store_url: str,
    name: str,
    storage_path: str,
    session: SearchSession,
    tracking: list | None = None,
    experiment_name: str | None = None,
):
    """A new search's Tuner, and the Optuna storage its searcher asks and tells through (the driver
    reuses it to reconcile the study at the end: opening a storage checks Optuna's schema, ~20 ms).

    ``tracking``: the spec's experiment trackers as Tune callbacks
    (:func:`harness.search.record.trackers.tracker_callbacks`). ``experiment_name``: the results-dir
    entry the study owns (its name, unless a leftover held it: see
    :func:`harness.search.experiment_guard.choose_new_experiment`).
    """
    storage = leased_optuna_storage(store_url, session)
    engine = build_engine(spec, store_url, name, session, storage=storage)
    # A pruned configuration run again resumes from its last checkpoint, in this experiment's trial dirs.
    engine.searcher.checkpoints_in = str(experiment_path(storage_path, experiment_name or name))
    callbacks = [
        *engine.callbacks,
        JsonLoggerCallback(),  # the one per-trial log Tune needs (see ray_setup.json_results_only)
        *(tracking or []),  # search.track: MLflow, TensorBoard (pickled with the run config: no password)
    ]
    searcher, scheduler, stoppers = engine.searcher, engine.scheduler, engine.stoppers
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
            name=experiment_name or name,
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
    on_epoch: OnEpoch | None = None,
    resume_with: str | None = None,
) -> SearchSummary:
    """Run the search the spec describes; every trial lands in the store at ``store_url``.

    ``resume``: continue the interrupted search of that study (``Tuner.restore``): finished trials
    are kept, unfinished ones resume from their last checkpoint, and Optuna trials the driver
    lost are reconciled (told FAIL, stored ``failed`` as interrupted) so none stays RUNNING.
    ``on_epoch``: called in this process with every trial's every epoch (an
    :class:`trials.epoch_progress.EpochProgress`), from the results Tune hands the driver; held by the
    search's session, never pickled (a resumed search takes the one it is given now).
    ``resume_with``: the command that continues this search once it was stopped, said on the stop and
    kept in the study's message; default ``archsearch search --resume STUDY ...``. A caller that
    continues its searches its own way gives its own (``archsearch reproduce`` does: rerun, it runs
    what its studies still lack and writes their summaries). Its store URL must be masked.
    """
    with process_state_restored():  # the environment, umask and log levels it sets are this search's
        return _search(
            spec, store_url, study_name, address, results_dir, resume, verbose, on_epoch=on_epoch,
            resume_with=resume_with,
        )  # fmt: skip


def _search(
    spec: SearchSpec,
    store_url: str,
    study_name: str | None,
    address: str | None,
    results_dir: str | Path | None,
    resume: bool,
    verbose: bool,
    *,
    on_epoch: OnEpoch | None = None,
    resume_with: str | None = None,
) -> SearchSummary:
    started = time.perf_counter()
    name = check_study_name(study_name or spec.name)
    # First: nothing below (the store, Ray's pickles) sees a tracking URI's password, and a missing
    # tracker extra is refused before anything is written.
    spec, tracker_secrets = trackers.without_secrets(spec, store_url)
    tracking = trackers.tracker_callbacks(spec, name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage_path, chosen = storage_location(results_dir)
    if resume and results_dir is None:  # where the study recorded its results, not this directory's
        recorded = recorded_results_root(store_url, name)
        if recorded is not None:
            storage_path, chosen = recorded, True
    command = resume_with or resume_command(name, store_url, address, storage_path, chosen)
    watchdog = StopWatchdog(store_url, name, command)
    # What this search's hooks share; they write to this store and study, whatever Ray pickled.
    session = SearchSession(name, on_stop=watchdog.arm, store_url=split_secret(store_url)[0], on_epoch=on_epoch)
    watchdog.session = session  # its writes go under the lease the session will hold
    try:
        with session.active(), session.handling_signals():
            run = SearchRun(spec, store_url, name, storage_path, chosen, address, resume, verbose, started, command)
            return _run_search(session, run, tracking, tracker_secrets)
    finally:
        watchdog.cancel()


def recorded_results_root(store_url: str, name: str) -> str | None:
    """The absolute results dir study ``name`` recorded (None: no store, no such study, or an older one)."""
    store = Store.open_existing(store_url)
    if store is None:
        return None
    with contextlib.closing(store):
        return store.study_results(name)[0] if name in store.study_names() else None


def _hand_password_to_libpq(password: str | None) -> None:
    """The store's password goes to libpq through ``PGPASSWORD`` (this driver process only), so the
    URL that Ray pickles (searcher, callbacks, Optuna's storage) carries none.

    Called after the local Ray has started: its processes do not inherit it.
    """
    if password is not None:
        os.environ["PGPASSWORD"] = password


def _check_before_writing(run: SearchRun) -> tuple[str, str]:
    """Everything about the study, its warm start and its results dir that can refuse the search,
    checked before anything is written (no store, results dir or study is created by a refused
    search). Returns (the results-dir entry the study owns or will create, its path)."""
    spec, store_url, name, storage_path, resume = run.spec, run.store_url, run.name, run.storage_path, run.resume
    store = Store.open_existing(store_url)  # None: no store yet, created once the checks pass
    with contextlib.closing(store) if store is not None else contextlib.nullcontext():
        known = store is not None and name in store.study_names()
        if resume and not known:
            where = store.url if store is not None else mask_url(store_url)
            raise StoreError(f"cannot resume: study {name!r} is not in {where}")
        if resume and store.study(name)["status"] == StudyStatus.COMPLETED:
            record, counts = store.study(name), store.counts(name, epochs=False)
            raise NothingToResume(
                f"nothing to resume: study {name} completed {counts[TrialStatus.COMPLETED]} trials on "
                f"{record['updated_at']:%Y-%m-%d %H:%M} UTC"
            )
        live = store.live_driver(name) if known else None
        if live is not None:  # said first: --resume would be refused too while it runs
            raise StoreError(
                f"study {name!r} is being run by another driver ({live}): wait for it to end, or stop it "
                f"(Ctrl-C there) and then continue it with: {run.resume_command()}"
            )
        if not resume and known and _has_trials(store, name):
            raise StoreError(
                f"study {name!r} already has trials in {store.url}: use --resume {name} to continue it, "
                "or --name to start a new study"
            )
        # The compile cache the environment chose (its kernels are loaded as code): ours alone, or refused
        # now, before Ray starts, not in every trial (a local Ray's workers inherit this environment).
        if spec.training.get("compile", "auto") is not False and (problem := compile_cache_problem()):
            variable, _, why = problem.partition(": ")
            raise SearchError(variable, why)
        # The warm start's source, the results dir, the experiment dir (a planted link would be
        # followed by Ray): looked at, nothing created.
        if not resume:
            warm_start.check_source(spec, store_url)
        # The results-dir entry the study owns: recorded when it was created (a rename leaves it), or
        # for a new study its name, or the next free entry where a leftover holds the name.
        if known:
            experiment_name = check_study_name(store.study_experiment(name), "the study's recorded experiment")
        else:
            taken = store.recorded_experiments() if store is not None else set()
            experiment_name = experiment_guard.choose_new_experiment(storage_path, name, taken)
        experiment = experiment_path(storage_path, experiment_name)
        if resume:
            experiment_guard.check_experiment_for_resume(experiment)
        else:
            if known:  # an earlier attempt that ran no trial: its Ray state is stale
                experiment_guard.remove_stale_experiment(experiment)
            experiment_guard.check_new_experiment(experiment)
        if experiment_name != name and not known:
            print(
                f"note: {experiment_path(storage_path, name)} holds an earlier experiment (left as it is); "
                f"study {name}'s results go to {experiment}",
                file=sys.stderr,
                flush=True,
            )
    return experiment_name, experiment


@dataclass(frozen=True)
class SearchRun:
    """What one search was asked to do, settled before it starts: the spec (tracking password taken
    out), the store, the study's name, where Ray keeps its results (and whether the user chose it),
    the Ray cluster, whether it resumes, when it started, and the command that continues it once stopped."""

    spec: SearchSpec
    store_url: str
    name: str
    storage_path: str
    chosen: bool  # the results dir was the user's choice (or the study's record), not the default
    address: str | None
    resume: bool
    verbose: bool
    started: float
    resume_with: str  # said when the search stops early (:func:`resume_command` unless the caller gave its own)

    def resume_command(self) -> str:
        return self.resume_with


def _run_search(
    session: SearchSession, run: SearchRun, callbacks: list, tracker_secrets: trackers.TrackerSecrets
) -> SearchSummary:
    """The search's phases in order: everything checked and Ray started (nothing written yet), the
    study claimed, the tuner built or restored, ``fit()``, and the study's end recorded."""
    experiment_name, experiment = _check_and_start_ray(session, run)
    _claim_study(session, run, experiment_name, experiment)
    public_url, password = split_secret(run.store_url)  # what Ray and Optuna get: no password
    _hand_password_to_libpq(password)
    trackers.set_driver_environment(run.spec, tracker_secrets)  # after Ray started, as the store's password
    tuner, optuna_storage = _tuner(session, run, public_url, callbacks, experiment_name, experiment)
    _fit(session, run, tuner)
    stop = session.stop_request
    if stop is not None:
        raise record_interruption(run.store_url, run.name, stop, run.resume_command(), session.lease)
    return _finish(session, run, optuna_storage, experiment)


def _check_and_start_ray(session: SearchSession, run: SearchRun) -> tuple[str, str]:
    """Every check that can refuse the search, and Ray started; (experiment name, its directory).
    A refused search leaves nothing behind (a results dir it created is removed)."""
    created = experiment_guard.check_storage_root(run.storage_path)  # removed again if the search is refused
    try:
        experiment = _check_before_writing(run)
        quiet_ray(run.verbose)
        if sys.stderr.isatty():  # a person watching: a first line now, not after Ray's start-up (5-7 s)
            where = f"joining the Ray cluster at {run.address}" if run.address else "starting a local Ray"
            print(f"[{run.name}] checks passed; {where}...", file=sys.stderr, flush=True)
        with session.deferring_signals():  # a Ctrl-C while Ray starts acts once it has started
            init_ray(run.address, run.spec)
        check_resources(run.spec)
        if run.address:  # before anything is written: a request no node can meet would wait forever
            check_storage(run.chosen, run.storage_path)
    except BaseException:
        experiment_guard.remove_created(created)
        raise
    return experiment


def _claim_study(session: SearchSession, run: SearchRun, experiment_name: str, experiment: str) -> None:
    """Everything checked: only now is anything created (the store, the study), and the study's lease
    taken; every write of this driver to the study from here is conditional on it."""
    spec, name = run.spec, run.name
    with Store.open(run.store_url) as store:
        known = name in store.study_names()
        if known:
            session.lease = store.claim_study(name)  # one driver per study: refused while another live one holds it
        restarting = not run.resume and known
        if not known and experiment_name in store.recorded_experiments():  # taken since it was chosen
            raise StoreError(f"study {name!r}: another study took its results entry {experiment_name} meanwhile")
        spec_record, hardware = spec.model_dump(mode="json"), ray_hardware()
        store.create_study(name, spec_record, dict(spec.objectives), hardware=hardware, experiment=experiment_name)
        # The creator holds the lease; a driver that lost the race to create is refused. Every write of
        # this driver to the study from here is conditional on it (harness.store.liveness).
        session.lease = store.claim_study(name)
        if restarting or store.study_results(name) == (None, None):  # where its results are, and which dir
            # Its experiment directory, created (or on resuming an older study, found) and marked as its own.
            store.record_results(name, run.storage_path, experiment_guard.create_experiment_dir(experiment))
        if restarting:  # an earlier attempt that ran no trial: the study is this spec's from now on
            store.restart_study(name, spec.model_dump(mode="json"), dict(spec.objectives), hardware=ray_hardware())
            _forget_optuna_study(run.store_url, name)


def _tuner(
    session: SearchSession, run: SearchRun, public_url: str, callbacks: list, experiment_name: str, experiment: str
):
    """(the Tuner, the Optuna storage the driver writes through under its lease): restored from the
    experiment on ``--resume``, else new."""
    spec, name = run.spec, run.name
    if run.resume and tune.Tuner.can_restore(experiment):
        optuna_storage = leased_optuna_storage(run.store_url, session)  # a restored searcher's is Ray's: another
        alias_legacy_modules()  # an experiment pickled before the searcher's modules were renamed
        # Tune restores the run config it pickled, callbacks included (the trackers the search started
        # with); Tuner.restore takes no others.
        adapter.relocate_saved_search_state(experiment, run.storage_path, experiment_name)  # a moved results dir
        adapter.repoint_lost_checkpoints(experiment)  # a checkpoint deleted after the last saved state (SIGKILL)
        tuner = tune.Tuner.restore(experiment, trainable=_trainable(spec), resume_errored=True)
        replay_finished(tuner, spec, public_url, name, optuna_storage)
        return tuner, optuna_storage
    if run.resume:
        why = f"cannot resume: no Ray Tune experiment state under {experiment}"
        # The trials a killed driver left running will not be resumed from here: recorded so, as the study.
        set_study_status(run.store_url, name, StudyStatus.INTERRUPTED, why, session.lease, trials=True)
        raise StoreError(f"cannot resume study {name!r}: no Ray Tune experiment state under {experiment}")
    return _new_tuner(spec, public_url, name, run.storage_path, session, callbacks, experiment_name)


def _fit(session: SearchSession, run: SearchRun, tuner) -> None:
    """``tuner.fit()`` with the lease's heartbeat and the watch on the local Ray; a stop (a signal,
    Ray failing under it) is left in the session as a stop request, any other crash recorded."""
    name, store_url = run.name, run.store_url
    watch = RayWatch(store_url, name, run.resume_command(), session)
    with Heartbeat(store_url, name, session), watch, json_results_only():
        try:
            tuner.fit()
        except KeyboardInterrupt:  # a second Ctrl-C/SIGTERM: Ray stopped hard, the last saved state stands
            session.request_stop("interrupted by a second signal", session.stop_signal or 2)
        except ray_failures() as error:  # the local Ray (or the driver's connection to it) failed under it
            line = " ".join(str(error).split())[:300]
            session.request_stop(f"stopped: Ray failed under the driver: {type(error).__name__}: {line}")
        except BaseException as error:  # a crash in Ray: the study did not finish
            why = f"interrupted: {type(error).__name__}: {error}"[:500]
            set_study_status(store_url, name, StudyStatus.INTERRUPTED, why, session.lease, trials=True)
            raise


def _finish(session: SearchSession, run: SearchRun, optuna_storage, experiment: str) -> SearchSummary:
    """The search ran to its end: no trial of it may stay running in Optuna or in the store; the
    study's final status, its front, the checkpoints kept and (on a cluster) the front verified."""
    spec, name = run.spec, run.name
    with Store.open(run.store_url) as store:
        session.hold(store)  # still this driver's study: LeaseLost (one line) where it was taken over
        stopped = hopeless_reason(store, name, hopeless_after(spec), spec.model_dump(mode="json"))
        ruled = session.rule_reason
        if stopped:  # trials still in flight were stopped with the search, not lost
            reconcile(store, name, optuna_storage, stopped=f"stopped: every trial failed with: {stopped}")
        elif ruled:
            reconcile(store, name, optuna_storage, stopped=f"stopped with the search: {ruled}")
        else:
            reconcile(store, name, optuna_storage)
        counts = store.counts(name)
        status, message, spec_problem = final_status(store, name, counts, spec)
        if ruled:  # the user's own rule ended it, trials or not: the study is what they asked for
            none = "" if counts.get(TrialStatus.COMPLETED) else "; no trial completed before it"
            status, message, spec_problem = StudyStatus.COMPLETED, f"stopped early: {ruled}{none}", False
        store.set_study_status(name, status, message=message)
        front = study_front(store, name, dict(spec.objectives))
    keep = spec.search.keep_checkpoints
    if status == StudyStatus.COMPLETED and keep is not True:  # false: none kept; front: the front's final weights
        prune_checkpoints(experiment, keep={int(n) for n in front["number"]} if keep == "front" else ())
    verified = None
    if spec.search.verifies_front and status == StudyStatus.COMPLETED:  # on a whole GPU of the cluster, trials done
        verified = verify.verify_front(run.store_url, name)
    return SearchSummary(
        name, store.url, counts, front, time.perf_counter() - run.started, status, message, spec_problem, verified
    )


def ray_failures() -> tuple[type[BaseException], ...]:
    """What ``fit()`` raises when Ray itself fails under a search, not the search's code: its system
    errors (a lost raylet or GCS, the driver's own connection gone: "Failed to read data from the
    socket") and a connection it lost. The search is then interrupted, resumable, in one line."""
    return (exceptions.RaySystemError, exceptions.LocalRayletDiedError, exceptions.NodeDiedError,
            exceptions.RpcError, ConnectionError)  # fmt: skip


def resume_command(name: str, store_url: str, address: str | None, storage_path: str, chosen: bool) -> str:
    parts = ["archsearch search --resume", name, "--store", mask_url(store_url)]
    if address:
        parts += ["--address", address]
    if chosen:
        parts += ["--results-dir", storage_path]
    return " ".join(parts)


def _forget_optuna_study(store_url: str, name: str) -> None:
    """Delete an earlier attempt's Optuna study (it ran no trial; its objectives may differ)."""
    storage = optuna.storages.RDBStorage(optuna_storage_url(store_url))
    with contextlib.suppress(KeyError):  # KeyError: Optuna never created it
        optuna.delete_study(study_name=name, storage=storage)


def _has_trials(store, name: str) -> bool:
    return store.study_counts(name).total > 0
