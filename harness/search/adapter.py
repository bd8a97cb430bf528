"""The one place that reads private fields or modules of Ray, Ray Tune and Optuna.

Torch's private modules (Dynamo, Inductor) have their own adapter in the layer that uses them,
:mod:`trials.devices.torch_internals`. ``tests/test_engine_room.py`` walks the AST of every package and
``benchmarks/`` so that no other module reaches into a private name of Ray, Optuna or torch.

Telling Optuna about a trial by its number, without loading every trial of a large study, needs the
study's storage and id (``Study._storage``, ``Study._study_id``): Optuna has no public call for it. The
searcher itself (:class:`harness.search.propose.searcher.ArchsearchSearch`) uses Optuna's public
ask/tell only. A minor upgrade may rename any private name used here; every use goes through this
module, checked when a searcher starts (:func:`check_study`), and ``tests/test_optuna_fields.py`` and
``tests/test_engine_room.py`` exercise each on the installed Ray and Optuna, so such an upgrade fails a
test instead of every search.
"""

from __future__ import annotations

import contextlib
import copy
import json
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from trials.atomic import atomic_write
from trials.errors import EnvironmentProblem
from trials.lazy import lazy_import

# Lazy: the CLI imports this module (through harness.search.cluster.join) to check its arguments.
optuna = lazy_import("optuna")
ray = lazy_import("ray")
psutil = lazy_import("psutil")  # the local Ray's processes' own children, to end with it
ray_raylet = lazy_import("ray._raylet")
ray_cloudpickle = lazy_import("ray.cloudpickle")
ray_search_generator = lazy_import("ray.tune.search.search_generator")
ray_tune_controller = lazy_import("ray.tune.execution.tune_controller")
ray_train_session = lazy_import("ray.train._internal.session")  # _TrainingResult: a checkpoint and its metrics
ray_services = lazy_import("ray._private.services")
optuna_hypervolume_history = lazy_import("optuna.visualization._hypervolume_history")
optuna_transform = lazy_import("optuna._transform")  # how BoTorchSampler encodes a configuration

STUDY_FIELDS = {"_storage": "the study's BaseStorage", "_study_id": "the study's id in that storage"}


class UnsupportedVersion(EnvironmentProblem, RuntimeError):
    """Ray Tune or Optuna changed a field archsearch reads: pin the versions the constraints name."""


# The releases this module's private names are tested on, [first, past-last) as (major, minor):
# constraints.txt pins the same (a test keeps them equal); pyproject allows wider, untested ranges.
TESTED_RELEASES = {"ray": ((2, 60), (2, 61)), "optuna": ((5, 0), (5, 1))}


def untested_releases() -> list[str]:
    """Each installed Ray or Optuna outside :data:`TESTED_RELEASES`, as one phrase (empty: all tested)."""
    found = []
    for package, (first, past) in TESTED_RELEASES.items():
        try:
            installed = version(package)
        except PackageNotFoundError:
            continue
        release = tuple(int(part) for part in [*installed.split("."), "0"][:2] if part.isdigit())
        if not first <= release < past:
            found.append(f"{package} {installed} (tested: {first[0]}.{first[1]}.x)")
    return found


def check_releases() -> None:
    """Warn, once per process, where Ray or Optuna is a release this module was not tested on: a
    private name it reads may have moved (a missing one raises :class:`UnsupportedVersion` where used)."""
    untested = untested_releases()
    if untested:
        warnings.warn(
            f"archsearch reads private fields of Ray and Optuna and was not tested on {', '.join(untested)}: "
            "install with -c constraints.txt (pip install -c constraints.txt -e .)",
            RuntimeWarning,
            stacklevel=2,
        )


def check_study(study: Any) -> None:
    """Raise UnsupportedVersion naming the field if the installed Optuna's Study lacks one this module
    reads; warn where Ray or Optuna is a release outside the tested ones (:func:`check_releases`)."""
    check_releases()
    for name, meaning in STUDY_FIELDS.items():
        if not hasattr(study, name):
            raise UnsupportedVersion(f"optuna.Study has no {name} ({meaning}): unsupported Optuna version")


