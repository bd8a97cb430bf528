"""``search.warm_start``: a new study starts from an earlier one's results instead of random samples.

The earlier study's Pareto front (on its own objectives), then up to ``top`` of its best completed
trials (by its first objective), are enqueued in the new Optuna study as its first trials, with
the parameters the new space shares, valued as the earlier trial's config holds them (its fixed
parameters included); a parameter the new space has and the old one did not is sampled, and one
the new spec fixes takes the new spec's value. A trial with a value outside the new space's domains
is skipped (and counted). With ``reuse_results``, a proposed trial whose whole config (model, data,
budget, seed) equals that of any trial the earlier study completed (enqueued or not: a sampler with
the earlier seed proposes the earlier trials again) and that ran as this search places its trials (as many
data-parallel ranks, on the same kind of device: :func:`placement`) is not retrained: its record is copied
(``final.reused_from``) and Optuna told its values (see :class:`harness.search.propose.searcher.ArchsearchSearch`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from dashboards.pareto import study_front
from harness.search.propose.searcher import config_key
from harness.store import NoStore, Store, StoreError, mask_url
from search_space.sampling import build_trial_config, fixed_params, params_of_config
from search_space.spec import SearchSpec
from trials.configio import ConfigError
from trials.status import TrialStatus


@dataclass
class WarmStartReport:
    """What a warm start did: how many trials it enqueued, skipped and (later) reused."""

    source: str  # "STUDY" or "STUDY in STORE"
    enqueued: int = 0
    skipped: int = 0
    skip_reasons: list[str] = field(default_factory=list)
    reusable: dict[str, dict[str, Any]] = field(default_factory=dict)  # config key -> earlier record
    placed_elsewhere: list[str] = field(default_factory=list)  # completed trials not reused: placed otherwise

    def line(self, study: str) -> str:
        why = f" ({'; '.join(self.skip_reasons[:3])}{' ...' if len(self.skip_reasons) > 3 else ''})"
        return (
            f"[{study}] warm start from {self.source}: enqueued {self.enqueued}, skipped {self.skipped}"
            + (why if self.skipped else "")
            + (f", {len(self.reusable)} reusable without training" if self.reusable else "")
            + (f", {len(self.placed_elsewhere)} not reused ({self.placed_elsewhere[0]})" if self.placed_elsewhere
               else "")
        )


def placement(record: dict[str, Any]) -> tuple[int, str]:
    """(data-parallel ranks, ``cpu`` or ``gpu``) a stored trial ran on: a result depends on both (each rank draws
    its own dropout and drop-path; a GPU's throughput and numerics are not a CPU's), so a reused result must have
    run as this search places its trials."""
    ranks = (record.get("final") or {}).get("world_size")
    device = str((record.get("measurement") or {}).get("device") or "cpu")
    return (int(ranks) if isinstance(ranks, (int, float)) and ranks >= 1 else 1), (
        "cpu" if device.startswith("cpu") else "gpu"
    )


def search_placement(spec: SearchSpec) -> tuple[int, str]:
    """(ranks, device kind) this search's trials run on (``search.resources``)."""
    resources = spec.search.resources
    return resources.workers, "gpu" if resources.gpus > 0 else "cpu"


def earlier_trials(store, study: str, top: int) -> list[int]:
    """The earlier study's front (its own objectives), then its ``top`` best completed trials."""
    objectives = store.objectives(study)
    numbers = [int(n) for n in study_front(store, study, objectives)["number"]]
    if top:
        first, direction = next(iter(objectives.items()))
        best = store.trials(
            study, statuses=(TrialStatus.COMPLETED,), sort=first, descending=direction == "max", limit=top
        )
        numbers += [int(n) for n in best["number"]]
    return list(dict.fromkeys(numbers))


