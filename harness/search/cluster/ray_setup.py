"""Where a search runs: the Ray it connects to (local or a cluster), what it checks there before
anything is written (resources some node can meet, storage every node reads), and where its
experiment lives (a study name that is safe as a directory, a path that stays under its root).

Kept apart from :mod:`harness.search.driver`, which holds the search's life cycle; :mod:`harness.search.cluster.join`
does the first contact with a cluster (token, pre-flight).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.search import adapter
from harness.search.cluster.join import alive_nodes, join
from harness.stop_signals import blocked_in_children
from search_space.spec import SearchSpec
from trials.devices import mps
from trials.devices.cpus import usable_cpus
from trials.errors import RunError, capped
from trials.lazy import lazy_import

ray = lazy_import("ray")  # only once a search starts: the CLI imports this module to check arguments
ray_scheduling = lazy_import("ray.util.scheduling_strategies")


class SearchError(RunError, RuntimeError):
    """The search cannot start here (e.g. it asks for GPUs the cluster does not have): one line, exit 2."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def quiet_ray(verbose: bool) -> None:
    """Keep the terminal to archsearch's own lines: Ray's banners and INFO logs only with ``verbose``.

    The per-trial progress line and the final front are archsearch's; Ray Tune's experiment box,
    TensorBoard hint and "wrote the experiment state" lines are not shown by default.
    """
    if verbose:
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # the legacy reporter, silent at verbose=0
    for name in ("ray", "ray.tune", "ray.train", "ray._private.authentication.authentication_token_setup"):
        logging.getLogger(name).setLevel(logging.ERROR)


AUTO_LOGGERS_ENV = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"


