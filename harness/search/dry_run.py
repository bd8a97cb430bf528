"""``archsearch check`` and ``run_search(..., dry_run=True)``: what a search would do, before it costs anything.

A spec of one's own raises questions that, without this, only starting the search answers: how big is
the space, how much of it is refused before training (does not build, breaks a constraint), what do its
models cost, how long will it take here, and what exactly will the first trials train? :func:`check_search`
answers each from the parts a search itself uses, never a second copy of them:

* the space's **feasibility** is :func:`search_space.buildable.buildability`'s sample (or enumeration) of
  the space, the one behind the search's "partly invalid space" warning, with each config that builds
  priced by :func:`search_space.sampling.cost_violations` and checked against the constraints, as the
  searcher checks each proposal;
* the **cost range** is that pricing (the closed-form cost model) over the feasible configs;
* the **time** is one timed training step (:func:`trials.measurement.timing.training_step_seconds`, as
  ``reproduce --plan`` times one) of the cheapest, the median and the dearest feasible config, times the
  optimiser steps of a trial (:class:`trials.training.optimiser.Budget`), over the trials at the spec's
  concurrency;
* the **first proposals** come from the search's own searcher (:func:`harness.search.engine.build_searcher`:
  its sampler and seed, the initial spread or warm start, the infeasible and duplicate handling) on an
  in-memory Optuna study, resolved as the worker resolves them (``worker_trial_config`` and
  ``fit_to_resources`` of :mod:`harness.search.worker.trainable`).

Nothing is written and Ray is never started: the Optuna study lives in memory, the searcher records what it
would store in :class:`UnwrittenStore`, and the store at the URL is only opened read-only (a SQLite file
that does not exist is not created).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna
from ray.tune.search import Searcher

from harness.output import format_number, strict_json_value
from harness.search.cluster.ray_setup import check_study_name
from harness.search.engine import build_searcher
from harness.search.propose import warm_start
from harness.search.propose.searcher import ArchsearchSearch
from harness.search.result_keys import split_tune_config
from harness.search.session import SearchSession
from harness.search.worker.trainable import fit_to_resources, worker_trial_config
from harness.store import NoStore, Store, StoreError, mask_url
from search_space.buildable import Buildability, buildability, settings, show
from search_space.sampling import build_trial_config, cost_violations, discrete_space_size, priced_model, split_params
from search_space.spec import (
    COST_METRICS,
    ChoiceDomain,
    FixedDomain,
    FloatDomain,
    IntDomain,
    SearchSpec,
    param_target,
)
from search_space.validation import corner
from trials.config.data_config import training_images
from trials.config.trial_config import load_trial_config, trial_threads
from trials.data.sources import num_batches
from trials.devices.cpus import usable_cpus
from trials.measurement.timing import training_step_seconds
from trials.training.optimiser import Budget

EXAMPLES = 2  # example configs shown for each reason a config is refused
MAX_PROPOSALS = 1000  # of --proposals: each is a sampler ask and a config built (Optuna's in-memory study)


@dataclass(frozen=True)
class Parameter:
    """One parameter of the validated space: its domain as a spec writes it, and how many values it has."""

    name: str
    kind: str  # int, float, choice or fixed
    domain: str  # "int: [1, 3]", "float: [0.001, 0.004], log", "choice: [CCCC, CCCT]", "fixed: 0.1"
    values: int | None  # distinct values (None: a float range, continuous)
    target: str  # what it sets: model, training, data, seed or variant


@dataclass(frozen=True)
class Refusal:
    """One reason configs of the space are refused before training, with how many and examples."""

    reason: str  # "does not build: ..." or "violates flops <= 1.2e7"
    key: str  # the config key the build error names, or the constraints broken
    count: int  # of the counted configs (see SearchCheck.counted)
    share: float  # count / counted
    examples: list[dict[str, Any]]  # parameter values (and the priced cost where it was priced)


@dataclass(frozen=True)
class CostRange:
    """A priced metric (cost model) over the feasible configs."""

    metric: str  # flops or params
    direction: str | None  # the objective's (max/min), None where the spec does not optimise it
    min: float
    median: float
    max: float


@dataclass(frozen=True)
class TimedConfig:
    """One feasible config whose training step was timed here."""

    which: str  # cheapest, median or dearest (by the priced flops)
    params: dict[str, Any]
    flops: int
    batch: int  # images per step
    steps: int  # optimiser steps of one trial
    step_s: float  # seconds of one training step here
    trial_s: float  # steps x step_s: the trial's training time


@dataclass(frozen=True)
class TimeEstimate:
    """The search's training time here, from the timed configs: (cheapest, median, dearest) x trials / concurrency."""

    configs: list[TimedConfig]
    threads: int  # intra-op threads a trial's step was timed on (its CPUs' share)
    n_trials: int
    concurrency: int
    total_s: tuple[float, float, float]  # the least of the three, every trial the median config, the most
    notes: list[str]


