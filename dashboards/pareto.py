"""Pareto queries over the store: fronts for 2 or 3 objectives, across studies, with filters; hypervolume.

Only completed trials can be on a front; pruned, failed, diverged and infeasible trials are
excluded but counted, so a report can say what the front was chosen from.

Queries stay near-linear in the number of trials: the objectives (and any filtered config key)
come from the store in one lean query per study, the front is moocore's O(n log n) filter
(:mod:`dashboards.multiobjective`), and configs are decoded only for the rows on the front.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dashboards.filters import Filter, FilterError, Where, WhereKey, check_index, filter_mask, parse_filters
from dashboards.multiobjective import DIRECTIONS, ObjectiveError, hypervolume, hypervolume_history, non_dominated
from dashboards.reader import StudyReader
from trials.errors import DataError
from trials.status import TrialStatus

__all__ = [
    "DIRECTIONS",
    "FINISHED_STATUSES",
    "Filter",
    "FilterError",
    "FrontQuery",
    "ParetoError",
    "WhereKey",
    "check_index",
    "front_mask",
    "hypervolume",
    "hypervolume_progress",
    "non_dominated",
    "pareto_front",
    "parse_objectives",
    "parse_where",
    "query_front",
    "resolve_where",
    "study_front",
]

# Statuses that end a trial that ran (infeasible ones never ran; running ones have not ended).
FINISHED_STATUSES = (TrialStatus.COMPLETED, TrialStatus.PRUNED, TrialStatus.FAILED, TrialStatus.DIVERGED)


class ParetoError(DataError, ValueError):
    """A bad query (unknown metric, bad direction, empty study, ...): a one-line message."""


def parse_objectives(text: str) -> dict[str, str]:
    """``"top1:max,flops:min"`` -> ``{"top1": "max", "flops": "min"}`` (2 or 3 objectives)."""
    objectives: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, direction = part.partition(":")
        if not sep or not name:
            raise ParetoError(f"objective {part!r} is not METRIC:DIRECTION (e.g. top1:max)")
        if direction not in DIRECTIONS:
            raise ParetoError(f"direction {direction!r} of {name!r} must be max or min")
        if name in objectives:  # top1:max,top1:min read as one objective: "got 1" hid the slip
            raise ParetoError(f"objective {name!r} is given twice: {text!r}")
        objectives[name] = direction
    if not 2 <= len(objectives) <= 3:
        raise ParetoError(f"a Pareto front needs 2 or 3 objectives, got {len(objectives)}: {text!r}")
    return objectives


def parse_where(items: Where) -> list[Filter]:
    """``["layout=CCTT", "lr>0.002"]`` -> the filters (:func:`dashboards.filters.parse_filters`): ``KEY=VALUE``,
    ``!=``, ``<``, ``<=``, ``>``, ``>=`` and ``KEY in V1,V2``, ANDed; a key given twice with ``=`` refused."""
    return parse_filters(items)


def resolve_color_by(key: str, columns: Sequence[str]) -> str:
    """``--color-by``: ``study``, a config column (``config.model.layout``) or the last part of one
    (``layout``), resolved against the studies' config columns; anything else is refused, never
    ignored under a caption that says the figure is coloured by it."""
    if key == "study":
        return key
    try:
        return _resolve_config_key(key, columns)
    except ParetoError as error:
        reason = "is ambiguous" if "ambiguous" in str(error) else "is not a config column of these studies"
        known = sorted({c.removeprefix("config.") for c in columns})[:12]
        raise ParetoError(f"--color-by {key!r} {reason}; e.g. {', '.join(known) or 'none recorded'}") from None


def _numeric(frame, column: str) -> np.ndarray:
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)


def front_mask(frame, objectives: Mapping[str, str]) -> np.ndarray:
    """Rows of ``frame`` on the front: completed, every objective finite, and non-dominated."""
    mask = np.zeros(len(frame), dtype=bool)
    if len(frame) == 0 or any(m not in frame.columns for m in objectives):
        return mask
    points = np.column_stack([_numeric(frame, m) for m in objectives])
    candidates = (frame["status"] == TrialStatus.COMPLETED).to_numpy() & np.all(np.isfinite(points), axis=1)
    if candidates.any():
        mask[np.flatnonzero(candidates)] = non_dominated(points[candidates], list(objectives.values()))
    return mask


def _sorted_front(frame, objectives: Mapping[str, str]):
    first, direction = next(iter(objectives.items()))
    front = frame[front_mask(frame, objectives)]
    return front.sort_values([first, "number"], ascending=[direction == "min", True], kind="stable")


def pareto_front(trials, objectives: Mapping[str, str]):
    """Rows of a trials DataFrame (``Store.trials`` or ``Store.outcomes``) on the front, best first."""
    if trials.empty or "status" not in trials:
        return trials.iloc[0:0]
    return _sorted_front(trials, objectives)


def _resolve_config_key(key: str, columns: Sequence[str]) -> str:
    """A config key: a config column (``config.model.layout``) or the last part of one (``layout``)."""
    if key in columns:
        return key
    if not key.startswith("config.") and f"config.{key}" in columns:
        return f"config.{key}"
    matches = [c for c in columns if c.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ParetoError(f"unknown filter key {key!r}")
    raise ParetoError(f"filter key {key!r} is ambiguous: {', '.join(matches)}")


_INDEXED = re.compile(r"^(?P<base>.+)\[(?P<index>\d+)\]$")  # ``depths[3]``: one stage of a list, as a spec names it


def resolve_where(
    where: Iterable[str] | Sequence[Filter],
    columns_by_study: Mapping[str, Sequence[str]],
    metrics_by_study: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, WhereKey]:
    """Each filter key (of ``where``: keys, or filters) resolved against the union of the studies' config
    columns, so one key means one column in every study: ``layout`` is ``config.model.layout`` wherever
    it is found, or the key is refused as ambiguous, naming the columns and the studies that hold each.
    A spec's indexed key (``depths[3]``) filters on that element of the list.

    A key that names a metric or stored column of the studies exactly as the tables show it
    (``metrics_by_study``: ``params``, ``top1``, the measured ``batch_size``, the ``epochs`` a trial
    ran) reads that column, before any config key whose last part it is (``config.training.epochs``,
    ``config.data.batch_size``): the key means the column the user sees under that name, and every
    config value stays reachable by more of its path (``training.epochs``, ``data.batch_size``). A
    config key by its last part used to win, so ``epochs=None`` read the configured epochs while the
    table's ``epochs`` showed ``-``, and ``batch_size`` was refused as ambiguous although the
    unknown-key message offered it as a metric. A key none of the studies has is refused, with some of
    the keys they have, config keys and metrics alike, each of which resolves as shown."""
    union = sorted({c for columns in columns_by_study.values() for c in columns})
    metrics = sorted({m for names in (metrics_by_study or {}).values() for m in names})
    resolved = {}
    for key in dict.fromkeys(f.key if isinstance(f, Filter) else f for f in where):
        if key in metrics:  # the column the tables show under this name, before a config key's last part
            resolved[key] = WhereKey(key, key, None, metric=True)
            continue
        indexed = _INDEXED.match(key)
        base, index = (indexed["base"], int(indexed["index"])) if indexed else (key, None)
        try:
            column = _resolve_config_key(base, union)
        except ParetoError as error:
            if "ambiguous" in str(error):
                matches = [c for c in union if c.rsplit(".", 1)[-1] == base]
                held = "; ".join(
                    f"{c} ({', '.join(s for s, cols in columns_by_study.items() if c in cols)})" for c in matches
                )
                raise ParetoError(f"filter key {key!r} is ambiguous: {held}; give the whole key") from None
            known = sorted({c.removeprefix("config.") for c in union})[:12]
            studies = "these studies" if len(columns_by_study) > 1 else "this study"
            shown_metrics = f"; or a metric: {', '.join(metrics[:8])}" if metrics else ""
            raise ParetoError(
                f"unknown filter key {key!r}: no config key of {studies}; e.g. {', '.join(known) or 'none recorded'}"
                + shown_metrics
            ) from None
        resolved[key] = WhereKey(key, column, index)
    return resolved


@dataclass
class FrontQuery:
    trials: object  # DataFrame: every matching trial (lean: study, number, status, costs, objectives, filters)
    front: object  # DataFrame: the front, best first by the first objective, with its configs
    counts: dict[str, int]  # matching trials by status
    lacking: dict[str, list[str]] = field(default_factory=dict)  # study -> filter keys it has no column for


def _study_outcomes(
    store: StudyReader,
    study: str,
    objectives: Mapping[str, str],
    keys: Mapping[str, WhereKey],
    where: Sequence[Filter],
    lacking: Sequence[str],
):
    known = store.metric_names(study)
    for metric in objectives:
        if metric not in known:
            raise ParetoError(f"unknown metric {metric!r}; known: {', '.join(known)}")
    present = sorted({k.column for name, k in keys.items() if name not in lacking and not k.metric})
    filtered = [k.column for name, k in keys.items() if name not in lacking and k.metric]
    frame = store.outcomes(study, list(dict.fromkeys([*objectives, *filtered])), config_keys=present)
    if lacking:  # a study without a filtered key has no trial that matches it
        frame = frame.iloc[0:0].assign(**{keys[name].column: [] for name in lacking})
    frame = frame[filter_mask(frame, where, keys, study)]
    return frame.assign(study=study)


def studies_objectives(store: StudyReader, studies: Sequence[str]) -> dict[str, str]:
    """The objectives ``studies`` were searched for, the objectives of one front over all of them; refused
    (:class:`ParetoError`, in ``archsearch pareto``'s words) where they differ, since a front ranked on
    one study's objectives says nothing of the others': the reader has to choose, with ``--objectives``."""
    found = {name: store.objectives(name) for name in studies}
    if len({tuple(v.items()) for v in found.values()}) > 1:
        shown = "; ".join(f"{k}: " + ",".join(f"{m}:{d}" for m, d in v.items()) for k, v in found.items())
        raise ParetoError(f"the studies have different objectives ({shown}): pass --objectives")
    return next(iter(found.values()), {})


def query_front(
    store: StudyReader,
    studies: Sequence[str],
    objectives: Mapping[str, str],
    where: Where = None,
    *,
    with_configs: bool = True,
) -> FrontQuery:
    """The front of ``objectives`` over the trials of ``studies`` that match ``where`` (filters as
    :func:`parse_where` reads them: ``{"layout": "CCTT"}``, ``"lr>0.002"``, ``["params<1e6", "layout in CCTT,CTTT"]``).

    Reads only number, status and costs and the objectives (plus filtered config keys) of every
    trial; the configs of the front's members are added when ``with_configs``. The filter keys are
    resolved once over all the studies (:func:`resolve_where`); a study without a filtered key
    contributes no trial, and :attr:`FrontQuery.lacking` names it.
    """
    studies = list(dict.fromkeys(studies))  # a study named twice is one study, not each trial twice
    where = parse_filters(where)
    for study in studies:
        if not store.study_counts(study).total:
            raise ParetoError(f"study {study!r} has no trials yet")
    columns_by_study = {study: store.config_columns(study) for study in studies} if where else {}
    metrics_by_study = {study: store.metric_names(study) for study in studies} if where else {}
    keys = resolve_where(where, columns_by_study, metrics_by_study) if where else {}
    held = {study: [*columns_by_study[study], *metrics_by_study[study]] for study in columns_by_study}
    lacking = {study: [name for name, key in keys.items() if key.column not in held[study]] for study in held}
    lacking = {study: names for study, names in lacking.items() if names}
    frames = [_study_outcomes(store, s, objectives, keys, where, lacking.get(s, [])) for s in studies]
    kept = [frame for frame in frames if len(frame)] or frames[:1]  # no empty frame in a concat (dtypes)
    trials = pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0].reset_index(drop=True)
    if trials.empty:
        shown = "; ".join(f"{s} has no {', '.join(names)}" for s, names in lacking.items())
        raise ParetoError("no trial matches the filters" + (f" ({shown})" if shown else ""))
    trials = trials.assign(on_front=front_mask(trials, objectives))
    front = _sorted_front(trials, objectives)
    if with_configs and len(front):
        front = _attach_configs(store, front)
    counts = trials["status"].value_counts().to_dict()
    return FrontQuery(trials=trials, front=front, counts={str(k): int(v) for k, v in counts.items()}, lacking=lacking)


def _attach_configs(store: StudyReader, rows):
    """``rows`` (with ``study`` and ``number``) joined with their flattened configs, order kept."""
    pieces = []
    for study, group in rows.groupby("study", sort=False):
        configs = store.configs(study, group["number"].tolist())
        keep = [c for c in configs.columns if c == "number" or c not in group.columns]
        pieces.append(group.reset_index().merge(configs[keep], on="number", how="left").set_index("index"))
    return pd.concat(pieces).loc[rows.index]


def study_front(store: StudyReader, study: str, objectives: Mapping[str, str]):
    """The front of one study with its members' configs (the search's end-of-run summary); empty without trials."""
    try:
        return query_front(store, [study], objectives).front
    except ParetoError:
        return pd.DataFrame(columns=["study", "number", "status", *objectives])


def hypervolume_progress(frame, objectives: Mapping[str, str], reference: Sequence[float] | None = None):
    """Hypervolume of the front of the first n finished trials, for each n (search progress).

    Trials are taken in finish order (``ended_at``, then number; by number when no end time is
    recorded), in one incremental pass. The reference is fixed for the whole curve (given, or the
    worst completed value of each objective), so the curve never decreases.
    """
    finished = frame[frame["status"].isin(FINISHED_STATUSES)]
    order = ["ended_at", "number"] if "ended_at" in finished and finished["ended_at"].notna().all() else ["number"]
    finished = finished.sort_values(order, kind="stable")
    names = list(objectives)
    points = np.column_stack([_numeric(finished, m) for m in names]) if len(finished) else np.empty((0, len(names)))
    usable = (finished["status"] == TrialStatus.COMPLETED).to_numpy()
    try:
        values = hypervolume_history(points, usable, list(objectives.values()), reference)
    except ObjectiveError as error:
        raise ParetoError(str(error)) from None
    return pd.DataFrame({"n_finished": np.arange(1, len(finished) + 1), "hypervolume": values})