@contextlib.contextmanager
def json_results_only() -> Iterator[None]:
    """While a search's ``fit()`` runs, Ray Tune adds none of its automatic per-trial loggers; the
    search passes Tune's JSON logger itself (``result.json``: Tune's ResultGrid and a restored
    experiment read it). The CSV and TensorBoard loggers would write every result twice more per
    trial (the store keeps every epoch already): about 10 ms of the driver's time per result with
    archsearch's ~60 metrics, and two files per trial on the results dir. Tune reads the variable
    when ``fit()`` starts; it is put back as it was afterwards.
    """
    previous = os.environ.get(AUTO_LOGGERS_ENV)
    os.environ[AUTO_LOGGERS_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(AUTO_LOGGERS_ENV, None)
        else:
            os.environ[AUTO_LOGGERS_ENV] = previous


def init_ray(address: str | None, spec: SearchSpec) -> None:
    if ray.is_initialized():
        return
    if address:
        join(address)  # the cluster's token, a pre-flight check, one-line errors (ClusterError)
    else:
        # address="local": always a fresh local Ray, never a cluster someone else started here, sized
        # to the CPUs this process may use: a request beyond them is refused (check_resources), and
        # trials beyond them queue, rather than Ray promising CPUs the machine does not have. Its
        # processes ignore a stop signal sent to the whole process group (blocked_in_children): the
        # driver gets it too, stops the search and ends them.
        with blocked_in_children():
            ray.init(
                address="local",
                num_cpus=usable_cpus(),
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        adapter.end_local_ray_at_once_on_shutdown()


def is_uri(path: str) -> bool:
    """``s3://bucket/path``, ``gs://...``, ``file://...``: a location Ray Tune's (pyarrow) filesystems open."""
    return "://" in path


def storage_location(results_dir: str | Path | None) -> tuple[str, bool]:
    """(Ray Tune's storage path, whether the user chose it): a local or shared directory, or a URI."""
    if results_dir is None:
        return str((Path.cwd() / "ray_results").resolve()), False
    text = str(results_dir)
    if is_uri(text):
        return text.rstrip("/"), True
    return str(Path(text).expanduser().resolve()), True


def check_storage(results_dir_chosen: bool, storage: str) -> None:
    """On a cluster of several nodes, trial checkpoints must live where every node can read them."""
    nodes = alive_nodes()
    if nodes > 1 and not results_dir_chosen:
        raise SearchError(
            "--results-dir",
            f"the Ray cluster has {nodes} nodes, and trials checkpoint under {storage} on this machine only: a "
            "trial retried on another node could not resume. Pass --results-dir with a directory every node "
            "mounts (NFS, e.g. /shared/ray_results) or cloud storage (s3://bucket/path, gs://bucket/path)",
        )


def check_resources(spec: SearchSpec) -> None:
    """Every trial's resource request fits on some node of the Ray cluster; otherwise Ray would
    queue the trials forever. Raises :class:`SearchError` naming ``search.resources``."""
    wanted = spec.search.resources
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", True)]
    most_gpus = max((r.get("GPU", 0) for r in nodes), default=0)
    most_cpus = max((r.get("CPU", 0) for r in nodes), default=0)
    if wanted.gpus > 0 and most_gpus == 0:
        raise SearchError(
            "search.resources.gpus",
            f"each trial asks for {wanted.gpus:g} GPU but the Ray cluster has none; set gpus: 0 to train on CPUs, "
            "or join a cluster with GPUs (--address)",
        )
    if wanted.gpus > most_gpus:
        raise SearchError(
            "search.resources.gpus", f"each trial asks for {wanted.gpus:g} GPUs but no node has more than {most_gpus:g}"
        )
    if wanted.cpus > most_cpus:
        raise SearchError(
            "search.resources.cpus", f"each trial asks for {wanted.cpus:g} CPUs but no node has more than {most_cpus:g}"
        )
    if wanted.mps:
        check_mps([n["NodeID"] for n in ray.nodes() if n.get("Alive", True) and n.get("Resources", {}).get("GPU", 0)])
    total_gpus = sum(r.get("GPU", 0) for r in nodes)
    total_cpus = sum(r.get("CPU", 0) for r in nodes)
    for what, each, total in (("gpus", wanted.gpus, total_gpus), ("cpus", wanted.cpus, total_cpus)):
        if wanted.workers > 1 and wanted.workers * each > total:
            raise SearchError(
                "search.resources.workers",
                f"each trial is {wanted.workers} processes of {each:g} {what[:-1].upper()} "
                f"({wanted.workers * each:g} in all) but the Ray cluster has {total:g}",
            )


def _mps_problem_here() -> str | None:
    return mps.daemon_problem()


def check_mps(node_ids: list[str], timeout_s: float = 60.0) -> None:
    """``search.resources.mps``: the MPS control daemon runs on every node in ``node_ids`` (the GPU
    nodes), checked there by a zero-CPU Ray task pinned to each; refused in one line otherwise."""
    probe = ray.remote(num_cpus=0)(_mps_problem_here)
    pending = [
        probe.options(scheduling_strategy=ray_scheduling.NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        for node in node_ids
    ]
    problems = [problem for problem in ray.get(pending, timeout=timeout_s) if problem]
    if problems:
        more = f" (and {len(problems) - 1} other GPU nodes)" if len(problems) > 1 else ""
        raise SearchError("search.resources.mps", problems[0] + more)


def ray_hardware() -> dict[str, Any]:
    """What the search runs on (recorded with the study, shown in reports)."""
    resources = ray.cluster_resources()
    gpu_names = sorted({k for k in resources if k.startswith("accelerator_type:")})
    return {
        "driver": platform.node(),
        "platform": platform.platform(),
        "cluster_cpus": resources.get("CPU", 0),
        "cluster_gpus": resources.get("GPU", 0),
        "gpu_types": [g.removeprefix("accelerator_type:") for g in gpu_names],
        "nodes": len(ray.nodes()),
    }


STUDY_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"


def check_study_name(name: str, option: str = "--name") -> str:
    """A study name is also a directory name under the results dir: a safe character set, no traversal.
    ``option``: where the name came from (``--name``, ``--resume``, the spec's ``name``), named in the error."""
    if not isinstance(name, str) or not re.fullmatch(STUDY_NAME_PATTERN, name) or ".." in name:
        raise SearchError(
            option,
            f"{capped(name)!r} is not a valid study name: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..'",
        )
    return name


def experiment_path(storage_path: str, name: str) -> str:
    """Ray Tune's experiment directory for the study: always inside ``storage_path``."""
    if is_uri(storage_path):
        return f"{storage_path}/{name}"
    root = Path(storage_path).resolve()
    path = (root / name).resolve()
    if path.parent != root:
        raise SearchError("--name", f"{name!r} would place the experiment outside {root}")
    return str(path)