@dataclass(frozen=True)
class Proposal:
    """One of the first trials the search would dispatch, as the worker would train it."""

    number: int  # its Optuna (and store) trial number
    source: str  # "initial spread", "warm start (STUDY#N)" or "sampler"
    sampled: dict[str, Any]  # the searched parameters' values
    fixed: dict[str, Any]  # the spec's fixed parameters
    cost: dict[str, Any]  # the priced flops and params the worker checks its model against
    config: dict[str, Any]  # the resolved trial config, every default included (a trial YAML)


@dataclass(frozen=True)
class SearchCheck:
    """What a search of the spec would do, found without running it (see the module docstring)."""

    name: str  # the study
    family: str
    dataset: str
    sampler: str
    seed: int
    n_trials: int
    concurrency: int
    store: str  # the store URL, masked
    store_note: str  # whether the store exists and the study's name is free there
    parameters: list[Parameter]
    fixed: dict[str, Any]
    constraints: list[str]
    objectives: dict[str, str]
    size: int | None  # distinct configurations; None: a float range makes it continuous
    finite_size: int  # configurations of the parameters that are not float ranges
    continuous: list[str]  # the float-range parameters
    counted: int  # configs the infeasible share is over
    exhaustive: bool  # every setting combination (True) or a seeded uniform sample (False)
    infeasible_share: float
    refusals: list[Refusal]
    costs: list[CostRange]
    unpriced: list[str]  # objectives known only after training
    time: TimeEstimate | None
    untimed: str | None  # why there is no time estimate
    proposals: list[Proposal]
    skipped: list[dict[str, Any]]  # proposals the searcher refused on the way (infeasible, duplicate)
    notes: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """Everything as plain JSON values (``--format json``)."""
        return strict_json_value(dataclasses.asdict(self))

    def lines(self) -> list[str]:
        """The readable report, one line each (``archsearch check``'s output)."""
        return report_lines(self)


class UnwrittenStore:
    """The dry run's stand-in for the store the searcher writes: what it would record (an infeasible,
    duplicate or reused proposal) is kept here in memory, and the study is a new one."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def study_names(self) -> list[str]:
        return []

    def finish_trial(self, study: str, number: int, **record: Any) -> None:
        self.records.append({"number": number, **record})


class DryRunSearch(ArchsearchSearch):
    """The search's searcher, unchanged but for where it records: :class:`UnwrittenStore`."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.unwritten = UnwrittenStore()

    @property
    def store(self) -> UnwrittenStore:  # type: ignore[override]
        return self.unwritten