def frozen_trial(study: Any, number: int) -> Any:
    """One trial of ``study`` by number, read alone (``study.trials[number]`` would load them all)."""
    storage = study._storage
    return storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study._study_id, number))


# Ray: the local node this driver started (ray._private.worker._global_node); no public API
# says whether its GCS or raylet died, or kills them when the driver must exit at once.


def dead_local_ray_processes(kinds: tuple[str, ...]) -> list[tuple[str, int]]:
    """(kind, exit code) of the local Ray's core processes that have exited; empty when this driver
    did not start Ray itself (a cluster) or everything is alive."""
    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not getattr(node, "head", False):
        return []
    dead = []
    for kind in kinds:
        for info in node.all_processes.get(kind, ()):
            code = info.process.poll()
            if code is not None:
                dead.append((kind, code))
    return dead


def end_local_ray_at_once_on_shutdown() -> None:
    """``ray.shutdown()`` (the driver's exit) ends the local Ray's processes with SIGKILL, as
    :func:`kill_local_ray` does, instead of SIGTERM and a second's wait for each: they were started
    with the stop signals blocked (:func:`harness.stop_signals.blocked_in_children`), so SIGTERM would
    only ever wait. Nothing of a search lives in them by then (Tune's state and the store are written);
    the workers go with the raylet (Ray's kernel fate-sharing). Ray has no public option for either."""
    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not node.head:
        return
    kill_all = node.kill_all_processes

    def kill_all_at_once(check_alive: bool = True, allow_graceful: bool = False, wait: bool = False) -> None:
        started = _started_by(node)
        kill_all(check_alive=check_alive, allow_graceful=False, wait=wait)
        _kill_left(started)

    node.kill_all_processes = kill_all_at_once


def kill_local_ray() -> None:
    """Kill what is left of the local Ray this driver started (a head node), ungracefully."""
    node = getattr(ray._private.worker, "_global_node", None)
    with contextlib.suppress(Exception):
        if node is not None and node.head:
            started = _started_by(node)
            node.kill_all_processes(check_alive=False, allow_graceful=False)
            _kill_left(started)


def _started_by(node: Any) -> list[Any]:
    """The processes the local Ray's own processes started (the raylet's dashboard and runtime-env agents):
    ``kill_all_processes`` kills the ones it started itself, and these outlived the driver by a minute or more
    (their stop signals blocked, waiting to notice the raylet gone). Read before the kill: orphans lose their
    parent."""
    started = []
    for infos in node.all_processes.values():
        for info in infos:
            with contextlib.suppress(psutil.Error, AttributeError):
                started.extend(psutil.Process(info.process.pid).children(recursive=True))
    return started


