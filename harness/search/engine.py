"""The hooks one search runs, built in one place: what Ray Tune's Tuner is made of, and what a replay drives.

:func:`build_engine` wires the searcher (with its warm start or initial spread), the early-stopping
scheduler, the store writer and progress callbacks and the stoppers of a spec, each bound to the
search's :class:`harness.search.session.SearchSession`. The driver hands them to a ``Tuner``
(:mod:`harness.search.driver`); the simulator (:mod:`harness.search.simulate`) runs the same objects
against looked-up results under a simulated clock. There is no second copy of this wiring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ray.tune import Callback
from ray.tune.schedulers import TrialScheduler
from ray.tune.stopper import Stopper

from harness.search.propose import initial_design, warm_start
from harness.search.propose.samplers import make_sampler
from harness.search.propose.searcher import ArchsearchSearch
from harness.search.record.progress import ProgressCallback, planned_epochs, planned_trials
from harness.search.record.signals import InterruptCallback
from harness.search.record.store_writer import StoreCallback
from harness.search.record.trial_end import ConfigBuilder
from harness.search.session import SearchSession
from harness.search.stop.early_stopping import make_scheduler
from harness.search.stop.hopeless import HopelessSearchStopper, hopeless_after
from harness.search.stop.rules import StopRulesStopper
from search_space.sampling import build_trial_config
from search_space.spec import SearchSpec

# (spec, store URL, study, Optuna storage, sampler, session) -> the searcher; a replay against a table
# passes a subclass that prices proposals from the table (benchmarks.search_quality.TableSearch).
SearcherFactory = Callable[[SearchSpec, str, str, Any, Any, SearchSession], ArchsearchSearch]


@dataclass
class Engine:
    """One search's hooks, bound to its session."""

    session: SearchSession
    searcher: ArchsearchSearch
    scheduler: TrialScheduler | None
    callbacks: list[Callback] = field(default_factory=list)
    stoppers: list[Stopper] = field(default_factory=list)


def build_searcher(
    spec: SearchSpec,
    store_url: str,
    name: str,
    session: SearchSession,
    *,
    storage: Any = None,
    factory: SearcherFactory = ArchsearchSearch,
    quiet: bool = False,
) -> ArchsearchSearch:
    """The searcher of a search: the spec's sampler, and its first trials enqueued (the warm start's, or
    the initial spread over the cost). A search's engine and ``archsearch check``'s dry run
    (:mod:`harness.search.dry_run`) build it here, so the dry run proposes what the search would."""
    searcher = factory(spec, store_url, name, storage, make_sampler(spec), session)
    if spec.search.warm_start is not None:
        warm_start.apply(searcher, spec, store_url, name, quiet=quiet)
    elif initial_design.planned_spread(spec):
        initial_design.apply(searcher, spec, name, quiet=quiet)
    return searcher


def build_engine(
    spec: SearchSpec,
    store_url: str,
    name: str,
    session: SearchSession,
    *,
    storage: Any = None,
    searcher_factory: SearcherFactory = ArchsearchSearch,
    signals: bool = True,
    progress: bool = True,
    quiet: bool = False,
    extra_callbacks: Sequence[Callback] = (),
    build: ConfigBuilder = build_trial_config,
) -> Engine:
    """The hooks of the search ``spec`` describes (see the module docstring).

    ``storage``: Optuna's storage (an ``RDBStorage``; None: in memory, for a replay); ``signals``: the
    callback that routes SIGINT/SIGTERM to Ray's graceful stop (a real search only); ``progress``: the
    live progress line; ``quiet``: the initial design says nothing; ``build``: the trial config the
    store records for a proposal (a replay's table configurations are looked up, never built).
    """
    searcher = build_searcher(spec, store_url, name, session, storage=storage, factory=searcher_factory, quiet=quiet)
    spec_dict = spec.model_dump(mode="json")
    callbacks: list[Callback] = [InterruptCallback(session)] if signals else []
    callbacks.append(StoreCallback(store_url, name, spec_dict, session, build))
    if progress:
        callbacks.append(
            ProgressCallback(
                store_url,
                name,
                dict(spec.objectives),
                n_trials=planned_trials(spec),
                concurrency=spec.search.concurrency,
                session=session,
                clock=session.clock,
                epochs=planned_epochs(spec),
            )
        )
    callbacks += list(extra_callbacks)
    stoppers: list[Stopper] = [HopelessSearchStopper(store_url, name, hopeless_after(spec), spec_dict, session)]
    rules = spec.search.stop.model_dump(exclude_none=True)
    if rules:
        stoppers.append(StopRulesStopper(store_url, name, dict(spec.objectives), rules, session))
    return Engine(session, searcher, make_scheduler(spec, name, session), callbacks, stoppers)