def check_search(
    spec: SearchSpec,
    store_url: str,
    *,
    name: str | None = None,
    proposals: int | None = None,
    timed: bool = True,
) -> SearchCheck:
    """What a search of ``spec`` into ``store_url`` would do, without doing it (see the module docstring).

    ``proposals``: how many first proposals (default: the spec's concurrency, the trials a search
    dispatches before any finishes); ``timed``: time a training step of three configs here (off: no time
    estimate, nothing built). Writes nothing, starts no Ray.
    """
    count = spec.search.concurrency if proposals is None else proposals
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_PROPOSALS:
        raise ValueError(f"proposals: an integer in 0..{MAX_PROPOSALS}, got {count!r}")
    name = check_study_name(name, "name") if name is not None else check_study_name(spec.name, "the spec's name")
    found = buildability(spec)
    counted = len(found.errors) if found.uniform is None else found.uniform
    priced = _priced(spec, found)
    refusals = _refusals(spec, found, priced, counted)
    feasible = [(found.tried[i], cost) for i, (cost, broken) in sorted(priced.items()) if not broken and i < counted]
    size = discrete_space_size(spec)
    continuous = [n for n, d in spec.params.items() if isinstance(d, FloatDomain)]
    finite = {n: d for n, d in spec.params.items() if not isinstance(d, FloatDomain)}
    notes = []
    if not feasible:
        notes.append("no config of those counted is feasible: nothing to price or time")
    if found.uniform is not None:
        notes.append(f"shares are of a seeded uniform sample of {counted} configs (the space is too big to enumerate)")
    made, skipped = first_proposals(spec, store_url, name, count)
    time = estimate_time(spec, feasible) if timed and feasible else None
    if count > spec.search.concurrency:
        notes.append(
            f"proposals past the first {spec.search.concurrency} (the concurrency) assume no trial has finished; "
            "in a search the sampler sees the finished trials' results first"
        )
    return SearchCheck(
        name=name,
        family=spec.family,
        dataset=str(spec.data.get("name", "synthetic")),
        sampler=spec.search.sampler,
        seed=spec.search.seed,
        n_trials=spec.search.n_trials,
        concurrency=spec.search.concurrency,
        store=mask_url(store_url),
        store_note=store_note(store_url, name),
        parameters=[_parameter(spec, n, d) for n, d in spec.params.items()],
        fixed={n: d.fixed for n, d in spec.params.items() if isinstance(d, FixedDomain)},
        constraints=list(spec.constraints),
        objectives=dict(spec.objectives),
        size=size,
        finite_size=size if size is not None else discrete_space_size(spec.model_copy(update={"params": finite})),
        continuous=continuous,
        counted=counted,
        exhaustive=found.exhaustive,
        infeasible_share=sum(r.count for r in refusals) / counted if counted else 0.0,
        refusals=refusals,
        costs=_cost_ranges(spec, [cost for _, cost in feasible]),
        unpriced=[metric for metric in spec.objectives if metric not in COST_METRICS],
        time=time,
        untimed=None if time is not None else _untimed(timed, bool(feasible)),
        proposals=made,
        skipped=skipped,
        notes=notes,
    )


def _untimed(timed: bool, feasible: bool) -> str:
    if not timed:
        return "--no-timing"
    return "an image folder's size is counted where it is read, not here" if feasible else "nothing feasible to time"