def _decoded_spec(spec: Any) -> dict[str, Any]:
    """The stored spec as a dict (JSON columns come back as text on some backends)."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    return spec if isinstance(spec, dict) else {}


def check_source(spec: SearchSpec, store_url: str) -> None:
    """The earlier study must be there (its store opens, its schema is one this version reads, the
    study exists): checked before the new search writes anything. Raises StoreError naming the key."""
    warm = spec.search.warm_start
    if warm is None:
        return
    source_url = warm.store or store_url
    earlier_family = None
    try:
        with Store.open(source_url, create=False, read_only=True) as store:
            names = store.study_names()
            if warm.study in names:
                earlier_family = _decoded_spec(store.study(warm.study).get("spec")).get("family")
    except NoStore as error:
        if warm.store is not None:
            raise StoreError(f"search.warm_start.store: {error}") from None
        names = []  # the search's own store, not created yet: it holds no study
    except StoreError as error:
        raise StoreError(f"search.warm_start.store: {error}") from None
    if warm.study not in names:
        raise StoreError(f"search.warm_start.study: no study {warm.study!r} in {mask_url(source_url)}")
    if earlier_family is not None and earlier_family != spec.family:  # no parameter means the same in both
        raise StoreError(
            f"search.warm_start.study: study {warm.study!r} searched {earlier_family} models and this search "
            f"{spec.family}: nothing it learnt carries over (warm-start from a {spec.family} study)"
        )


def _placed(where: tuple[int, str]) -> str:
    ranks, device = where
    return f"{ranks} {device.upper()} rank{'s' if ranks > 1 else ''}" if ranks > 1 else device.upper()


def _proposable(spec: SearchSpec, config: dict[str, Any], searched: list[str]) -> bool:
    """Whether the new search can propose exactly this config: its searched values lie in the new
    domains and the new spec builds the same config from them (same base, data, budget and seed).
    Only such a config can be reused; a count of any other would promise what never happens (a new
    seed once showed "8 reusable without training" where none could be)."""
    try:
        params = params_of_config(spec, config, searched)
        if len(params) < len(searched) or not all(spec.params[n].contains(v) for n, v in params.items()):
            return False
        return config_key(build_trial_config(spec, params)) == config_key(config)
    except (ConfigError, KeyError, TypeError, ValueError):
        return False


def apply(searcher, spec: SearchSpec, store_url: str, study_name: str, quiet: bool = False) -> WarmStartReport:
    """Enqueue the earlier study's trials in the searcher's Optuna study; return the counts. The line it
    prints names ``study_name`` (the study's name, which ``--name`` may have made other than the spec's)."""
    warm = spec.search.warm_start
    source_url = warm.store or store_url
    report = WarmStartReport(source=warm.study if warm.store is None else f"{warm.study} in {mask_url(source_url)}")
    with Store.open(source_url, create=False) as store:
        if warm.study not in store.study_names():
            raise StoreError(f"search.warm_start.study: no study {warm.study!r} in {mask_url(source_url)}")
        numbers = earlier_trials(store, warm.study, warm.top)
        earlier_spec = _decoded_spec(store.study(warm.study).get("spec"))
        configs = {n: r["config"] for n, r in store.trial_records(warm.study, numbers).items()}
        records = store.trial_records(warm.study, statuses=(TrialStatus.COMPLETED,)) if warm.reuse_results else {}
    # The values come from the earlier trials' configs (what they trained, their fixed parameters
    # included), for the parameters both spaces name; the new spec's fixed ones are its own.
    fixed = fixed_params(spec)
    shared = [name for name in spec.params if name in (earlier_spec.get("params") or {}) and name not in fixed]
    for number in numbers:
        config = configs.get(number)
        if config is None:
            report.skipped += 1
            report.skip_reasons.append(f"trial {number}: not in the store")
            continue
        try:
            params = params_of_config(spec, config, shared)
        except ConfigError as error:  # a parameter the earlier family does not have
            report.skipped += 1
            report.skip_reasons.append(f"trial {number}: {error}")
            continue
        outside = [f"{name}={value!r}" for name, value in params.items() if not spec.params[name].contains(value)]
        if outside:
            report.skipped += 1
            report.skip_reasons.append(f"trial {number}: {', '.join(outside)} outside the new space")
            continue
        searcher.study.enqueue_trial(params, user_attrs={"warm_start": f"{warm.study}#{number}"})
        report.enqueued += 1
    searched = [name for name in spec.params if name not in fixed]
    here = search_placement(spec)
    for number, record in sorted(records.items()):  # completed trials; the first of identical configs is copied
        if not _proposable(spec, record["config"], searched):
            continue
        if (ran := placement(record)) != here:
            report.placed_elsewhere.append(f"trial {number} ran on {_placed(ran)}, this search on {_placed(here)}")
            continue
        report.reusable.setdefault(config_key(record["config"]), {**record, "source": f"{warm.study}#{number}"})
    searcher.set_reusable(report.reusable)
    if not quiet:  # a dry run (``archsearch check``) enqueues into its own in-memory study: nothing to say
        print(report.line(study_name), file=sys.stderr, flush=True)
    return report
