"""The Python way to launch a search: ``from harness import run_search``.

Optuna users call ``study.optimize``, Ray users ``Tuner.fit``; archsearch users call::

    from harness import run_search

    study = run_search("spec.yaml", store="sqlite:///archsearch.db", name="cait-depth")
    study.front()                      # the same Study that dashboards.load_study returns

It does what ``archsearch search`` does (the same checks, the same driver, the same store rows) and
returns the study instead of printing it. A search that ends early (Ctrl-C, a store outage) raises
:class:`harness.search.interrupts.SearchInterrupted`, which says how to resume; a search whose
trials all failed returns its study, whose ``record["status"]`` is ``failed`` with the reason in
``record["status_message"]``, as Optuna returns a study whose trials failed.

With ``dry_run=True`` it does what ``archsearch check`` does: nothing runs or is written, Ray is not
started, and it returns a :class:`harness.search.dry_run.SearchCheck` (the space, its infeasible share,
the priced costs, the time here, the first proposals as their trials would run them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, overload

from dashboards.study import Study, load_study, store_url_of
from harness.search import driver
from harness.search import dry_run as _dry_run
from harness.search.cluster.ray_setup import check_study_name
from harness.store import Store, resolve_store_url
from search_space.spec import SearchSpec
from search_space.validation import load_spec
from trials.epoch_progress import OnEpoch, check_on_epoch


def _store_url(store: Any) -> str | None:
    """``store`` as a URL: an open :class:`Store` by its engine's URL (the driver and its hooks open
    their own connections), else as :func:`dashboards.study.store_url_of` takes it."""
    if isinstance(store, Store):
        return store.engine.url.render_as_string(hide_password=False)
    return store_url_of(store, "run_search")


SpecSource = str | Path | Mapping[str, Any] | SearchSpec | None


@overload
def run_search(
    spec: SpecSource = None,
    *,
    store: str | os.PathLike | Store | None = None,
    name: str | None = None,
    address: str | None = None,
    results_dir: str | Path | None = None,
    resume: bool = False,
    verbose: bool = False,
    on_epoch: OnEpoch | None = None,
    dry_run: Literal[False] = False,
) -> Study: ...


@overload
def run_search(
    spec: SpecSource = None,
    *,
    store: str | os.PathLike | Store | None = None,
    name: str | None = None,
    address: str | None = None,
    results_dir: str | Path | None = None,
    resume: bool = False,
    verbose: bool = False,
    on_epoch: OnEpoch | None = None,
    dry_run: Literal[True],
) -> _dry_run.SearchCheck: ...


def run_search(
    spec: SpecSource = None,
    *,
    store: str | os.PathLike | Store | None = None,
    name: str | None = None,
    address: str | None = None,
    results_dir: str | Path | None = None,
    resume: bool = False,
    verbose: bool = False,
    on_epoch: OnEpoch | None = None,
    dry_run: bool = False,
) -> Study | _dry_run.SearchCheck:
    """Run the search ``spec`` describes and return its study (read-only, like ``load_study``).

    ``spec``: a YAML path, a mapping, or a :class:`SearchSpec`; with ``resume=True`` it may be left
    out (the store keeps the study's spec). ``store``: a URL, a path to a SQLite store, or an open
    :class:`Store` (what ``load_study`` takes), else ``$ARCHSEARCH_STORE``, else
    ``sqlite:///archsearch.db``. ``name``: the study (default: the spec's name). ``address``: a Ray
    cluster to join (default: a local Ray). ``results_dir``: where Ray Tune keeps checkpoints.
    ``on_epoch``: a function called in this process after every epoch of every trial with an
    :class:`trials.epoch_progress.EpochProgress` (trial number, epoch k of E, training loss, validation
    top-1, seconds), as the progress line hears of them; an error it raises is one warning, and the
    search goes on.
    ``dry_run``: run nothing, write nothing, start no Ray; return what ``archsearch check`` prints, a
    :class:`harness.search.dry_run.SearchCheck` (its ``proposals`` are the trials the search would
    start with, as they would train).
    Arguments of another type are a ``TypeError`` naming the argument.
    Bad input raises the same errors, naming the same keys, as the command line reports.
    """
    _check_arguments(spec, address, resume, verbose, dry_run)
    check_on_epoch(on_epoch, "run_search")
    url = resolve_store_url(_store_url(store))
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"run_search: name must be a study name (str), not {type(name).__name__}")
        check_study_name(name, "name")
    if results_dir is not None and not isinstance(results_dir, (str, os.PathLike)):
        kind = type(results_dir).__name__
        raise TypeError(f"run_search: results_dir must be a path (str or os.PathLike), not {kind}")
    if spec is None:
        if not resume or name is None:
            raise ValueError("give a spec to start a search, or resume=True with the study's name to continue one")
        with Store.open(url, create=False) as opened:
            spec = load_spec(opened.study(name)["spec"], check_paths=address is None)
    elif not isinstance(spec, SearchSpec):
        spec = load_spec(spec if isinstance(spec, Mapping) else Path(spec), check_paths=address is None)
    if dry_run:
        return _dry_run.check_search(spec, url, name=name)
    summary = driver.run_search(
        spec,
        url,
        study_name=name,
        address=address,
        results_dir=results_dir,
        resume=resume,
        verbose=verbose,
        on_epoch=on_epoch,
    )
    return load_study(summary.study, url)


def _check_arguments(spec: Any, address: Any, resume: Any, verbose: Any, dry_run: Any) -> None:
    """A ``TypeError`` naming the argument, before anything runs: ``spec=5`` reached ``Path(5)`` and
    ``address=5`` Ray, each failing without naming it, and ``resume="no"`` resumed (a non-empty
    string is true). Flags are ``bool`` only, as Optuna's and Tune's keyword flags are used."""
    if spec is not None and (isinstance(spec, (bytes, bytearray)) or not isinstance(spec, SPEC_TYPES)):
        kind = type(spec).__name__
        raise TypeError(f"run_search: spec must be a YAML path (str, os.PathLike), a mapping or SearchSpec, not {kind}")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"run_search: address must be a Ray address (str, e.g. 'auto'), not {type(address).__name__}")
    if isinstance(address, str) and not address.strip():
        raise ValueError("run_search: address is empty: give a Ray address ('auto'), or leave it out for a local Ray")
    for flag, value in (("resume", resume), ("verbose", verbose), ("dry_run", dry_run)):
        if not isinstance(value, bool):
            raise TypeError(f"run_search: {flag} must be True or False, not {type(value).__name__} {value!r}")
    if dry_run and resume:
        raise ValueError("run_search: dry_run checks a new search and resume=True continues one: drop one of them")


SPEC_TYPES = (str, os.PathLike, Mapping, SearchSpec)