def _parameter(spec: SearchSpec, name: str, domain: Any) -> Parameter:
    target = param_target(name, spec.family)[0]
    if isinstance(domain, IntDomain):
        low, high = domain.int
        text = f"int: [{low}, {high}]" + (f", step: {domain.step}" if domain.step != 1 else "")
        return Parameter(name, "int", text + (", log" if domain.log else ""), (high - low) // domain.step + 1, target)
    if isinstance(domain, FloatDomain):
        low, high = domain.float
        return Parameter(name, "float", f"float: [{show(low)}, {show(high)}]" + (", log" if domain.log else ""),
                         None, target)  # fmt: skip
    if isinstance(domain, ChoiceDomain):
        return Parameter(name, "choice", f"choice: [{', '.join(show(v) for v in domain.choice)}]",
                         len(domain.choice), target)  # fmt: skip
    return Parameter(name, "fixed", f"fixed: {show(domain.fixed)}", 1, target)


def _priced(spec: SearchSpec, found: Buildability) -> dict[int, tuple[dict[str, Any], list[str]]]:
    """Each tried config that builds, priced: row -> (its cost, the constraints it breaks)."""
    priced = {}
    for i, (assignment, error) in enumerate(zip(found.tried, found.errors, strict=True)):
        if error is not None:
            continue
        cost, violations = cost_violations(spec, build_trial_config(spec, assignment))
        priced[i] = (cost, [text for text, v in zip(spec.constraints, violations, strict=True) if v > 0])
    return priced


def _refusals(
    spec: SearchSpec, found: Buildability, priced: dict[int, tuple[dict[str, Any], list[str]]], counted: int
) -> list[Refusal]:
    """The refused configs grouped by reason: what does not build (by the key its error names, explained
    as the partly-invalid warning explains it), then what breaks constraints; the commonest first."""
    explained = found.reasons(spec)
    refusals = []
    for k, (key, rows) in enumerate(found.failure_groups()):
        error = found.errors[min(rows)]
        why = explained[k] if k < len(explained) else str(error)
        shown = [dict(found.tried[i]) for i in _unlike(spec, found, sorted(rows))]
        number = sum(i < counted for i in rows)
        refusals.append(Refusal(f"does not build: {why}", key, number, number / counted, shown))
    broken: dict[str, list[int]] = {}
    for i, (_, constraints) in priced.items():
        if constraints:
            broken.setdefault(" and ".join(constraints), []).append(i)
    for key, rows in broken.items():
        shown = [{**found.tried[i], **priced[i][0]} for i in _unlike(spec, found, rows)]
        number = sum(i < counted for i in rows)
        refusals.append(Refusal(f"violates {key}", key, number, number / counted, shown))
    return sorted(refusals, key=lambda r: -r.count)


def _unlike(spec: SearchSpec, found: Buildability, rows: list[int]) -> list[int]:
    """Up to :data:`EXAMPLES` of ``rows`` that differ in a discrete parameter where the rows allow it
    (two examples differing only in a float range's setting show one config twice)."""
    discrete = [n for n in found.names if not isinstance(spec.params[n], FloatDomain)]
    chosen: dict[tuple, int] = {}
    for i in rows:
        chosen.setdefault(tuple(show(found.tried[i][n]) for n in discrete), i)
        if len(chosen) == EXAMPLES:
            break
    return (list(chosen.values()) + [i for i in rows if i not in chosen.values()])[:EXAMPLES]


def _cost_ranges(spec: SearchSpec, costs: list[dict[str, Any]]) -> list[CostRange]:
    ranges = []
    for metric in COST_METRICS:
        values = sorted(float(cost[metric]) for cost in costs)
        if values:
            ranges.append(CostRange(metric, spec.objectives.get(metric), values[0], statistics.median(values),
                                    values[-1]))  # fmt: skip
    return ranges


def estimate_time(spec: SearchSpec, feasible: list[tuple[dict[str, Any], dict[str, Any]]]) -> TimeEstimate | None:
    """The training time of a search of ``spec`` here, from the cheapest, median and dearest of the
    ``feasible`` (params, cost) configs by priced flops; None where an epoch's size is not known here."""
    ordered = sorted(feasible, key=lambda item: item[1]["flops"])
    picks = {"cheapest": 0, "median": len(ordered) // 2, "dearest": len(ordered) - 1}
    # Searched training settings (epochs, steps) at the matching end: the cheapest trial is also the shortest.
    budget = {name: d for name, d in spec.params.items() if param_target(name, spec.family)[0] == "training"}
    ends = {"cheapest": corner(spec, "low"), "dearest": corner(spec, "high")}
    configs, threads, notes = [], 1, []
    warmed = False  # the first step timed in a process pays for torch's start (threads, allocator): not a config's
    for which, index in picks.items():
        params, cost = ordered[index]
        at = {n: ends[which][n] if which in ends else settings(d)[len(settings(d)) // 2] for n, d in budget.items()}
        config = build_trial_config(spec, {**params, **at})
        fit_to_resources(config, spec.search.resources, None)
        trial = load_trial_config(config)
        images = training_images(trial.data)
        if images is None:
            return None
        threads = trial_threads(trial, "cpu") or 1
        batch = min(trial.data.batch_size, images)
        steps = Budget.of(trial.training, num_batches(images, trial.data.batch_size, drop_last=True)).total_steps
        if not warmed:
            training_step_seconds(priced_model(config), batch, threads=threads)
            warmed = True
        step_s = training_step_seconds(priced_model(config), batch, threads=threads)
        configs.append(TimedConfig(which, dict(params), int(cost["flops"]), batch, steps, step_s, steps * step_s))
    s = spec.search
    # A step's time is not strictly ordered by FLOPs (memory traffic, noise): the range is of the three. Trials run
    # in whole rounds of ``concurrency`` (never fewer than one trial's time, however many slots stand idle).
    totals = [c.trial_s * rounds_of(s.n_trials, s.concurrency) for c in configs]
    low, middle, high = min(totals), totals[1], max(totals)
    notes.append("training steps only: each epoch's evaluation, the measurement and start-up come on top")
    if s.resources.gpus > 0:
        notes.append(f"timed on this machine's CPU on {threads} thread(s); the trials run on GPUs")
    elif s.resources.workers == 1:
        at_once = max(1, math.floor(usable_cpus() / s.resources.cpus))
        longer = rounds_of(s.n_trials, at_once) / rounds_of(s.n_trials, s.concurrency)
        if longer > 1:
            notes.append(
                f"a local search here runs {at_once} at a time, not {s.concurrency} ({usable_cpus()} CPUs, "
                f"{show(s.resources.cpus)} per trial): about {show(round(longer, 1))}x as long"
            )
    return TimeEstimate(configs, threads, s.n_trials, s.concurrency, (low, middle, high), notes)


def rounds_of(n_trials: int, at_once: int) -> int:
    """How many rounds ``n_trials`` take ``at_once`` at a time: a round lasts a trial's time, so 2 trials at
    concurrency 4 take one round (not half of one) and 5 at 2 take three."""
    return math.ceil(n_trials / max(1, at_once))


def first_proposals(
    spec: SearchSpec, store_url: str, name: str, count: int
) -> tuple[list[Proposal], list[dict[str, Any]]]:
    """The first ``count`` trials the search's searcher dispatches (on an in-memory Optuna study), each as
    its worker would train it, and the proposals refused on the way (infeasible, duplicate)."""
    if count == 0:
        return [], []
    warm_start.check_source(spec, store_url)  # read-only: the earlier study is there
    with _quiet_optuna():
        searcher = build_searcher(spec, store_url, name, SearchSession(name), factory=DryRunSearch, quiet=True)
        made = []
        for index in range(count):
            trial_id = f"check_{index:05d}"
            suggestion = searcher.suggest(trial_id)
            if suggestion is None or suggestion == Searcher.FINISHED:
                break
            number, cost, params = split_tune_config(suggestion)
            attrs = searcher.asked_trial(trial_id).user_attrs
            source = (
                "initial spread" if attrs.get("initial_spread")
                else f"warm start ({attrs['warm_start']})" if "warm_start" in attrs
                else "sampler"
            )  # fmt: skip
            _, config = worker_trial_config(spec, suggestion)
            fit_to_resources(config, spec.search.resources, None)
            values = split_params(spec, params)
            resolved = load_trial_config(config).to_dict()
            made.append(Proposal(int(number), source, values["sampled"], values["fixed"], dict(cost or {}), resolved))
    skipped = [
        {"number": r["number"], "status": str(r["status"]), "why": r.get("error"),
         "sampled": (r.get("parameters") or {}).get("sampled", {})}
        for r in searcher.unwritten.records
    ]  # fmt: skip
    return made, skipped


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's info lines ("A new study created in memory") and its experimental-feature warnings off,
    as a search has them, for the dry run alone."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(level)


def store_note(store_url: str, name: str) -> str:
    """Where the search would write, said without writing: opened read-only, never created."""
    where = mask_url(store_url)
    try:
        with Store.open(store_url, create=False, read_only=True) as store:
            if name not in store.study_names():
                return f"{where} exists; study {name} is new there"
            total = store.study_counts(name).total
    except NoStore:
        return f"{where} does not exist yet: the search would create it"
    except StoreError as error:
        return f"cannot read {where}: {error}"
    if total:
        return (
            f"study {name} is in {where} already, with {total} trials: the search would be refused "
            f"(--name for a new study, or --resume {name})"
        )
    return f"study {name} is in {where} already, without trials: the search would start it again"


def _values(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_number(v) if k in COST_METRICS else show(v)}" for k, v in values.items()) or "(none)"


def _number(value: Any) -> str:
    return format_number(value, "compact") if isinstance(value, (int, float)) else show(value)


def _seconds(value: float) -> str:
    """A duration as a person reads it: 42 s, 3 min 20 s, 2 h 05 min."""
    value = round(value)
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60:02d} s"
    return f"{value // 3600} h {value % 3600 // 60:02d} min"


def report_lines(check: SearchCheck) -> list[str]:
    """:meth:`SearchCheck.lines`.

    Long because the report is one page read top to bottom (the space, what is refused, the costs, the
    time, the first proposals), each section a few lines whose order is the page's."""
    c = check
    lines = [
        f"study {c.name}: {c.family} on {c.dataset}, {c.n_trials} trials, {c.concurrency} at a time, "
        f"{c.sampler} sampler (seed {c.seed})",
        f"store: {c.store_note}",
        "",
        f"space: {len([p for p in c.parameters if p.kind != 'fixed'])} searched parameters, {len(c.fixed)} fixed",
    ]
    width = max((len(p.name) for p in c.parameters), default=0)
    for p in c.parameters:
        values = "continuous" if p.values is None else f"{p.values:,} value{'s' * (p.values != 1)}"
        lines.append(f"  {p.name:<{width}}  {p.domain}  ({values}, {p.target})")
    if c.size is not None:
        lines.append(f"  size: {c.size:,} configurations")
    else:
        lines.append(f"  size: continuous ({', '.join(c.continuous)}); the other parameters: {c.finite_size:,} "
                     "configurations")  # fmt: skip
    lines.append(f"  constraints: {'; '.join(c.constraints) or 'none'}")
    lines.append(f"  objectives: {', '.join(f'{k} {v}' for k, v in c.objectives.items())}")
    lines.append("")
    tried = "every combination of the settings" if c.exhaustive else "a seeded uniform sample"
    share = 100 * c.infeasible_share
    lines.append(
        f"infeasible: {share:.0f}% of {c.counted:,} configs ({tried}) refused before training, never trained"
        if c.refusals
        else f"infeasible: none of {c.counted:,} configs ({tried}): every one builds and meets the constraints"
    )
    for r in c.refusals:
        amount = f"{100 * r.share:.0f}%" if r.count else "rare"
        lines.append(f"  {amount:>4}  {r.reason}")
        for example in r.examples:
            lines.append(f"        e.g. {_values(example)}")
    lines.append("")
    width = max((len(m) for m in [*COST_METRICS, *c.unpriced]), default=0)
    if c.costs:
        lines.append("priced cost of the feasible configs (closed-form cost model): min / median / max")
        for r in c.costs:
            role = f"objective, {r.direction}" if r.direction else "not an objective"
            lines.append(f"  {r.metric:<{width}}  {_number(r.min)} / {_number(r.median)} / {_number(r.max)}  ({role})")
    for metric in c.unpriced:
        lines.append(f"  {metric:<{width}}  known only after training (objective, {c.objectives[metric]})")
    lines.append("")
    t = c.time
    if t is not None:
        lines.append(f"time here: one timed training step per config ({t.threads} thread(s)) x the steps of a trial")
        for timed in t.configs:
            lines.append(
                f"  {timed.which:<8}  flops {_number(timed.flops)}: {timed.step_s * 1000:.1f} ms/step x "
                f"{timed.steps:,} steps of {timed.batch} = {_seconds(timed.trial_s)} a trial"
            )
        low, middle, high = t.total_s
        lines.append(
            f"  {t.n_trials} trials, {t.concurrency} at a time: {_seconds(low)} to {_seconds(high)}, "
            f"{_seconds(middle)} if every trial took the median config's time"
        )
        lines += [f"  note: {note}" for note in t.notes]
    else:
        lines.append(f"time here: not estimated ({c.untimed})")
    lines.append("")
    many = f"first {len(c.proposals)} proposals" if len(c.proposals) != 1 else "first proposal"
    lines.append(f"{many} ({c.sampler}, seed {c.seed}), as the trials would run them:")
    for p in c.proposals:
        lines.append(f"  trial {p.number} ({p.source}): {_values(p.sampled)}; {_values(p.cost)}")
        sections = {key: value for key, value in p.config.items() if isinstance(value, dict)}
        lines += [f"    {key}: {_flow(value)}" for key, value in sections.items()]
        lines.append("    " + _flow({k: v for k, v in p.config.items() if k not in sections})[1:-1])
    if c.skipped:
        lines.append(f"  refused on the way: {len(c.skipped)} ({', '.join(str(s['status']) for s in c.skipped)})")
    lines += [f"note: {note}" for note in c.notes]
    return lines


def _flow(value: Any) -> str:
    """A config on one line as YAML's flow style writes it ({model: {family: coatnet, ...}, ...})."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return show(value)