def _kill_left(processes: list[Any]) -> None:
    """SIGKILL each of ``processes`` still running (psutil checks it is the same process, not a reused PID)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


# Ray: its cached config, the bootstrap address of a local cluster, and a GCS client for the token
# pre-flight check (harness.search.cluster.join); Ray has no public call for any of the three.


def refresh_ray_config() -> None:
    """Make Ray re-read its config (after ``RAY_AUTH_MODE`` was set in this process)."""
    ray_raylet.Config.initialize("")


def local_cluster_address() -> str | None:
    """The address ``--address auto`` means (RAY_ADDRESS, else a cluster started on this machine)."""
    return ray_services.canonicalize_bootstrap_address("auto")


def gcs_client(address: str) -> Any:
    return ray_raylet.GcsClient(address=address)


# Optuna's GridSampler numbers its points by position in ``_all_grids`` and visits every position
# below ``_n_min_trials``; keeping only the chosen tuples makes it visit just those (search.grid's
# union of sub-grids). ``_param_names`` orders a point's values.
GRID_FIELDS = {"_param_names": "sorted parameter names", "_all_grids": "list of value tuples",
               "_n_min_trials": "grid points to visit"}  # fmt: skip


def restrict_grid(sampler: Any, points: list[dict[str, Any]]) -> int:
    """Make a GridSampler visit only ``points`` (each once); returns how many it will visit."""
    missing = [name for name in GRID_FIELDS if not hasattr(sampler, name)]
    if missing:
        raise EnvironmentProblem(
            f"this Optuna's GridSampler lacks {', '.join(missing)} that archsearch's grid relies on "
            f"(optuna {optuna.__version__}): install the version in constraints.txt"
        )
    keep = {tuple(repr(point[name]) for name in sampler._param_names) for point in points}
    sampler._all_grids = [grid for grid in sampler._all_grids if tuple(map(repr, grid)) in keep]
    sampler._n_min_trials = len(sampler._all_grids)
    return len(sampler._all_grids)


def grid_size(sampler: Any) -> int:
    return len(sampler._all_grids)


def hypervolume_history_info(study: Any, reference_point: Any) -> Any:
    """Optuna's own hypervolume history (what ``plot_hypervolume_history`` draws): the benchmark's
    reference for ours; Optuna exposes it only through the plot."""
    return optuna_hypervolume_history._get_hypervolume_history_info(study, reference_point)


def relocate_saved_search_state(experiment_dir: str, storage_path: str, experiment_name: str) -> bool:
    """New trials of a restored experiment go where the experiment is now, not where it was saved.

    Ray Tune 2.x moves a restored experiment's own trials to its new place, but a trial its search
    algorithm creates after the restore takes the storage saved with the algorithm's experiment
    (``search_gen_state-*.json``, a cloudpickle): a results dir moved or mounted elsewhere (another
    machine, a copied fixture) made every new trial fail ``Unable to set up cluster storage`` at its
    first checkpoint. Before ``fit()`` restores that state, the newest state file (the one Ray
    loads) is rewritten with the experiment's real place, to a temporary name and renamed. Returns
    whether it was rewritten. Local storage only (a URI stays as saved).
    """
    if "://" in storage_path:
        return False
    pattern = ray_search_generator.SearchGenerator.CKPT_FILE_TMPL.format("*")
    saved = sorted(Path(experiment_dir).glob(pattern))
    if not saved:
        return False
    newest = saved[-1]  # Ray loads the greatest name (a timestamp)
    state = ray_cloudpickle.loads(newest.read_bytes())
    experiment = state.get("experiment") if isinstance(state, dict) else None
    storage = getattr(experiment, "storage", None)
    if storage is None or (storage.storage_fs_path, storage.experiment_dir_name) == (storage_path, experiment_name):
        return False
    moved = copy.copy(storage)
    moved.storage_fs_path, moved.experiment_dir_name = storage_path, experiment_name
    experiment.storage = moved
    experiment.spec["storage"] = moved
    atomic_write(newest, ray_cloudpickle.dumps(state))
    return True


_PICKLED = "CLOUDPICKLE_FALLBACK"  # how Tune's JSON encoder writes an object it cannot write as JSON


def _unpickled(blob: Any) -> Any:
    return ray_cloudpickle.loads(bytes.fromhex(blob["value"])) if isinstance(blob, dict) else None


def _pickled(value: Any) -> dict[str, str]:
    return {"_type": _PICKLED, "value": ray_cloudpickle.dumps(value).hex()}


def repoint_lost_checkpoints(experiment_dir: str) -> list[str]:
    """A saved trial whose latest checkpoint is gone resumes from the newest one it has on disk, or from its
    start, instead of failing; returns the trials repointed.

    Ray Tune deletes a trial's older checkpoint as soon as it registers a newer one (``num_to_keep=1``)
    but writes the experiment state that names the latest only every 10 s or more. A driver SIGKILLed in
    between (the OOM killer, a lost node) leaves a state naming a checkpoint that no longer exists, and
    ``Tuner.restore`` then fails that trial at every retry ("does not exist on storage anymore"): a trial
    lost on resume. Before the restore, each such trial of the newest state file (the one Ray loads) is
    pointed at the newest ``checkpoint_*`` of its own directory, with the metrics Ray recorded for it, and
    its checkpoint index at that one's (the next is written after it, never over it); with none left it
    starts again. Our trainable resumes from the epoch its checkpoint holds. Local storage only; a trial
    directory that is not where the state says (a moved results dir) is left to Ray's relocation.
    Rewritten to a temporary name and renamed."""
    saved = sorted(Path(experiment_dir).glob(ray_tune_controller.TuneController.CKPT_FILE_TMPL.format("*")))
    if not saved:
        return []
    newest = saved[-1]  # Ray loads the greatest name (a timestamp)
    state = json.loads(newest.read_text())
    repointed = []
    for entry in state.get("trial_data", []):
        trial, metadata = json.loads(entry[0]), json.loads(entry[1])
        manager = _unpickled(metadata.get("checkpoint_manager"))
        latest = getattr(manager, "latest_checkpoint_result", None)
        if latest is None or latest.checkpoint is None or "://" in str(latest.checkpoint.path):
            continue
        named = Path(latest.checkpoint.path)
        if named.exists() or not named.parent.is_dir():
            continue
        on_disk = sorted(p for p in named.parent.glob("checkpoint_*") if p.is_dir() and not p.is_symlink())
        if on_disk:
            replacement = ray_train_session._TrainingResult(
                checkpoint=type(latest.checkpoint)(path=str(on_disk[-1]), filesystem=latest.checkpoint.filesystem),
                metrics=_recorded_metrics(named.parent, on_disk[-1].name) or latest.metrics,
            )
            manager._latest_checkpoint_result, manager._checkpoint_results = replacement, [replacement]
            storage = _unpickled(trial.get("storage"))
            if storage is not None:
                storage.current_checkpoint_index = int(on_disk[-1].name.rsplit("_", 1)[1])
                trial["storage"] = _pickled(storage)
        else:
            manager._latest_checkpoint_result, manager._checkpoint_results = None, []
        metadata["checkpoint_manager"] = _pickled(manager)
        entry[0], entry[1] = json.dumps(trial, indent=2), json.dumps(metadata, indent=2)
        repointed.append(str(trial.get("trial_id")))
    if repointed:
        atomic_write(newest, json.dumps(state, indent=2))
    return repointed


def _recorded_metrics(trial_dir: Path, checkpoint_name: str) -> dict[str, Any] | None:
    """The result Ray recorded with checkpoint ``checkpoint_name`` (its ``result.json`` line), or None."""
    try:
        lines = (trial_dir / "result.json").read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            result = json.loads(line)
            if isinstance(result, dict) and result.get("checkpoint_dir_name") == checkpoint_name:
                return result
    return None


def report_intermediate(study: Any, number: int, step: int, value: float) -> None:
    """Trial ``number``'s value at ``step`` as an Optuna intermediate value (what optuna-dashboard
    draws as its learning curve). ``Trial.report`` refuses a multi-objective study, and an
    archsearch study is one (accuracy against a cost); its storage keeps the value all the same."""
    storage = study._storage
    storage.set_trial_intermediate_value(
        storage.get_trial_id_from_study_id_trial_number(study._study_id, number), step, value
    )


# Optuna's GPSampler reads a study's trials through the private ``Study._get_trials`` (optuna 5.0, the
# version constraints.txt allows): a study seen through :func:`study_with_trials` hands it extra trials
# (the infeasible configurations harness.search.propose.samplers.InfeasibleAwareGPSampler fits), and
# is the study itself in everything else, its storage included.


class _StudyWithTrials:
    def __init__(self, study: Any, extra: list):
        self._study = study
        self._extra = extra

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> list:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        wanted = states is None or optuna.trial.TrialState.COMPLETE in states
        return [*trials, *self._extra] if wanted else trials

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list:
        return self._get_trials(deepcopy=deepcopy, states=states)


def study_with_trials(study: Any, extra: list) -> Any:
    """``study`` as a sampler reads it, with the completed trials ``extra`` added (never written)."""
    if not hasattr(study, "_get_trials"):
        raise EnvironmentProblem(
            f"this Optuna's Study lacks _get_trials, through which its GPSampler reads trials "
            f"(optuna {optuna.__version__}): install the version in constraints.txt"
        )
    return _StudyWithTrials(study, extra)


def search_space_transform(search_space: dict) -> Any:
    """The encoding optuna-integration's BoTorchSampler gives ``search_space`` (Optuna's private
    ``_SearchSpaceTransform`` with its defaults: one-hot categoricals, log and step transforms), so a
    configuration encoded here is a row of the ``train_x`` its candidates function is handed."""
    return optuna_transform._SearchSpaceTransform(search_space)
