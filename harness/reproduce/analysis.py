"""From a reproduction's store rows to numbers: the protocol's metric per run, per variant (mean,
95% interval over seeds), runs that did not reach the level or failed to learn, and a verdict on
each of the paper's claims (paired by seed, Holm over the study's claims, ceilings flagged)."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dashboards.stats import FailureComparison, assess, difference, failure_rates, holm, mean_ci
from harness.output import printable
from harness.reproduce.predictions import NO_PREDICTIONS, correct_by_seed, seed_image_interval
from harness.reproduce.studies import FAILED_LOSS_FRACTION, PAPER_CLAIMS, Protocol
from trials.config.data_config import NUM_CLASSES
from trials.configio import MAX_INTEGER, MAX_SEED
from trials.errors import DataError, capped, cut_at_word
from trials.status import TrialStatus
from trials.training.predictions import TestPredictions


def _train_loss_column(curves: pd.DataFrame) -> str:
    """The training loss a comparison reads: in eval mode where the runs recorded it, else the running one."""
    if "train_eval_loss" in curves and curves["train_eval_loss"].notna().any():
        return "train_eval_loss"
    return "train_loss"


def accuracy_at_level(curves: pd.DataFrame, trials: pd.DataFrame, level: float | None = None):
    """(level, {trial: validation top-1 at that training loss}, [trials that never reached it]).

    Read on log-loss: between the last epoch above the level and the first at or below it, accuracy
    is interpolated linearly in log(loss). A run whose loss never reaches the level has no value
    (it is listed, never clamped to its last epoch). Without a pre-registered ``level``, the highest
    final training loss of the runs is used (a level every run reached).
    """
    column = _train_loss_column(curves)
    per_trial = {int(n): g.sort_values("epoch") for n, g in curves.groupby("number")}
    completed = set(trials[trials["status"] == TrialStatus.COMPLETED]["number"].astype(int))
    per_trial = {n: g for n, g in per_trial.items() if n in completed and g[column].notna().all()}
    if level is None:
        level = max(g[column].iloc[-1] for g in per_trial.values())
    values, missed = {}, []
    for number, g in per_trial.items():
        losses, accs = g[column].to_numpy(float), g["top1"].to_numpy(float)
        below = np.flatnonzero(losses <= level)
        if len(below) == 0:
            missed.append(number)
            continue
        i = int(below[0])
        if i == 0 or losses[i] == level:
            values[number] = float(accs[i])
            continue
        lo, hi = math.log(max(losses[i], 1e-12)), math.log(max(losses[i - 1], 1e-12))
        t = (math.log(level) - hi) / (lo - hi) if lo != hi else 1.0
        values[number] = float(accs[i - 1] + t * (accs[i] - accs[i - 1]))
    return float(level), values, sorted(missed)


@dataclass
class VariantSummary:
    variant: str
    params: float
    flops: float
    metric: str
    mean: float
    low: float  # the 95% interval, clipped to the metric's possible range (accuracy in [0, 100], loss >= 0)
    high: float
    n: int
    clipped: bool = False  # whether the t-interval reached past that range (and was cut there)
    excluded: int = 0  # runs left out: did not reach the comparison level, or failed to learn
    test_top1: float | None = None  # mean final test top-1 of the variant's runs (where the data has a test split)


@dataclass
class StudyNumbers:
    """Everything a summary reports beyond the per-variant rows."""

    level: float | None = None
    missed_level: dict[str, int] = field(default_factory=dict)  # variant -> runs that never reached the level
    failures: dict[str, tuple[int, int]] = field(default_factory=dict)  # variant -> (failed to learn, runs)
    fisher: list[tuple[str, FailureComparison]] = field(default_factory=list)


def _metric_range(kind: str) -> tuple[float, float]:
    return (0.0, float("inf")) if kind == "capacity" else (0.0, 100.0)


def _column(trials: pd.DataFrame, name: str) -> pd.Series:
    """A metric column of the trials, all missing where no trial recorded it (its runs are then left out as
    having no value, never a crash: a store that ended before any run reported is still summarised)."""
    return trials[name] if name in trials else pd.Series(np.nan, index=trials.index, dtype=float)


def failed_to_learn(trials: pd.DataFrame, classes: int) -> pd.Series:
    """Runs that learned nothing: final training loss within 5% of ln(classes), or accuracy at chance + 2
    (a run with neither recorded is not flagged here: it has no value, and is left out as such)."""
    loss = _column(trials, "train_eval_loss").fillna(_column(trials, "train_loss"))
    near_guessing = loss >= (1 - FAILED_LOSS_FRACTION) * math.log(classes)
    accuracy = _column(trials, "test_top1").fillna(_column(trials, "top1"))
    return near_guessing | (accuracy <= 100.0 / classes + 2.0)


def _samples_for(name: str, samples: dict[str, dict[int, float]]) -> dict[int, float] | None:
    """A variant's per-seed values, or for ``"A - B"`` the per-seed differences (an interaction's arm)."""
    if " - " not in name:
        return samples.get(name)
    a, b = (samples.get(part.strip()) for part in name.split(" - ", 1))
    if not a or not b:
        return None
    return {seed: a[seed] - b[seed] for seed in set(a) & set(b)}


def _ceiling(claim: tuple[str, str, str], means: dict[str, float], margin: float, large_margin: float) -> str | None:
    """Why a verdict on accuracy is decided by the ceiling, not the models (None: it is not)."""
    a, relation, b = claim
    if a not in means or b not in means:
        return None
    if relation == ">>" and 100.0 - means[b] <= large_margin:
        return f"ceiling: {b} at {means[b]:.1f}% leaves less than the {large_margin:g}-point large margin"
    if relation in ("~", ">=") and 100.0 - min(means[a], means[b]) <= margin:
        return f"ceiling: both within {margin:g} point of 100%"
    return None


def _floor(claim: tuple[str, str, str], means: dict[str, float], margin: float) -> str | None:
    """Why a verdict on a loss is decided by its floor (0), not the models (None: it is not): the
    lower of the two losses is within the margin of 0, so the difference left between them is
    below what the protocol calls a difference."""
    a, _, b = claim
    if a not in means or b not in means:
        return None
    lowest = min(means[a], means[b])
    if lowest <= margin:
        return f"floor: {a if means[a] <= means[b] else b} at {lowest:.3g}, within the {margin:g} margin of 0"
    return None


# A run's other numbers, kept beside its value in the runs file (whichever the store has).
RUN_METRICS = ("top1", "test_top1", "eval_loss", "train_loss", "train_eval_loss", "params", "flops", "epochs")
NEVER_REACHED = "never reached the level"
FAILED_TO_LEARN = "failed to learn"
NO_VALUE = "no finite value"  # completed, but the store holds no finite number of the metric for it
LEFT_OUT_REASONS = (NEVER_REACHED, FAILED_TO_LEARN, NO_VALUE)
REQUIRED_COLUMNS = ("variant", "seed", "status", "value", "left_out")
# A counted value's magnitude above which the statistics (squares, sums over seeds) would overflow.
LARGEST_VALUE = 1e150
_ACCURACIES = ("top1", "test_top1")  # a completed run's, where given: finite, in [0, 100]


def run_table(store, study: str | list[str], protocol: str | Protocol) -> tuple[pd.DataFrame, str, float | None]:
    """(runs, metric in words, level): one row per run of the study, the number its verdicts compare.

    Columns: ``variant``, ``seed``, ``status`` (the store's: completed, diverged, failed, ...),
    ``value`` (the protocol's metric; empty where the run has none), ``left_out`` (why a completed
    run is not counted: it never reached the comparison level, or it failed to learn), then the
    run's other metrics (:data:`RUN_METRICS`), its ``study`` and trial ``number``. Everything a
    verdict needs is here: :func:`summarize_runs` decides from this table alone. ``study``: one
    grid study, or the parts of one (pooled; parts not in the store are skipped).
    """
    names = [study] if isinstance(study, str) else [n for n in study if n in store.study_names()]
    if not names:
        raise ValueError(f"none of {', '.join(study)} is in the store")
    # A part interrupted before its first run is in the store with no trials: nothing to pool.
    held = [name for name in names if store.study_counts(name).total > 0] or names[:1]
    tables = [_study_runs(store, name, protocol) for name in held]
    runs = pd.concat([t[0] for t in tables], ignore_index=True)
    runs = runs.sort_values(["variant", "seed", "study", "number"]).reset_index(drop=True)
    return runs, tables[0][1], tables[0][2]


def _study_runs(store, study: str, protocol: str | Protocol) -> tuple[pd.DataFrame, str, float | None]:
    pre = protocol if isinstance(protocol, Protocol) else None
    kind = pre.kind if pre else protocol
    trials = store.trials(study)
    completed = trials["status"] == TrialStatus.COMPLETED
    left_out = pd.Series("", index=trials.index, dtype=object)
    level = None
    if kind == "generalisation":
        level, values, missed = accuracy_at_level(
            store.learning_curves(study), trials[completed], pre.level if pre else None
        )
        value = trials["number"].map(values)
        left_out[trials["number"].isin(missed)] = NEVER_REACHED
        metric = f"validation top-1 at train loss {level:.3g}"
    elif kind == "capacity":
        column = "train_eval_loss" if "train_eval_loss" in trials and trials["train_eval_loss"].notna().any() else None
        value = _column(trials, column or "train_loss")
        metric = "final train loss" + (" (eval mode)" if column else "")
    else:
        has_test = "test_top1" in trials and trials[completed]["test_top1"].notna().any()
        value = trials["test_top1"] if has_test else _column(trials, "top1")
        metric = "final test top-1" if has_test else "final validation top-1"
        # The rule needs the class count: the built-in datasets' (10 unless listed); a user's ImageFolder
        # has its own, not recorded here, so its runs are never flagged (10 would flag healthy MixUp runs).
        if pre is not None and pre.failure_rule and completed.any() and pre.dataset != "imagefolder":
            failed = failed_to_learn(trials[completed], NUM_CLASSES.get(pre.dataset, 10))
            left_out[failed[failed].index] = FAILED_TO_LEARN
    # A completed run whose metric the store holds as missing or not finite is left out, with the
    # reason, never counted: ``value`` is a finite number exactly where a run is counted.
    value = value.astype(float)
    left_out[completed & (left_out == "") & ~np.isfinite(value)] = NO_VALUE
    value = value.where(completed & (left_out == ""))
    runs = pd.DataFrame(
        {
            "variant": trials["config.name"].astype(str),
            "seed": trials["config.seed"].astype(int) if "config.seed" in trials else range(len(trials)),
            "status": trials["status"].astype(str),
            "value": value.astype(float),
            "left_out": left_out,
        }
    )
    for column in RUN_METRICS:
        if column in trials:
            runs[column] = trials[column].astype(float)
    runs["study"] = study
    runs["number"] = trials["number"].astype(int)
    return runs, metric, level


def summarize(
    store,
    study: str,
    protocol: str | Protocol,
    claims: list[tuple[str, str, str]] | None = None,
    *,
    margin: float = 1.0,
    large_margin: float = 5.0,
    numbers: StudyNumbers | None = None,
) -> tuple[list[VariantSummary], list[dict[str, Any]], str]:
    """Per-variant mean and 95% interval of the protocol's metric, and the verdict on each claim.

    ``protocol``: a :class:`Protocol`, or its kind as a word: ``generalisation`` (validation top-1
    at a training loss), ``capacity`` (final training loss, lower is better) or ``accuracy`` (final
    test top-1, else validation). Reads the store into :func:`run_table`, then decides from that
    table alone (:func:`summarize_runs`), as a reader of the committed runs file can.
    """
    runs, metric, level = run_table(store, study, protocol)
    numbers = numbers if numbers is not None else StudyNumbers()
    numbers.level = level
    return summarize_runs(
        runs, protocol, claims, metric=metric, margin=margin, large_margin=large_margin, numbers=numbers
    )


def check_runs(
    runs: pd.DataFrame,
    kind: str | None,
    *,
    source: str = "runs table",
    labels: Sequence[str] | None = None,
    variants: Collection[str] | None = None,
) -> None:
    """Refuse a runs table no verdict may be decided from, with a :class:`DataError` of one line
    naming ``source``, the row (``labels``: each row's name, a runs file's line; by default its study
    and trial number), the column and the value. Cells may be the runs file's text or the store's numbers.

    The columns :data:`REQUIRED_COLUMNS`; per row: a variant (one of ``variants``, where given), a
    whole seed >= 0, a :class:`TrialStatus` word, ``left_out`` empty or one of
    :data:`LEFT_OUT_REASONS` (a completed run's only); ``value`` a finite number within the metric's
    range (``kind``'s; ``None``: at least 0) and below :data:`LARGEST_VALUE` on exactly the rows
    counted (completed, not left out) and empty on every other (a diverged, failed or interrupted run
    has none); the run's other metrics numbers, a completed run's top-1 within [0, 100]; and one
    counted run per (variant, seed), one row per (study, trial number).

    Long because it checks every way a run can be unusable (missing, failed, diverged, unlearned) in one pass, each
    a few lines naming the run.
    """
    absent = [column for column in REQUIRED_COLUMNS if column not in runs.columns]
    if absent:
        raise DataError(f"{source}: no column {absent[0]!r} (a runs table has {', '.join(REQUIRED_COLUMNS)})")
    labels = list(labels) if labels is not None else _row_labels(runs)
    low, high = _metric_range(kind) if kind is not None else (0.0, math.inf)
    statuses = [str(status) for status in TrialStatus]
    numeric = [column for column in (*RUN_METRICS, "number") if column in runs.columns]
    counted_at: dict[tuple[str, int], int] = {}
    trial_at: dict[tuple[str, str], int] = {}
    cells = {column: runs[column].tolist() for column in (*REQUIRED_COLUMNS, *numeric, "study") if column in runs}
    for i, label in enumerate(labels):
        where = f"{source} {label}"
        variant = _text(cells["variant"][i])
        if not variant:
            raise DataError(f"{where}: the variant is empty")
        if variants is not None and variant not in variants:
            known = cut_at_word(", ".join(sorted(variants)), 200)
            raise DataError(f"{where}: variant {_shown(variant)} is not one of the study's ({known})")
        seed = _whole(cells["seed"][i])
        if seed is None or not 0 <= seed <= MAX_SEED:
            raise DataError(
                f"{where}: seed {_shown(_text(cells['seed'][i]))} for variant {printable(capped(variant))} is not a "
                f"whole number >= 0 and at most {MAX_SEED:,} (2**32 - 1, a trial's seed)"
            )
        run = f"variant {printable(capped(variant))} seed {seed}"
        status = _text(cells["status"][i])
        if status not in statuses:
            raise DataError(f"{where}: status {_shown(status)} for {run} is not a trial status ({', '.join(statuses)})")
        reason = _text(cells["left_out"][i])
        if reason and reason not in LEFT_OUT_REASONS:
            raise DataError(
                f"{where}: left_out {_shown(reason)} for {run} is not a reason a run is left out "
                f"({', '.join(map(repr, LEFT_OUT_REASONS))}, or empty)"
            )
        if reason and status != TrialStatus.COMPLETED:
            raise DataError(
                f"{where}: left_out {_shown(reason)} for {run}, a run that is {status}: "
                "only a completed run is left out"
            )
        counted = status == TrialStatus.COMPLETED and not reason
        _check_value(where, run, cells["value"][i], counted, status, reason, (low, high))
        for column in numeric:
            shown = _text(cells[column][i])
            number = _number(cells[column][i])
            if shown and number is None:
                raise DataError(f"{where}: {column} {_shown(shown)} for {run} is not a number")
            whole = _whole(cells[column][i]) if column == "number" and shown else 0
            if whole is None or not 0 <= whole <= MAX_INTEGER:
                raise DataError(f"{where}: number {_shown(shown)} for {run} is not a trial number (whole, >= 0)")
            completed_top1 = column in _ACCURACIES and status == TrialStatus.COMPLETED and shown
            if completed_top1 and not (math.isfinite(number) and 0.0 <= number <= 100.0):
                raise DataError(f"{where}: {column} {_shown(shown)} for {run} is not a top-1 in [0, 100]")
        if counted:
            if (variant, seed) in counted_at:
                raise DataError(
                    f"{source} {labels[counted_at[variant, seed]]} and {label}: {run} is counted twice "
                    "(a verdict pairs one completed run per variant and seed)"
                )
            counted_at[variant, seed] = i
        if "study" in cells and "number" in cells and _text(cells["number"][i]):
            trial = (_text(cells["study"][i]), _text(cells["number"][i]))
            if trial in trial_at:
                raise DataError(
                    f"{source} {labels[trial_at[trial]]} and {label}: trial {trial[1]} of study {trial[0]} "
                    "appears twice"
                )
            trial_at[trial] = i


def _shown(text: str) -> str:
    """A cell as an error line repeats it: quoted, capped and with control characters escaped (repr)."""
    return repr(capped(text))


def _check_value(
    where: str, run: str, cell: Any, counted: bool, status: str, reason: str, metric_range: tuple[float, float]
) -> None:
    """A row's ``value``: a finite number in range where the run is counted, empty elsewhere."""
    shown = _text(cell)
    if not counted:
        if shown:
            why = f"left out ({reason})" if reason else status
            raise DataError(
                f"{where}: value {_shown(shown)} for {run}, a run that is {why}: only a counted run has a value "
                "(leave it empty)"
            )
        return
    if not shown:
        raise DataError(
            f"{where}: value is empty for {run}, a completed run not left out (give its value, or in "
            "left_out why it is not counted)"
        )
    number = _number(cell)
    if number is None:
        raise DataError(f"{where}: value {_shown(shown)} for {run} is not a number")
    if not math.isfinite(number):
        raise DataError(f"{where}: value {_shown(shown)} for {run} is not finite")
    low, high = metric_range
    if not low <= number <= high:
        raise DataError(f"{where}: value {_shown(shown)} for {run} is outside the metric's range [{low:g}, {high:g}]")
    if abs(number) > LARGEST_VALUE:
        raise DataError(
            f"{where}: value {_shown(shown)} for {run} is too large to compute with (above {LARGEST_VALUE:g})"
        )


def _row_labels(runs: pd.DataFrame) -> list[str]:
    """Each row's name in a message: its study and trial number where the table has them."""
    if "number" in runs and "study" in runs:
        return [f"(study {study} trial {_text(n)})" for study, n in zip(runs["study"], runs["number"], strict=True)]
    if "number" in runs:
        return [f"(trial {_text(n)})" for n in runs["number"]]
    return [f"(row {i + 1})" for i in range(len(runs))]


def _text(cell: Any) -> str:
    """A cell as a reader sees it: a file's text as written, a number as Python writes it, '' for empty."""
    if cell is None:
        return ""
    if isinstance(cell, str):
        return cell.strip()
    if isinstance(cell, (bool, np.bool_)):
        return str(cell)
    if isinstance(cell, (int, np.integer)):
        return str(int(cell))
    if isinstance(cell, (float, np.floating)):
        return "" if math.isnan(cell) else repr(float(cell))
    return str(cell)


def _number(cell: Any) -> float | None:
    """A cell's number (NaN where empty), or None where it is not one."""
    if isinstance(cell, (bool, np.bool_)):
        return None
    if isinstance(cell, (int, float, np.integer, np.floating)):
        return float(cell)
    text = _text(cell)
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return None


def _whole(cell: Any) -> int | None:
    """A cell's whole number (digits only in a file: '3', not '3.0'), or None."""
    if isinstance(cell, (bool, np.bool_)):
        return None
    if isinstance(cell, (int, np.integer)):
        return int(cell)
    if isinstance(cell, (float, np.floating)):
        return int(cell) if math.isfinite(cell) and float(cell).is_integer() else None
    text = _text(cell)
    if re.fullmatch(r"[+-]?[0-9]{1,100}", text):  # more digits than any bound: not worth Python's int
        return int(text)
    return MAX_INTEGER + 1 if re.fullmatch(r"[+][0-9]+|[0-9]+", text) else None


def summarize_runs(
    runs: pd.DataFrame,
    protocol: str | Protocol,
    claims: list[tuple[str, str, str]] | None = None,
    *,
    metric: str,
    margin: float = 1.0,
    large_margin: float = 5.0,
    numbers: StudyNumbers | None = None,
) -> tuple[list[VariantSummary], list[dict[str, Any]], str]:
    """Rows, verdicts and the metric's words from a runs table (:func:`run_table`, or a committed
    ``.runs.csv``): diverged and failed runs, runs that failed to learn or never reached the level
    are counted per variant, not averaged in. Samples are keyed by seed, so claims are tested on
    per-seed differences; Holm runs over the claims; a decision at the metric's ceiling (accuracy)
    or floor (a loss) is inconclusive. ``numbers``, if given, receives the runs that missed the
    level, the failure counts and Fisher's tests.

    Long because it is one pass over the runs that fills every column of the summary together (metric, failures,
    verdicts, Holm), which share their intermediate tables.
    """
    pre = protocol if isinstance(protocol, Protocol) else None
    kind = pre.kind if pre else protocol
    # before any verdict: a table that cannot be trusted decides nothing (a variant the study never ran included)
    check_runs(runs, kind, variants=pre.variants if pre is not None and pre.variants else None)
    if pre is not None:
        claims = list(pre.claims) if claims is None else claims
    numbers = numbers if numbers is not None else StudyNumbers()
    higher = kind != "capacity"
    metric_range = _metric_range(kind)
    completed = runs[runs["status"] == TrialStatus.COMPLETED]
    for variant, group in completed.groupby("variant"):
        missed = int((group["left_out"] == NEVER_REACHED).sum())
        if missed:
            numbers.missed_level[str(variant)] = missed
        if pre is not None and pre.failure_rule and kind == "accuracy":
            numbers.failures[str(variant)] = (int((group["left_out"] == FAILED_TO_LEARN).sum()), len(group))
    samples: dict[str, dict[int, float]] = {}
    rows = []
    for variant, group in completed.groupby("variant"):
        usable = group[group["value"].notna()]
        samples[str(variant)] = {int(seed): float(v) for seed, v in zip(usable["seed"], usable["value"], strict=True)}
        if not samples[str(variant)]:
            continue
        ci = mean_ci(list(samples[str(variant)].values()))
        shown = ci.clipped(*metric_range)
        # Final numbers on the test split: every completed run of the variant, reached the level or not.
        test = group["test_top1"].mean() if "test_top1" in group and group["test_top1"].notna().any() else None
        rows.append(
            VariantSummary(
                str(variant), float(group["params"].mean()), float(group["flops"].mean()), metric, ci.mean,
                shown.low, shown.high, ci.n, clipped=(shown.low, shown.high) != (ci.low, ci.high),
                excluded=len(group) - len(usable), test_top1=None if test is None else float(test),
            )
        )  # fmt: skip
    rows.sort(key=lambda r: -r.mean if higher else r.mean)
    means = {r.variant: r.mean for r in rows}
    family = list(claims if claims is not None else PAPER_CLAIMS[kind])
    tested, missing = [], []
    for a, relation, b in family:
        claim = f"{a} {relation} {b}"
        sample_a, sample_b = _samples_for(a, samples), _samples_for(b, samples)
        if sample_a and sample_b:
            options = {"margin": margin, "large_margin": large_margin, "claim": claim}
            verdict = assess(sample_a, sample_b, relation, higher, **options)
            bound = (
                _ceiling((a, relation, b), means, margin, large_margin)
                if higher
                else _floor((a, relation, b), means, margin)
            )
            tested.append((verdict, bound, (a, relation, b)))
        else:
            missing.append((a, relation, b))
    # Holm over the study's family: every claim, untestable ones counting as p = 1.
    untestable = [assess([], [], ">", claim=" ".join(claim)) for claim in missing]
    adjusted = holm([v for v, _, _ in tested] + untestable)
    decided: dict[tuple[str, str, str], dict[str, Any]] = {}
    for v, (_, bound, (a, relation, b)) in zip(adjusted, tested, strict=False):
        result = v.result
        if bound and v.decided:
            result = f"inconclusive ({bound}; unadjusted: {v.result})"
        decided[(a, relation, b)] = {
            "claim": v.claim,
            "a": a,
            "b": b,
            "kind": relation,
            "verdict": result,
            "n": min(v.difference.n_a, v.difference.n_b),
            "difference": v.difference.estimate,
            "low": v.interval.low,
            "high": v.interval.high,
            "margin": v.margin,
            "test": v.difference.test,
            "p": v.p_value,
            "p_t": v.p_claim,
            "p_exact": v.p_exact,
            "p_claim_exact": v.p_claim_exact,
            "p_holm": v.p_adjusted,
            "power": v.power,
        }
    for a, relation, b in missing:
        used = margin if relation in ("~", ">=") else (large_margin if relation == ">>" else None)
        decided[(a, relation, b)] = {
            "claim": f"{a} {relation} {b}",
            "a": a,
            "b": b,
            "kind": relation,
            "margin": used,
            "verdict": f"inconclusive ({_why_no_sample(a, b, samples, numbers)})",
        }
    # In the protocol's order; with --only, the claims whose both sides ran (Holm above counted them all).
    shown = pre.claims_run if pre is not None and pre.only else family
    verdicts = [decided[tuple(claim)] for claim in family if tuple(claim) in set(map(tuple, shown))]
    if numbers.failures:
        numbers.fisher = _fisher_pairs(claims or [], numbers.failures)
    return rows, verdicts, metric


def _why_no_sample(a: str, b: str, samples: Mapping[str, Mapping[int, float]], numbers: StudyNumbers) -> str:
    """Why a claim has no sample on one side: that variant's runs completed but none reached the comparison
    level (a run that completed is not a run that did not complete), or none of them completed. A side
    ``"A - B"`` (an interaction's arm) is answered for the first of its variants without a sample."""
    variants = [part.strip() for side in (a, b) for part in side.split(" - ")]
    for variant in variants:
        if samples.get(variant):
            continue
        if numbers.missed_level.get(variant):
            return f"no run of {variant} reached the comparison level; {numbers.missed_level[variant]} completed"
        return f"no run of {variant} completed"
    return "the two sides share no seed"


@dataclass(frozen=True)
class PairOnTestSplit:
    """A - B on the final test top-1, paired by seed: an exploratory number beside a study's verdicts.

    Not a verdict (no margin, no Holm, not pre-registered): it says what the test split shows for
    the pairs the claims compare, where the pre-registered metric is something else (validation
    top-1 at a training-loss level, a training loss), because the test number is the one a reader
    holds against the paper's tables and the two can disagree.
    """

    a: str
    b: str
    n: int  # seeds both have a completed run with a test number
    diff_mean: float
    low: float  # 95% t-interval
    high: float
    p_t: float  # paired t-test, two-sided, of A - B = 0
    p_exact: float  # sign-flip test of the same, two-sided
    a_ahead: int  # seeds on which A scored higher
    b_ahead: int
    # The seed x image bootstrap's 95% interval of the same difference (it includes the test split's
    # own sampling error: :func:`harness.reproduce.predictions.seed_image_interval`), or why there is none.
    images_low: float | None = None
    images_high: float | None = None
    images_note: str | None = NO_PREDICTIONS


def pairs_on_test_split(
    runs: pd.DataFrame,
    claims: list[tuple[str, str, str]],
    predictions: Mapping[tuple[str, int], TestPredictions] | None = None,
) -> list[PairOnTestSplit]:
    """Each distinct pair of plain variants the claims compare, on the final test top-1 of their
    completed runs (paired over the seeds both have); pairs without two such seeds are left out.
    ``predictions``: (study, trial number) -> the run's per-image test predictions (the store's, or
    the runs file's sidecar); where every run of a pair has them, the pair gets the seed x image
    bootstrap interval over those seeds, else the reason it has none."""
    if "test_top1" not in runs:
        return []
    completed = runs[(runs["status"] == TrialStatus.COMPLETED) & runs["test_top1"].notna()]
    by_variant = {
        str(variant): {int(s): float(v) for s, v in zip(group["seed"], group["test_top1"], strict=True)}
        for variant, group in completed.groupby("variant")
    }
    run_of: dict[tuple[str, int], tuple[str, int]] = {}  # (variant, seed) -> (study, number)
    if "study" in completed and "number" in completed:
        columns = (completed["variant"], completed["seed"], completed["study"], completed["number"])
        run_of = {(str(v), int(s)): (str(st), int(n)) for v, s, st, n in zip(*columns, strict=True)}
    pairs, seen = [], set()
    for a, _, b in claims:
        if (a, b) in seen or a not in by_variant or b not in by_variant:
            continue  # an interaction claim's sides are not variants: no test-split pair
        seen.add((a, b))
        diff = difference(by_variant[a], by_variant[b])
        if not diff.paired or diff.n_a < 2:
            continue
        interval = diff.interval()
        per_seed = np.asarray(diff.per_seed)
        p_t = min(1.0, 2 * min(diff.p_above(0.0), diff.p_below(0.0)))
        p_exact = min(1.0, 2 * min(diff.exact_p(0.0, True), diff.exact_p(0.0, False)))
        seeds = sorted(set(by_variant[a]) & set(by_variant[b]))
        runs_a, runs_b = ([run_of.get((side, seed), (side, -1)) for seed in seeds] for side in (a, b))
        correct_a, correct_b, note = correct_by_seed(runs_a, runs_b, predictions or {})
        low = high = None
        if note is None:
            low, high = seed_image_interval(correct_a, correct_b)
        pairs.append(
            PairOnTestSplit(
                a, b, diff.n_a, diff.estimate, interval.low, interval.high, p_t, p_exact,
                int((per_seed > 0).sum()), int((per_seed < 0).sum()), low, high, note,
            )
        )  # fmt: skip
    return pairs


def _fisher_pairs(
    claims: list[tuple[str, str, str]], failures: dict[str, tuple[int, int]]
) -> list[tuple[str, FailureComparison]]:
    """Fisher's exact test of "A fails to learn less often than B" for each plain-variant claim."""
    out = []
    for a, _, b in claims:
        if a in failures and b in failures and (failures[a][0] or failures[b][0]):
            out.append((f"{a} fails less often than {b}", failure_rates(*failures[a], *failures[b])))
    return out
