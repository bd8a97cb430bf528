"""``archsearch reproduce``: run a reproduction's grid studies, then write its summaries and reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from dashboards.files import atomic_write
from dashboards.report import write_report
from harness.reproduce import cluster_scale
from harness.reproduce.analysis import StudyNumbers, pairs_on_test_split, run_table, summarize_runs
from harness.reproduce.predictions import store_predictions
from harness.reproduce.records import write_records
from harness.reproduce.registry import plan
from harness.reproduce.studies import DEFAULT_DATASET, default_seeds
from harness.reproduce.summary import markdown_summary, study_figures
from harness.search.cluster.ray_setup import experiment_path, storage_location
from harness.search.driver import run_search
from harness.store import Store, StoreError, mask_url
from search_space.sampling import grid_points
from search_space.validation import load_spec
from trials.lazy import lazy_import
from trials.status import TrialStatus

tune = lazy_import("ray.tune")


def reproduce(
    study: str,
    store_url: str,
    *,
    scale: str,
    seeds: int,
    protocols: tuple[str, ...] = (),  # default: every protocol of the study
    dataset: str = DEFAULT_DATASET,
    data_dir: str | None = None,
    address: str | None = None,
    output: Path,
    command: str,
    results_dir: Path | None = None,
    margin: float | None = None,
    large_margin: float | None = None,
    run: bool = True,
    only: tuple[str, ...] = (),
) -> list[Path]:
    """Run the study's grid searches, then write a Markdown summary and an HTML report for each.

    ``run=False`` writes the summaries and reports again from the store (e.g. with another
    ``margin``) without running anything. ``only``: those variants alone, as their own grid study
    (``--only``); the summary's verdicts then cover the claims both of whose sides ran, and say so.

    Long because it walks a reproduction's steps in order (plan, each grid study run or resumed or skipped, then the
    summaries and reports), each step a few lines.
    """
    written = []
    rerun = rerun_command(command, store_url, address)
    # At a cluster scale (--scale imagenet) each study's learning-rate pilot runs first and its choice
    # fixes every variant's lr; None elsewhere. Refuses while a pilot is incomplete.
    pilot = pilot_step(
        study, store_url, scale=scale, seeds=seeds, protocols=tuple(protocols), dataset=dataset,
        data_dir=data_dir, address=address, results_dir=results_dir, output=output, run=run, only=tuple(only),
        rerun=rerun,
    )  # fmt: skip
    for planned in plan(study, scale, seeds, protocols, dataset, data_dir, tuple(only), pilot):
        protocol = planned.protocol
        spec = load_spec(planned.spec, check_paths=address is None)
        parts = [load_spec(part, check_paths=address is None) for part in planned.run_specs]
        if run:
            for part in parts:
                _run_or_resume(part, store_url, address, results_dir, rerun)
        with Store.open(store_url, create=False) as store:
            names = store.study_names()
            present = [n for part in parts for n in pooled_names(part.name, names)]
            if not present:  # with run=False: a one-line error if the study was never run
                store.study(parts[0].name)
            # a part interrupted before its first run is in the store with no trials: nothing to pool
            present = [n for n in present if store.study_counts(n).total > 0] or present[:1]
            missing = [part.name for part in parts if part.name not in names]
            numbers = StudyNumbers()
            used = {
                "margin": protocol.margin if margin is None else margin,
                "large_margin": protocol.large_margin if large_margin is None else large_margin,
            }
            runs, metric, numbers.level = run_table(store, present, protocol)
            rows, verdicts, _ = summarize_runs(runs, protocol, metric=metric, numbers=numbers, **used)
            outcomes = {
                str(variant): group["status"].value_counts().to_dict() for variant, group in runs.groupby("variant")
            }
            output.mkdir(parents=True, exist_ok=True)  # only now: a refused reproduction creates nothing
            figures = study_figures(store, present, rows, output, numbers.level, name=spec.name)
            summary = output / f"{spec.name}.md"
            deviations = [
                f"{what.replace('_', ' ')} {value:g} instead of the pre-registered {getattr(protocol, what):g} "
                "(verdicts and the verdicts file use it; rerun without it for the registered ones)"
                for what, value in used.items()
                if value != getattr(protocol, what)
            ]
            if seeds != default_seeds(scale):
                kept = "".join(f"; {v} keeps its pre-registered {n}" for v, n in protocol.more_seeds.items())
                deviations.append(f"{seeds} seeds per variant instead of the scale's {default_seeds(scale)} "
                                  f"(--seeds {seeds}){kept}")  # fmt: skip
            if protocol.selection_note():
                deviations.append(protocol.selection_note())
            deviations += [
                f"part {name} has not run yet: this summary pools {', '.join(present)} only" for name in missing
            ]
            for part in parts:  # a part that stopped before its end: its runs so far are pooled
                pooled = pooled_names(part.name, names)
                if pooled:
                    done = len(_planned_and_finished(store, part, names))
                    if done < part.search.n_trials:
                        deviations.append(
                            f"part {part.name} is incomplete: {done} of its {part.search.n_trials} runs have finished "
                            "(the next `reproduce` with this store runs the rest)"
                        )
            predictions = store_predictions(store, present)  # per-image test predictions, where runs kept them
            text = markdown_summary(
                spec.name, protocol, rows, verdicts, command, None, outcomes, numbers, deviations=deviations,
                test_pairs=pairs_on_test_split(runs, list(protocol.claims), predictions),
            )  # fmt: skip
            text += "".join(f"\n![{title}]({path.name})\n" for title, path in figures)
            color = "config.model.layout" if spec.family == "coatnet" else "config.model.layer_scale"
            if color not in {c for name in present for c in store.config_columns(name)}:
                color = None  # runs that recorded no model config (an older or hand-made store): uncoloured
            # The static page (PNGs, ~0.3 MB): a reproduction's report is an archive committed beside its
            # summary, five of them in the repository; `archsearch report` on the study's store gives the
            # interactive one (plotly.js alone is 4.6 MB a page).
            report = write_report(
                store, present, dict(spec.objectives), output / f"{spec.name}.html", color_by=color, static=True
            )
            records = write_records(output, spec.name, runs, verdicts, metric, predictions)
            atomic_write(summary, text)  # last: a summary is never left without its report and records
        written += [summary, *records, report, *(path for _, path in figures)]
    return written


def rerun_command(command: str, store_url: str, address: str | None) -> str:
    """What continues a stopped reproduction: the same ``archsearch reproduce`` command with its store
    (masked) and cluster. Rerun, it keeps every finished run and runs the rest (resumed, or as a
    continuation study), then writes the summaries; ``archsearch search --resume`` would run the rest
    but write no summary, and after a new sitting has no Ray state to resume from."""
    return f"{command} --store {mask_url(store_url)}" + (f" --address {address}" if address else "")


def _run_or_resume(spec, store_url: str, address: str | None, results_dir: Path | None, rerun: str) -> None:
    """Run the study's grid; a study already in the store is resumed where it stopped (its finished
    runs kept) or, when complete, not run again. A stored study planned otherwise (other seeds,
    another budget) is refused: its runs would be mixed with this plan's.

    Resuming needs Ray Tune's experiment state, which lives beside the driver that ran it; in a new
    sitting (a store carried to another machine, a results dir cleaned), the runs the study still
    lacks are run as a continuation, ``<name>.K``, a grid study of exactly those points that the
    summary pools with it (:func:`pooled_names`). Finished runs (completed, diverged, failed) are
    never repeated; interrupted ones are, unless the latest sitting's Ray state is still here: that
    sitting, the study or its latest continuation, is then resumed, its unfinished runs from their last
    checkpoint (a run stopped after hours is not trained again from its first epoch). A sitting a live
    driver runs refuses the rerun (:func:`_refuse_live_sittings`); one whose driver is gone (killed) is
    recorded ``interrupted``, with the runs it left ``running``, before a continuation replaces it.
    ``rerun``: the command a stop says continues it (:func:`rerun_command`)."""
    with Store.open(store_url) as store:
        names = store.study_names()
        stored = store.study(spec.name) if spec.name in names else None
        started = stored is not None and store.study_counts(spec.name).total > 0
        if stored is not None and started:
            _check_same_plan(stored, spec)
            if stored["status"] == TrialStatus.COMPLETED:
                return
        pooled = pooled_names(spec.name, names)
        finished = _finished_points(store, pooled) if started else set()
        latest = store.study(pooled[-1]) if started else None  # the sitting a rerun can resume
        if started:
            _refuse_live_sittings(store, pooled, rerun)
    if not started:
        run_search(spec, store_url, address=address, results_dir=results_dir, resume_with=rerun)
        return
    remaining = [p for p in grid_points(spec) if (p["variant"], p["seed"]) not in finished]
    if not remaining:
        return
    storage_path, _ = storage_location(results_dir)
    if latest["status"] != TrialStatus.COMPLETED and _can_restore(experiment_path(storage_path, latest["name"])):
        # A continuation's spec is the one it was started with (the points lacking then), as stored.
        resumed = spec if latest["name"] == spec.name else load_spec(latest["spec"], check_paths=address is None)
        run_search(resumed, store_url, address=address, results_dir=results_dir, resume=True, resume_with=rerun)
        return
    with Store.open(store_url) as store:  # the sittings a driver left running are over: recorded so, trials too
        store.mark_interrupted(names=pooled)
    continuation = spec.model_copy(
        update={
            "name": f"{spec.name}.{len(pooled) + 1}",
            "search": spec.search.model_copy(
                update={
                    "n_trials": len(remaining),
                    "grid": [{"variant": [p["variant"]], "seed": [p["seed"]]} for p in remaining],
                }
            ),
        }
    )
    run_search(load_spec(continuation.model_dump(mode="json"), check_paths=address is None), store_url,
               address=address, results_dir=results_dir, resume_with=rerun)  # fmt: skip


def _refuse_live_sittings(store, pooled: list[str], rerun: str) -> None:
    """Refuse (:class:`StoreError`) while a live driver runs any sitting of the study, before Ray starts.

    Only the sitting being written was checked: where that driver's Ray state is not here (another
    machine on a shared store, another results dir) a second ``reproduce`` started a continuation of
    the very runs the first was training, and each was trained and recorded twice."""
    running = next(_live(store, pooled), None)
    if running is not None:
        name, live = running
        raise StoreError(
            f"study {name!r} is being run by another driver ({live}): wait for it to end, or stop it "
            f"(Ctrl-C there) and then continue it with: {rerun}"
        )


def running_sittings(store, spec) -> list[tuple[str, str]]:
    """``(sitting, "pid N on HOST")`` for each sitting of the grid study ``spec`` (the study or a
    continuation) a live driver runs now: what ``--plan`` says a next ``reproduce`` is refused for."""
    return list(_live(store, pooled_names(spec.name, store.study_names())))


def _live(store, names: list[str]) -> Iterator[tuple[str, str]]:
    for name in names:
        live = store.live_driver(name)
        if live is not None:
            yield name, live


FINISHED = (TrialStatus.COMPLETED, TrialStatus.DIVERGED, TrialStatus.FAILED)  # a run with an outcome: never repeated


def finished_runs(store, spec) -> set[tuple[str, int]]:
    """The runs ``(variant, seed)`` of the grid study ``spec`` (a loaded spec) that have an outcome in
    ``store``, its continuations pooled: what the next ``reproduce`` with this store will not run again
    (``--plan`` counts them). Empty where the study never ran; a stored study of that name planned
    otherwise is refused as running it would be (a StoreError naming it)."""
    names = store.study_names()
    if spec.name in names and store.study_counts(spec.name).total > 0:
        _check_same_plan(store.study(spec.name), spec)
    return _planned_and_finished(store, spec, names)


def _planned_and_finished(store, spec, names: list[str]) -> set[tuple[str, int]]:
    """The grid points of ``spec`` that its study and continuations among ``names`` hold finished."""
    planned = {(str(p["variant"]), int(p["seed"])) for p in grid_points(spec)}
    return _finished_points(store, pooled_names(spec.name, names)) & planned


def _check_same_plan(stored, spec) -> None:
    """Refuse a stored study (a row of the store's studies) that holds another plan's runs than ``spec``'s."""
    planned, kept = spec.model_dump(mode="json"), _decoded(stored["spec"]) or {}
    if any(kept.get(key) != planned.get(key) for key in PLAN_KEYS) or _grid(kept) != _grid(planned):
        raise StoreError(
            f"study {spec.name!r} in this store was planned otherwise (another number of seeds, budget "
            "or version of the protocol): write this plan to another --store, or --report-only to "
            "summarise it"
        )


def pooled_names(name: str, names: list[str]) -> list[str]:
    """The grid study ``name`` and its continuations (``name.2``, ``name.3``, ...) among ``names``."""
    continuations = [n for n in names if n.startswith(f"{name}.") and n[len(name) + 1 :].isdigit()]
    return ([name] if name in names else []) + sorted(continuations, key=lambda n: int(n.rsplit(".", 1)[1]))


def _finished_points(store, names: list[str]) -> set[tuple[str, int]]:
    points = set()
    for name in names:
        trials = store.trials(name)
        if trials.empty:  # a part interrupted before its first run
            continue
        done = trials[trials["status"].isin(FINISHED)]
        if done.empty:  # nothing finished (its configs may predate the grid's columns)
            continue
        points |= {(str(v), int(s)) for v, s in zip(done["config.name"], done["config.seed"], strict=True)}
    return points


def _can_restore(experiment: str) -> bool:
    try:
        return bool(tune.Tuner.can_restore(experiment))
    except Exception:  # an unreadable or foreign directory: nothing to restore from
        return False


# What makes a stored grid study the same plan: the runs it holds (settings that do not change a
# run, or fields a later archsearch added to the spec, may differ).
PLAN_KEYS = ("family", "base_model", "data", "training", "measure", "params", "variants", "objectives")


def _grid(spec: dict[str, Any]) -> tuple[Any, Any]:
    search = spec.get("search") or {}
    return search.get("n_trials"), search.get("grid")


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def reproduce_coatnet_layouts(store_url: str, **kwargs: Any) -> list[Path]:
    """The CoAtNet layout study (both protocols): ``reproduce("coatnet-layouts", ...)``."""
    return reproduce("coatnet-layouts", store_url, **kwargs)


def pilot_step(
    study: str,
    store_url: str,
    *,
    scale: str,
    seeds: int,
    protocols: tuple[str, ...],
    dataset: str,
    data_dir: str | None,
    address: str | None,
    results_dir: Path | None,
    output: Path,
    run: bool,
    only: tuple[str, ...],
    rerun: str,
) -> dict[str, dict[str, float]] | None:
    """At a cluster scale: run (or resume) each study's learning-rate pilot, choose each variant's lr
    by the pre-registered rule, write ``<pilot>.json`` to ``output``; pilot name -> the choice. None
    at any other scale. Refuses (ValueError) while a pilot is incomplete: the study never starts on
    an lr not chosen."""
    if scale not in cluster_scale.CLUSTER_SCALES:
        return None
    choices = {}
    for planned in plan(study, scale, seeds, protocols, dataset, data_dir, only):
        pilot = planned.pilot
        if run:
            _run_or_resume(load_spec(pilot, check_paths=address is None), store_url, address, results_dir, rerun)
        with Store.open(store_url, create=False) as store:
            names = pooled_names(pilot["name"], store.study_names())
            tables = [store.trials(n) for n in names if store.study_counts(n).total > 0]
        trials = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
        chosen, rows = cluster_scale.choose_lrs(trials, pilot)
        output.mkdir(parents=True, exist_ok=True)
        record = {
            "pilot": pilot["name"],
            "rule": "best pilot validation top-1 at the pilot's end; ties to the lower lr; diverged/failed last",
            "lrs": list(pilot["params"]["lr"]["choice"]),
            "seeds": list(cluster_scale.PILOT_SEEDS),
            "epochs": pilot["training"]["epochs"],
            "chosen": chosen,
            "runs": rows,
        }
        atomic_write(output / f"{pilot['name']}.json", json.dumps(record, indent=2) + "\n")
        choices[pilot["name"]] = chosen
    return choices
