"""Commands that read studies from the store (never write it): ``studies``, ``trials``, ``pareto``, ``report``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from dashboards import compare
from dashboards.columns import searched_config_columns
from dashboards.files import OutputRefused, check_output, check_output_dir
from harness.cli import admin_commands
from harness.cli.common import (
    UsageError,
    open_store,
    records,
    show_cut_off_trials,
    store_option,
    warn_damaged,
    where_option,
)
from harness.output import FORMATS, format_number, printable, render
from trials.lazy import lazy_import
from trials.measurement.machine_load import load_note

pareto = lazy_import("dashboards.pareto")  # pandas and moocore: only when a front is asked for
report = lazy_import("dashboards.report")  # seaborn: only when a report is written
store_package = lazy_import("harness.store")  # SQLAlchemy
verified_front = lazy_import("dashboards.verified")  # the verified front beside the in-trial one
pandas = lazy_import("pandas")
study_queries = lazy_import("dashboards.study")  # trials --where: the filter Study.trials(where=) applies
queries = lazy_import("harness.store.queries")  # pandas
replay = lazy_import("harness.search.stop.replay")  # the early-stopping rule the report's fidelity panel replays
sampling = lazy_import("search_space.sampling")  # the spec's parameters and a config's values


@click.command("studies")
@store_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "--delete", "delete", default=None, metavar="NAME", help="Delete this study (ours and Optuna's rows; needs --yes)."
)
@click.option("--yes", is_flag=True, help="Confirm --delete (there is no prompt).")
@click.option("--purge-results", is_flag=True, help="With --delete: also remove its Ray results dir (if all ours).")
@click.option(
    "--results-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Where its search kept results (default ./ray_results).",
)
@click.option(
    "--rename", "rename", nargs=2, default=None, metavar="OLD NEW", help="Rename a study (ours and Optuna's rows)."
)
def studies_command(
    store_url: str | None,
    fmt: str,
    delete: str | None = None,
    yes: bool = False,
    purge_results: bool = False,
    results_dir: str | None = None,
    rename: tuple[str, str] | None = None,
) -> None:
    """The studies in the store, with trial counts by status; or delete or rename one (the only
    writes here, in :mod:`.admin_commands`)."""
    if delete is not None or rename is not None or purge_results or yes:
        admin_commands.manage_studies(store_url, delete, rename, yes, purge_results, results_dir)
        return
    with open_store(store_url, create=False, read_only=True) as store:
        frame = store.studies()
    warn_damaged(store)  # a study whose objectives do not parse: listed, with what is wrong
    rows = records(frame)
    columns = ["name", "status", "objectives", "trials", "completed", "pruned", "failed", "diverged", "infeasible"]
    click.echo(render(rows, fmt, [*columns, "running", "interrupted", "updated_at", "message"]))


@click.command("trials")
@click.argument("study")
@store_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "--limit", type=click.IntRange(min=0, max=2**62), default=None, help="Show at most N trials (after --sort)."
)
@click.option(
    "--sort",
    "sort",
    default=None,
    metavar="METRIC[:asc|desc]",
    help="Order by a metric (top1, flops, params, throughput, number, ended_at, ...), missing values last. "
    "Without a direction, an objective of the study sorts best first; anything else ascending.",
)
@where_option
def trials_command(
    study: str, store_url: str | None, fmt: str, limit: int | None, sort: str | None, where: tuple[str, ...]
) -> None:
    """One row per trial of STUDY: number, status, config, params, FLOPs, throughput, final/best metrics.

    The table shows the searched parameters and whatever other config keys vary across the rows
    shown; CSV and JSON have all of them.
    With --sort and --limit the ordering and the cut happen in the database, so the top of a
    100,000-trial study comes back at once; with --where the filter comes before the cut.
    """
    with open_store(store_url, create=False, read_only=True) as store:
        try:
            filters = pareto.parse_where(where)
            metric, descending = _parse_sort(sort, store, study) if sort else (None, False)
            cut = None if filters else limit
            frame = store.trials(study, sort=metric, descending=descending, limit=cut, flatten_config=False)
            frame = show_cut_off_trials(store, frame, [study])
            total = store.study_counts(study).total
            spec = store.study(study).get("spec")
        except (store_package.StoreError, pareto.FilterError) as error:
            raise UsageError(str(error)) from None
    damaged = warn_damaged(store, study)  # before the table, on stderr: --format json stays parseable
    mismatches = spec_mismatches(spec, frame)
    frame = queries.flatten_configs(frame)
    if filters:
        try:
            frame = study_queries.filter_trials(frame, filters, study)
        except pareto.FilterError as error:
            raise UsageError(str(error)) from None
        frame = frame if limit is None else frame.head(limit)
    if mismatches:
        frame = frame.assign(spec_mismatch=[mismatches.get(int(n), "") for n in frame["number"]])
        shown = "; ".join(f"trial {n}: {text}" for n, text in list(mismatches.items())[:3])
        click.echo(
            printable(  # the stored configs' values: escaped before they reach a terminal
                f"warning: {len(mismatches)} of {len(frame)} trials shown do not match the study's spec (a study "
                f"written by an older archsearch, which dropped fixed parameters?): {shown}"
                + (" ..." if len(mismatches) > 3 else "")
            ),
            err=True,
        )
    rows = records(frame)
    if fmt != "table":
        click.echo(render(rows, fmt, list(frame.columns)))
        return
    config_columns = [c for c in frame.columns if c.startswith("config.")]
    # The searched parameters always (the top 3 may agree on a knob: it was still searched), then
    # whatever else differs between the rows shown; a constant the spec fixed is said once below.
    searched = searched_config_columns(_spec_mapping(spec), config_columns)
    differing = [c for c in config_columns if frame[c].astype(str).nunique() > 1]
    varying = list(dict.fromkeys([*searched, *differing]))
    metric_columns = [c for c in frame.columns if c not in config_columns and c in _METRIC_COLUMNS]
    for row in rows:  # why a trial failed, in a few words (the whole error: --format json)
        error = " ".join(str(row.get("error") or "").split())
        row["error"] = error if len(error) <= 60 else error[:57] + "..."
    error_column = ["error"] if any(row["error"] for row in rows) else []
    mismatch_column = ["spec_mismatch"] if mismatches else []
    columns = ["number", "status", *varying, "params", "flops", "throughput", *metric_columns, *error_column]
    marks = {(study, int(row["number"])): why for row in rows if (why := load_note(row))}
    footnote = _mark_loaded_throughputs(rows, marks, study_of=lambda row: study)
    click.echo(render(rows, "table", [*columns, *mismatch_column]))
    if footnote:
        click.echo(printable(footnote))
    fixed = fixed_values(spec)
    if fixed:
        click.echo(printable("fixed by the spec: " + ", ".join(f"{name}={value!r}" for name, value in fixed.items())))
    if len(frame) < total:
        order = f", sorted by {metric} {'descending' if descending else 'ascending'}" if metric else ""
        left_out = f"; {damaged} damaged, left out (see the warnings)" if damaged else ""
        click.echo(printable(f"{len(frame)} of {total} trials{order}{left_out}"))


def _spec_mapping(spec: Any) -> dict[str, Any] | None:
    """The stored spec as a mapping (it may come back as JSON text), None where it is not one."""
    try:
        spec = json.loads(spec) if isinstance(spec, str) else spec
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


def _spec_of(spec: Any):
    """The stored spec as a SearchSpec, or None where it no longer validates (an older version's)."""
    try:
        return sampling.SearchSpec.model_validate(json.loads(spec) if isinstance(spec, str) else spec)
    except (ValueError, TypeError, sampling.ConfigError):
        return None


def fixed_values(spec: Any) -> dict[str, Any]:
    """The stored spec's fixed parameters (empty where it has none or no longer validates)."""
    search_spec = _spec_of(spec)
    return sampling.fixed_params(search_spec) if search_spec is not None else {}


def spec_mismatches(spec: Any, frame) -> dict[int, str]:
    """Trial number -> how its stored config disagrees with the study's spec, for the trials that do."""
    search_spec = _spec_of(spec)
    if search_spec is None or frame.empty:
        return {}
    found = {}
    for number, config in zip(frame["number"], frame["config"], strict=True):
        try:
            problems = sampling.config_mismatches(search_spec, config)
        except sampling.ConfigError as error:
            problems = [str(error)]
        if problems:
            found[int(number)] = "; ".join(problems)
    return found


def _parse_sort(text: str, store, study: str) -> tuple[str, bool]:
    """``top1:desc`` -> ("top1", True); a bare objective sorts best first (max -> descending)."""
    metric, sep, direction = text.partition(":")
    metric = metric.strip()
    if not metric:
        raise UsageError(f"--sort {text!r} is not METRIC[:asc|desc]")
    if sep:
        if direction not in ("asc", "desc"):
            raise UsageError(f"--sort direction {direction!r} of {metric!r} must be asc or desc")
        return metric, direction == "desc"
    return metric, store.objectives(study).get(metric) == "max"


REPORT_EXTENSIONS = (".html", ".htm")  # report -o: the report is one HTML file

_METRIC_COLUMNS = ("top1", "top5", "eval_loss", "train_loss", "best_top1", "epochs")


@click.command("pareto")
@click.argument("studies", nargs=-1, required=True)
@click.option(
    "--objectives",
    default=None,
    help="2 or 3 METRIC:max|min, e.g. top1:max,flops:min (default: the study's own objectives).",
)
@where_option
@store_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def pareto_command(
    studies: tuple[str, ...], objectives: str | None, where: tuple[str, ...], store_url: str | None, fmt: str
):
    """The Pareto front of STUDY... (completed trials only; the others are counted; what differs
    between several studies' specs is named in one warning line on stderr)."""
    try:
        filters = pareto.parse_where(where)
        with open_store(store_url, create=False, read_only=True) as store:
            wanted = pareto.parse_objectives(objectives) if objectives else pareto.studies_objectives(store, studies)
            result = pareto.query_front(store, list(studies), wanted, filters)
            outcomes = show_cut_off_trials(store, result.trials, list(studies))
            specs = {name: store.study(name)["spec"] for name in dict.fromkeys(studies)}
    except (pareto.ParetoError, pareto.FilterError, store_package.StoreError) as error:
        raise UsageError(str(error)) from None
    # Before the table and on stderr, so --format json/csv on stdout stays parseable.
    warn_damaged(store)
    differ = compare.differences_line(compare.spec_differences(specs))
    if differ:
        click.echo(printable(f"warning: {differ}"), err=True)
    if result.lacking:  # one note for every study a filter key left out whole
        shown = "; ".join(f"{study} has no {', '.join(keys)}" for study, keys in result.lacking.items())
        click.echo(printable(f"note: --where: {shown}, so none of its trials match"), err=True)
    front = result.front
    front, verified_columns = _with_verified(store_url, front, wanted)
    config_columns = [c for c in front.columns if c.startswith("config.")]
    if fmt == "table":  # the searched parameters always, and whatever else differs between members
        searched = [c for spec in specs.values() for c in searched_config_columns(spec, config_columns)]
        varying = [c for c in config_columns if front[c].astype(str).nunique() > 1]
        columns = ["study", "number", *wanted, *verified_columns, *dict.fromkeys([*searched, *varying])]
    else:  # JSON and CSV: flat rows, one key per column, as `trials` writes them
        columns = ["study", "number", *wanted, *verified_columns, *config_columns]
    rows = [{c: record.get(c) for c in columns} for record in records(front)]
    footnote = _mark_loaded_throughputs(rows, _front_load_marks(store_url, front)) if fmt == "table" else None
    click.echo(render(rows, fmt, columns))
    if footnote:
        click.echo(printable(footnote))
    if fmt == "table":
        counts = outcomes["status"].value_counts().to_dict()
        counted = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        click.echo(f"front of {len(front)} from {sum(counts.values())} trials ({counted})")


def _with_verified(store_url: str | None, front, objectives: dict[str, str]):
    """The front with its verified throughput/latency beside the in-trial values (``archsearch
    verify``) and ``on_verified_front`` per study, when a study was verified; else unchanged."""
    verified_columns: list[str] = []
    parts = []
    with open_store(store_url, create=False, read_only=True) as store:
        for study, members in front.groupby("study", sort=False):
            verified = store.verified(str(study))
            if verified.empty or not set(members["number"]) & set(verified["number"]):
                parts.append(members)
                continue
            table = verified_front.compare_fronts(members, verified.set_index("number"), objectives)
            extra = [c for c in table.columns if c.endswith("_verified") or c == "on_verified_front"]
            parts.append(members.merge(table[["number", *extra]], on="number", how="left"))
            verified_columns += [c for c in extra if c not in verified_columns]
    if not parts:
        return front, []
    return pandas.concat(parts, ignore_index=True), verified_columns


def _front_load_marks(store_url: str | None, front) -> dict[tuple[str, int], str]:
    """(study, number) -> why, for the front members whose throughput was measured beside other work."""
    if "throughput" not in front.columns or front.empty:
        return {}
    marks: dict[tuple[str, int], str] = {}
    with open_store(store_url, create=False, read_only=True) as store:
        for study, members in front.groupby("study", sort=False):
            found = verified_front.load_marks(store, str(study), members["number"])
            marks.update({(str(study), number): why for number, why in found.items()})
    return marks


def _mark_loaded_throughputs(
    rows: list[dict[str, Any]], marks: dict[tuple[str, int], str], study_of=None
) -> str | None:
    """A table's throughput cells measured beside other work get a ``*`` (the rest a space, so the digits stay
    aligned), and the footnote that says why comes back (None where none is marked). ``marks``: (study,
    number) -> why; ``study_of(row)``: a row's study (default: its ``study`` column)."""
    study_of = study_of or (lambda row: str(row.get("study")))
    marked = [(study_of(row), int(row["number"])) in marks for row in rows]
    if not any(marked) or not rows or "throughput" not in rows[0]:
        return None
    cells = [
        ("-" if row["throughput"] is None else format_number(row["throughput"])) + ("*" if mark else " ")
        for row, mark in zip(rows, marked, strict=True)
    ]
    width = max(len(cell) for cell in cells)
    for row, cell in zip(rows, cells, strict=True):
        row["throughput"] = cell.rjust(width)
    several = len({study for study, _ in marks}) > 1
    labelled = {f"{study} #{number}" if several else f"trial {number}": why for (study, number), why in marks.items()}
    return verified_front.load_footnote(labelled)


@click.command("report")
@click.argument("studies", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    "output",
    default="report.html",
    show_default=True,
    help="HTML file, named .html or .htm (- for standard output).",
)
@click.option("--objectives", default=None, help="METRIC:max|min,... (default: each study's own objectives).")
@click.option("--png", "png_dir", default=None, help="Also write the figures here, as PNGs.")
@click.option("--color-by", default=None, help="Config key to colour the Pareto scatter by (e.g. config.model.layout).")
@click.option("--static", is_flag=True, help="PNG figures and no script in the page (smaller; no hover).")
@store_option
def report_command(
    studies: tuple[str, ...],
    output: str,
    objectives: str | None,
    png_dir: str | None,
    color_by: str | None,
    static: bool,
    store_url: str | None,
) -> None:
    """A self-contained HTML report of STUDY...: spec, hardware, counts, Pareto front, interactive figures
    (hover a point for its trial), parameter importance; one offline file."""
    try:
        wanted = pareto.parse_objectives(objectives) if objectives else None
        # Looked at before anything is read or written: never the store, never a device or a link.
        store_files = store_package.sqlite_files(store_package.resolve_store_url(store_url))
        target = check_output(
            output, reads=store_files, option="--output", extensions=REPORT_EXTENSIONS, writes="the report is HTML"
        )
        if png_dir is not None:
            check_output_dir(png_dir, option="--png")
            _clear_of_figures(png_dir, store_files)
        with open_store(store_url, create=False, read_only=True) as store:
            for study in studies:
                store.study(study)  # unknown study: a one-line error before any work
            path = report.write_report(
                store,
                list(studies),
                wanted,
                target,
                png_dir=png_dir,
                color_by=color_by,
                static=static,
                rule=replay.rung_rule,
            )
            warn_damaged(store)
    except (pareto.ParetoError, store_package.StoreError, OutputRefused) as error:
        raise UsageError(str(error)) from None
    except OSError as error:  # a non-directory or read-only place, a full disk: one line, exit 2
        if isinstance(error, (FileExistsError, NotADirectoryError)):
            reason = f"a file is in the way of its folder {Path(output).parent}"
        else:
            reason = error.strerror or str(error)
        target = error.filename if isinstance(error.filename, str) and error.filename else output
        raise UsageError(printable(f"cannot write the report to {output}: {target}: {reason}")) from None
    if path is not None:  # written to standard output: nothing else goes there
        click.echo(f"report written to {printable(str(Path(path).resolve()))}")


def _clear_of_figures(png_dir: str, store_files: list) -> None:
    """The store is no file ``--png`` may write: a ``.png`` name in the --png directory is the figures'
    (``<study>-<figure>.png``, ``studies-pareto.png``). (The report itself is never a ``.png``: its
    extension is checked first.)"""

    def in_png_dir(path) -> bool:
        return Path(path).suffix.lower() == ".png" and os.path.realpath(os.path.dirname(os.path.abspath(path))) == (
            os.path.realpath(png_dir)
        )

    for read in store_files:
        if in_png_dir(read) and os.path.lexists(read):
            raise OutputRefused(
                f"--png {printable(png_dir)}: holds the store {printable(str(read))} under a figure's .png name; "
                "give another directory"
            )
