"""Commands that run studies and write the store: ``search``, ``reproduce`` and ``verify``."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path
from typing import NoReturn

import click
from click.core import ParameterSource

from dashboards.columns import searched_config_columns
from dashboards.files import OutputRefused, check_output_dir
from harness.cli.common import (
    UsageError,
    check_utf8_arguments,
    config_error,
    one_line,
    open_store,
    records,
    refuse_store_as_standard_output,
    store_option,
)
from harness.output import printable, render
from harness.reproduce import registry as reproduce_registry
from harness.search.cluster.ray_setup import SearchError, check_study_name
from search_space.validation import load_spec
from trials.config.data_config import TEST_SPLIT_DATASETS
from trials.configio import ConfigError
from trials.lazy import lazy_import
from trials.status import StudyStatus

# Ray, Optuna and SQLAlchemy: only once a command runs (``--help`` stays instant).
cluster = lazy_import("harness.search.cluster.join")
interrupts = lazy_import("harness.search.interrupts")
reproduction = lazy_import("harness.reproduce")
planning = lazy_import("harness.reproduce.planning")
search = lazy_import("harness.search.driver")
store_package = lazy_import("harness.store")
watch = lazy_import("harness.search.watch")
verification = lazy_import("harness.verify")  # torch and the models: only when a front is re-measured

VERIFY_COLUMNS = ("throughput", "throughput_verified", "throughput_verified_min", "throughput_verified_max",
                  "latency_ms", "latency_ms_verified", "latency_ms_verified_min", "latency_ms_verified_max",
                  "on_front", "on_verified_front")  # fmt: skip


@click.command("search")
@click.argument("spec_path", metavar="[SPEC.yaml]", required=False, type=click.Path(dir_okay=False))
@store_option
@click.option(
    "--address",
    default=None,
    help="Ray cluster to join: auto, HOST:PORT or ray://HOST:PORT (its token is found like Ray does: "
    "$RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token); default: a local Ray.",
)
@click.option("--name", "study_name", default=None, help="Study name (default: the spec's name).")
@click.option("--resume", "resume_study", default=None, metavar="STUDY", help="Continue an interrupted search.")
@click.option(
    "--results-dir",
    default=None,
    help="Where Ray Tune keeps trial checkpoints: a directory (default ./ray_results), on a cluster one every "
    "node mounts, or cloud storage (s3://bucket/path, gs://bucket/path).",
)
@click.option("-v", "--verbose", is_flag=True, help="Also show Ray's own banners and logs.")
def search_command(
    spec_path: str | None,
    store_url: str | None,
    address: str | None,
    study_name: str | None,
    resume_study: str | None,
    results_dir: str | None,
    verbose: bool,
) -> None:
    """Run a search: Optuna proposes, Ray Tune dispatches, every trial lands in the store.

    With --resume STUDY (no SPEC needed: the store keeps it), an interrupted search continues:
    finished trials are kept, unfinished ones resume from their last epoch checkpoint.
    """
    if spec_path is None and resume_study is None:
        raise UsageError("give a SPEC.yaml to start a search, or --resume STUDY to continue one")
    check_utf8_arguments()
    url = store_package.resolve_store_url(store_url)
    try:
        # The study's name first, as given (an empty --resume "" is a bad name, not a missing one).
        if resume_study is not None:
            check_study_name(resume_study, "--resume")
        elif study_name is not None:
            check_study_name(study_name, "--name")
        if spec_path is not None:
            spec = load_spec(spec_path, check_paths=address is None)
            if resume_study is None and study_name is None:
                check_study_name(spec.name, "name")
        # A bad URL fails here, before Ray starts; an absent store is created only once the search's
        # checks pass (a refused search creates nothing).
        refuse_store_as_standard_output(url)
        store = store_package.Store.open_existing(url) if resume_study is None else open_store(url, create=False)
        if store is not None:
            with store:
                if spec_path is None:
                    spec = load_spec(store.study(resume_study)["spec"], check_paths=address is None)
    except (ConfigError, store_package.StoreError, SearchError) as error:
        raise config_error(error) from None
    try:
        summary = search.run_search(
            spec,
            url,
            study_name=resume_study if resume_study is not None else study_name,
            address=address,
            results_dir=results_dir,
            resume=resume_study is not None,
            verbose=verbose,
        )
    except search.NothingToResume as finished:  # exit 0: the study is as the user wants it
        click.echo(str(finished))
        return
    except (store_package.StoreError, SearchError, cluster.ClusterError) as error:
        raise UsageError(str(error)) from None
    except interrupts.SearchInterrupted as interrupted:  # Ctrl-C, SIGTERM, a store outage: resumable, one line
        _end_interrupted(interrupted)
    except KeyboardInterrupt:  # before the search started: nothing ran
        click.echo("\nsearch interrupted before any trial ran", err=True)
        raise SystemExit(130) from None
    counts = ", ".join(f"{k} {v}" for k, v in summary.counts.items() if v)
    click.echo(f"\nstudy {summary.study} in {summary.store_url}: {counts} ({summary.wall_time_s:.0f}s)")
    if summary.status != StudyStatus.COMPLETED:
        # The study is recorded as failed with this reason (`archsearch studies` shows it).
        click.echo(f"Error: search failed: {summary.message}", err=True)
        raise SystemExit(2 if summary.spec_problem else 1)
    front = summary.front
    config_columns = [c for c in front.columns if c.startswith("config.")]
    searched = searched_config_columns(spec.model_dump(mode="json"), config_columns)
    varying = [c for c in config_columns if front[c].astype(str).nunique() > 1]
    click.echo("Pareto front (" + ", ".join(f"{k}:{v}" for k, v in spec.objectives.items()) + "):")
    click.echo(render(records(front), "table", ["number", *spec.objectives, *dict.fromkeys([*searched, *varying])]))
    if summary.verified is not None:
        table = summary.verified
        click.echo("Front re-measured alone (search.verify_front):")
        click.echo(render(records(table), "table", ["number", *[c for c in VERIFY_COLUMNS if c in table.columns]]))


@click.command("reproduce")
@click.argument("study", type=click.Choice(list(reproduce_registry.STUDIES)))
@click.option(
    "--scale",
    type=click.Choice(list(reproduce_registry.SCALE_NAMES)),
    default="tiny",
    show_default=True,
    help="tiny: a smoke run in minutes that decides nothing (the default, so that a forgotten --scale "
    "costs minutes, not hours: the plan and the run say so); cpu: the committed studies' budget on a 2-core "
    "CPU (decides some claims, not all: see docs/reproductions); small: one GPU; paper: the papers' budgets; "
    "imagenet: your GPU cluster and ImageFolder (--dataset imagefolder --data-dir DIR; 160 px, a learning-rate "
    "pilot first, --plan prints the GPU-hours).",
)
@click.option("--seeds", type=click.IntRange(1, 100), default=None,
              help="Seeds per variant (default: the scale's, 7 at cpu). A variant the protocol pre-registers "
                   "more seeds for keeps them (cpu: C-C-T-T and C-T-T-T 30); --plan shows each variant's.")  # fmt: skip
@click.option(
    "--only",
    "only",
    default=None,
    metavar="A,B,...",
    help="Run (or plan) these variants alone, as their own grid study; the verdicts cover the claims "
    "both of whose sides ran.",
)
@click.option(
    "--protocol",
    "protocols",
    multiple=True,
    type=click.Choice(list(reproduce_registry.PROTOCOL_NAMES)),
    help="Default: every protocol of the study.",
)
@click.option("--dataset", default="mnist5k", show_default=True, help="mnist5k, synthetic, digits, cifar10, ...")
@click.option("--data-dir", default=None)
@click.option("--output", default="reproductions", show_default=True, help="Directory the summaries go to.")
@click.option("--margin", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Margin of '~' and '>=' claims, in the metric's units (default: the protocol's).")  # fmt: skip
@click.option("--large-margin", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The difference a '>>' claim needs (default: the protocol's).")  # fmt: skip
@click.option("--report-only", is_flag=True, help="Write the summaries again from the store; run nothing.")
@click.option(
    "--plan", "plan_only", is_flag=True, help="Print the variants, the protocol and the time here; run nothing."
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="With --plan: a table or JSON.")  # fmt: skip
@click.option("--address", default=None, help="Ray cluster to join; default: local Ray.")
@store_option
def reproduce_command(
    study, scale, seeds, only, protocols, dataset, data_dir, output, margin, large_margin, report_only, plan_only,
    fmt, address, store_url,
) -> None:  # fmt: skip
    """Reproduce a paper comparison as a grid study; write a Markdown summary and an HTML report."""
    check_utf8_arguments()
    for option, value in (("--margin", margin), ("--large-margin", large_margin)):
        if value is not None and not math.isfinite(value):  # click's range lets nan and inf through
            raise UsageError(f"{option}: {value} is not a finite number")
    scale_given = click.get_current_context().get_parameter_source("scale") != ParameterSource.DEFAULT
    seeds_given = seeds is not None
    seeds = seeds if seeds_given else reproduction.default_seeds(scale)
    variants = _only_variants(only)
    if plan_only:
        _print_plan(study, scale, seeds, tuple(protocols), dataset, data_dir, fmt, variants, scale_given, store_url)
        return
    try:  # --only checked (an unknown variant named) before anything is opened or run
        planned = reproduction.plan(study, scale, seeds, tuple(protocols), dataset, data_dir, variants)
    except (ConfigError, ValueError) as error:
        raise UsageError(one_line(str(error))) from None
    url = store_package.resolve_store_url(store_url)
    try:  # looked at before the store is opened or created: a directory or nothing, never a link
        check_output_dir(output, option="--output")
    except OutputRefused as error:
        raise UsageError(str(error)) from None
    # A bad URL fails here; an absent store is created by the first search that runs (report-only needs one).
    store = open_store(url, create=False) if report_only else _existing_store(url)
    if store is not None:
        store.close()
    # Said once every check has passed (a refusal stays one line), before hours of runs start.
    notes = [_default_scale_note(scale)] if not (scale_given or report_only) else []
    notes += [run.protocol.more_seeds_note() for run in planned] if seeds_given and not report_only else []
    notes += progress_notes(planned, url) if store is not None and not report_only else []
    for note in dict.fromkeys(n for n in notes if n):
        click.echo(f"note: {note}", err=True)
    protocols = tuple(protocols) or reproduce_registry.STUDIES[study].protocols
    # The command as a reader can re-run it from where it ran: the output folder relative to there.
    shown = ["archsearch reproduce", study, f"--scale {scale}", f"--seeds {seeds}"]
    shown += [f"--only {shlex.quote(','.join(variants))}"] if variants else []
    shown += [f"--protocol {p}" for p in protocols]
    shown += [f"--dataset {dataset}"] + ([f"--data-dir {data_dir}"] if data_dir else [])
    shown += [f"--output {os.path.relpath(output)}"]
    shown += [f"--margin {margin:g}"] if margin is not None else []
    shown += [f"--large-margin {large_margin:g}"] if large_margin is not None else []
    try:
        written = reproduction.reproduce(
            study,
            url,
            scale=scale,
            seeds=seeds,
            protocols=protocols,
            dataset=dataset,
            data_dir=data_dir,
            address=address,
            output=Path(output),
            command=" ".join(shown),
            margin=margin,
            large_margin=large_margin,
            run=not report_only,
            only=variants,
        )
    except (ConfigError, store_package.StoreError, ValueError) as error:
        raise UsageError(str(error).splitlines()[0]) from None
    except interrupts.SearchInterrupted as interrupted:  # as a search's: its line says to rerun this command
        _end_interrupted(interrupted)
    except OSError as error:  # a file of the summary set that cannot be written: one line, exit 2, no summary
        target = error.filename2 or error.filename
        if not (isinstance(target, str) and Path(target).resolve().is_relative_to(Path(output).resolve())):
            raise
        raise UsageError(printable(f"cannot write {os.path.relpath(target)}: {error.strerror or error}")) from None
    for path in written:
        click.echo(f"wrote {printable(os.path.relpath(path))}")


def _end_interrupted(interrupted) -> NoReturn:
    """A search (or a reproduction's) stopped early: its one line (how to continue), then the stop's exit code,
    at once where the signal also ended the local Ray (a batch scheduler's SIGTERM to the process group),
    whose own shutdown would wait a minute and exit 1."""
    click.echo(f"\n{interrupted}", err=True)
    watch.exit_at_once_if_local_ray_died(interrupted.exit_code)
    raise SystemExit(interrupted.exit_code) from None


def _existing_store(url: str):
    """The store at ``url``, or None where there is none yet but one could be created (one line otherwise)."""
    refuse_store_as_standard_output(url)
    try:
        return store_package.Store.open_existing(url)
    except store_package.StoreError as error:
        raise UsageError(str(error)) from None


def _only_variants(only: str | None) -> tuple[str, ...]:
    """``--only A,B`` as its variant names, in the order given, each once (an empty one refused)."""
    if only is None:
        return ()
    names = tuple(dict.fromkeys(name.strip() for name in only.split(",")))
    if not all(names):
        raise UsageError(f"--only {printable(only)!r}: give variant names separated by commas (see --plan)")
    return names


def _default_scale_note(scale: str) -> str:
    return (f"scale {scale} (the default, no --scale given): a smoke run that decides nothing; --scale cpu "
            "is the committed studies' budget")  # fmt: skip


def _metric_words(protocol) -> str:
    """The protocol's metric in a few words: what ``level`` means, never a bare ``None``."""
    if protocol.level is not None:
        return f"validation top-1 at training loss {protocol.level:g}"
    if protocol.kind == "accuracy":  # the test split only where the dataset keeps one (ImageFolder: val/)
        return "final test top-1" if protocol.dataset in TEST_SPLIT_DATASETS else "final validation top-1"
    return {"capacity": "final training loss"}.get(protocol.kind, protocol.kind)


def _wall_time(seconds: float | None, span: list[float] | None = None) -> str:
    """``16 min (12-21)``: the estimate and its range (the plan at its fastest and slowest timed steps)."""
    if seconds is None:
        return "not estimated at this scale (its training set's size is not fixed here)"
    low, high = span or (seconds, seconds)
    if high < 60:
        return "under a minute"
    minutes, lowest, highest = (round(s / 60) for s in (seconds, low, high))
    spread = f" ({lowest:,}-{highest:,})" if lowest != highest else ""
    return f"{minutes:,} min{spread}" + (f", {seconds / 3600:.1f} h" if minutes >= 120 else "")


def _run_s(variant: dict) -> str | None:
    """A variant's ``run_s`` cell: ``157 (120-190)``, the estimate and its range; None where not estimated."""
    seconds = variant.get("estimated_run_s")
    if seconds is None:
        return None
    low, high = (round(s) for s in variant.get("estimated_run_s_range") or (seconds, seconds))
    return f"{round(seconds):,}" + (f" ({low:,}-{high:,})" if low != high else "")


def _print_plan(
    study: str,
    scale: str,
    seeds: int,
    protocols: tuple,
    dataset: str,
    data_dir,
    fmt: str,
    only: tuple[str, ...] = (),
    scale_given: bool = True,
    store_url: str | None = None,
) -> None:
    """``--plan``: the variants (seeds, params, FLOPs, token grids), the protocol and the estimated time here;
    where the store (``--store``, else ``$ARCHSEARCH_STORE``, else the default) exists, the runs it already
    holds and the time the rest needs."""
    try:
        runs = reproduction.plan(study, scale, seeds, protocols, dataset, data_dir, only)
        for planned in runs:  # the checks the run makes before it writes anything: a plan it would refuse is refused
            for spec in {planned.spec["name"]: planned.spec, **{p["name"]: p for p in planned.run_specs}}.values():
                check_study_name(spec["name"], "--dataset")
                load_spec(spec, check_paths=True)
    except (ConfigError, ValueError, SearchError) as error:
        raise UsageError(one_line(str(error))) from None
    finished, where, running = _stored_progress(runs, store_url)
    report = planning.plan_report(runs, scale=scale, finished=finished)
    if running is not None:
        for entry in report["studies"]:
            entry["running_now"] = [{"study": s, "driver": d} for s, d in running.get(entry["study"], [])]
    if fmt == "json":
        click.echo(json.dumps(report, indent=2))
        return
    scale_words = f"scale {scale}" if scale_given else _default_scale_note(scale)
    for run, entry in zip(runs, report["studies"], strict=True):
        protocol = run.protocol
        click.echo(f"{entry['study']}: {scale_words}; {protocol.dataset} at {protocol.image_size} px, "
                   f"{protocol.epochs} epochs, {protocol.seeds_text()}, {entry['runs']:,} runs; "
                   f"metric: {_metric_words(protocol)}")  # fmt: skip
        rows = [
            {"variant": v["name"], "seeds": v["seeds"], "params": v["params"], "flops": v["flops"],
             "depths": "/".join(map(str, v["depths"])), "widths": "/".join(map(str, v["widths"])),
             "grids": "/".join("x".join(map(str, grid)) for grid in v["grids"]), "run_s": _run_s(v)}
            for v in entry["variants"]
        ]  # fmt: skip
        columns = ["variant", "seeds", "params", "flops", "depths", "widths", "grids", "run_s"]
        if finished is not None:
            for row, variant in zip(rows, entry["variants"], strict=True):
                row["finished"] = variant["finished"]
            columns.insert(2, "finished")
        click.echo(render(rows, "table", columns))
        claims = "; ".join(" ".join(c) for c in protocol.claims_run) or "none (no claim has both sides here)"
        click.echo(("claims run: " if protocol.only else "claims: ") + claims)
        for note in entry["notes"]:
            click.echo(f"note: {note}")
        if "pilot" in entry:
            click.echo(f"pilot {entry['pilot']['study']}: {entry['pilot']['runs']} runs, first (the learning-rate "
                       "pilot's own grid study; never pooled into the summary)")  # fmt: skip
        for part in entry["parts"]:
            click.echo(f"part {part['study']}: {part['runs']} runs (its own grid study; the summary pools the parts)")
        wall = _wall_time(entry["estimated_wall_time_s"], entry["estimated_wall_time_s_range"])
        if finished is None:
            click.echo(f"estimated wall time here: {wall}\n")
            continue
        click.echo(f"estimated wall time here: {wall}")
        done, total = entry["finished_runs"], entry["runs"]
        if done == total:
            click.echo(f"in the store {where}: all {total:,} runs have finished; `reproduce` runs nothing again\n")
        else:
            left = _wall_time(entry["remaining_wall_time_s"], entry["remaining_wall_time_s_range"])
            busy = "".join(f"; {r['study']} is being run now by another driver ({r['driver']}): a `reproduce` "
                           "is refused until it ends" for r in entry.get("running_now", []))  # fmt: skip
            click.echo(f"in the store {where}: {done:,} of {total:,} runs have finished; the next `reproduce` with "
                       f"it runs the other {total - done:,}: {left}{busy}\n")  # fmt: skip


def progress_notes(planned: list, url: str) -> list[str]:
    """A later sitting of a reproduction: per planned study, how many of its runs the store already holds
    finished (not run again) and how many this sitting runs; nothing for a study none of whose runs finished."""
    finished, where, _ = _stored_progress(planned, url)
    notes = []
    for run in planned:
        done, total = len((finished or {}).get(run.spec["name"], ())), run.spec["search"]["n_trials"]
        if done:
            rest = "nothing is left to run" if done == total else f"running the other {total - done:,}"
            notes.append(f"{done:,} of {total:,} runs of {run.spec['name']} have finished in the store {where}; {rest}")
    return notes


def _stored_progress(runs: list, store_url: str | None) -> tuple[dict[str, set] | None, str, dict[str, list] | None]:
    """Per planned study, the runs the store already holds (:func:`harness.reproduce.run.finished_runs`),
    the store's URL as printed (its password masked), and per planned study its sittings a live driver
    runs now (:func:`harness.reproduce.run.running_sittings`); None where no store exists there yet. A
    store that holds one of these studies planned otherwise is refused, as running the plan would be."""
    url = store_package.resolve_store_url(store_url)
    where = store_package.mask_url(url)
    try:
        store = store_package.Store.open(url, create=False, read_only=True)
    except store_package.NoStore:
        return None, where, None
    except store_package.StoreError as error:
        raise UsageError(one_line(str(error))) from None
    with store:
        try:
            finished = {
                planned.spec["name"]: set().union(
                    *(reproduction.finished_runs(store, load_spec(p, check_paths=False)) for p in planned.run_specs)
                )
                for planned in runs
            }
            running = {
                planned.spec["name"]: [
                    found
                    for p in planned.run_specs
                    for found in reproduction.running_sittings(store, load_spec(p, check_paths=False))
                ]
                for planned in runs
            }
        except store_package.StoreError as error:
            raise UsageError(one_line(str(error))) from None
    return finished, where, running


@click.command("verify")
@click.argument("study")
@store_option
@click.option("--repeats", type=click.IntRange(1, 1000), default=5, show_default=True, help="Interleaved rounds.")
@click.option(
    "--device",
    default="auto",
    show_default=True,
    help="auto: a Ray task, on a whole GPU of the cluster when the study's trials ran on GPUs; "
    "cpu, cuda or cuda:N: here, on this machine.",
)
@click.option("--address", default=None, help="The Ray cluster for --device auto (default: a local Ray).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
def verify_command(study: str, store_url: str | None, repeats: int, device: str, address: str | None, fmt: str) -> None:
    """Re-measure the throughput and latency of STUDY's front alone on one device.

    Each member is rebuilt and timed as its trial ran (compiled, at its batch size and at batch 1)
    in REPEATS rounds that interleave the members; the medians and spreads are stored as verified
    measurements (the in-trial ones are kept), and the front is recomputed among its members on
    them: ``on_verified_front`` marks who stays. A study whose trials ran on GPUs is timed on a
    whole GPU of the Ray cluster, or refused when it has none free.
    """
    url = store_package.resolve_store_url(store_url)
    settings = verification.VerifySettings(repeats=repeats, device=device, address=address)
    try:
        with open_store(url, create=False, read_only=True) as store:
            live = store.live_driver(study) if study in store.study_names() else None
        if live is not None:  # its "alone" timings would be taken beside the search's own training
            click.echo(
                f"warning: study {study} is still being searched ({live}): these timings share the machine "
                "with its trials; verify again when it has ended",
                err=True,
            )
        table = verification.verify_front(url, study, settings)
    except (store_package.StoreError, verification.VerifyError) as error:
        raise UsageError(str(error)) from None
    columns = ["number", *[c for c in table.columns if c not in ("number", *VERIFY_COLUMNS)]]
    columns += [c for c in VERIFY_COLUMNS if c in table.columns]
    click.echo(render(records(table), fmt, columns))
    dropped = [int(n) for n in table.loc[~table["on_verified_front"], "number"]]
    if fmt == "table" and dropped:
        click.echo(f"off the front on verified values: {', '.join(map(str, dropped))}", err=True)
