"""The ``archsearch`` command line.

Heavy imports (torch, ray, optuna) happen inside the commands, so ``archsearch --help`` is instant.
Bad input exits with code 2 and a one-line message naming the offending value.
"""

from __future__ import annotations

from pathlib import Path

import click

from . import __version__
from .output import FORMATS, render


class UsageError(click.ClickException):
    """A one-line error about the user's input; exit code 2 (like click's own usage errors)."""

    exit_code = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="archsearch")
def main() -> None:
    """archsearch: search and benchmark CaiT and CoAtNet architectures."""


@main.command("models")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--family", type=click.Choice(["cait", "coatnet"]), default=None, help="Only this family.")
def models_command(fmt: str, family: str | None) -> None:
    """The catalogue of model presets with their key settings and parameter counts."""
    from trials.models import PRESETS, preset_names, preset_parameter_count

    rows = []
    for name in preset_names(family):
        config = PRESETS[name]
        row = {"name": name, "family": config.family, "image_size": config.image_size}
        row.update(_key_settings(config))
        row["params"] = preset_parameter_count(config)
        row["params_m"] = round(row["params"] / 1e6, 2)
        if fmt == "json":
            row["config"] = config.to_dict()
        rows.append(row)
    columns = ["name", "family", "image_size", "settings", "params_m"]
    click.echo(render(rows, fmt, columns))


def _key_settings(config) -> dict[str, str]:
    if config.family == "cait":
        ca = f"+{config.ca_depth}CA" if config.ca_depth else f" cls@{config.class_token_layer}"
        ls = config.layer_scale_init()
        ls_text = "rezero" if config.layer_scale == "rezero" else ("off" if ls is None else f"ls={ls:g}")
        th = " th" if config.talking_heads else ""
        text = f"{config.depth}SA{ca} d={config.embed_dim} h={config.num_heads} p={config.patch_size} {ls_text}{th}"
    else:
        depths = "-".join(str(d) for d in config.depths)
        dims = "-".join(str(d) for d in config.dims)
        text = f"{config.layout} blocks {depths} dims {dims}"
    return {"settings": text}


MAX_ERROR_LINE = 600  # characters: an error is one readable line, whatever value it quotes


def _one_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= MAX_ERROR_LINE else line[: MAX_ERROR_LINE - 3] + "..."


def _fail_on_config_error(error: Exception) -> UsageError:
    return UsageError(_one_line(str(error)) or type(error).__name__)


@main.command("trial")
@click.argument("config_path", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--device", default=None, help="Override the config's device (auto, cpu, cuda, cuda:N).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal only).")
def trial_command(config_path: str, fmt: str, device: str | None, progress: bool | None) -> None:
    """Run one trial from a YAML config: build, measure, train, evaluate; print the result.

    Exit code 0 when the trial completed or diverged (both are results), 1 when it failed,
    2 when the config is invalid.
    """
    import json

    from trials.configio import ConfigError
    from trials.runner import run_trial
    from trials.trial_config import load_trial_config, read_yaml

    try:
        raw = read_yaml(config_path)
        if device is not None and isinstance(raw, dict):
            raw["device"] = device
        config = load_trial_config(raw)
    except ConfigError as error:
        raise _fail_on_config_error(error) from None
    result = run_trial(config, progress=progress)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        click.echo(_trial_report(result))
    if result.status == "failed":
        raise SystemExit(1)


def _trial_report(result) -> str:
    lines = [f"status: {result.status}" + (f" (at step {result.diverged_at_step})" if result.diverged_at_step else "")]
    if result.error:
        lines.append(f"error: {result.error.splitlines()[0]}")
    if result.cost is not None:
        c = result.cost
        lines.append(
            render(
                [
                    {
                        "params": c.params,
                        "gflops": None if c.flops is None else c.flops / 1e9,
                        "img_s": c.throughput,
                        "latency_ms": c.latency_ms,
                        "batch": c.batch_size,
                        "dtype": c.dtype,
                        "device": c.device,
                    }
                ],
                "table",
            )
        )
    if result.epochs:
        columns = ["epoch", "step", "train_loss", "eval_loss", "top1", "top5", "lr", "epoch_time", "train_images_per_s"]
        lines.append(render([m.to_dict() for m in result.epochs], "table", columns))
    if result.final:
        lines.append("final: " + ", ".join(f"{k}={v:.4g}" for k, v in result.final.items()))
    lines.append(f"wall time: {result.wall_time_s:.1f}s")
    return "\n\n".join(lines)


@main.command("bench")
@click.argument("models", nargs=-1, required=True, metavar="PRESET_OR_CONFIG...")
@click.option("--image-size", type=int, default=None, help="Input size (default: each model's own).")
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--dtype", type=click.Choice(["auto", "fp32", "bf16"]), default="auto", show_default=True)
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--warmup", type=int, default=2, show_default=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def bench_command(
    models: tuple[str, ...],
    image_size: int | None,
    batch_size: int,
    device: str,
    dtype: str,
    repeats: int,
    warmup: int,
    fmt: str,
) -> None:
    """Cost only, no training: params, FLOPs, throughput and latency of presets or YAML configs."""
    from trials.configio import ConfigError

    try:
        configs = [(name, _bench_config(name, image_size)) for name in models]
    except ConfigError as error:
        raise _fail_on_config_error(error) from None
    if batch_size < 1 or repeats < 1 or warmup < 0:
        raise UsageError("--batch-size and --repeats must be >= 1, --warmup >= 0")
    from trials.measure import measure_cost
    from trials.models import build_model
    from trials.train import resolve_device, resolve_dtype

    dev = resolve_device(device)
    rows = []
    for name, config in configs:
        cost = measure_cost(
            build_model(config),
            config.image_size,
            device=dev,
            dtype=resolve_dtype(dtype, dev),
            batch_size=batch_size,
            warmup=warmup,
            repeats=repeats,
        )
        rows.append({"name": name, "family": config.family, **cost.to_dict()})
    columns = ["name", "params", "flops", "throughput", "latency_ms", "batch_size", "image_size", "dtype", "device"]
    click.echo(render(rows, fmt, columns))


def _bench_config(name: str, image_size: int | None):
    """A preset name, or a YAML file holding a model config or a trial config (its ``model``)."""
    from pathlib import Path

    from trials.configio import ConfigError
    from trials.models import PRESETS, resolve_config
    from trials.trial_config import load_trial_config, read_yaml

    if name in PRESETS:
        config = resolve_config(name)
    elif Path(name).suffix in (".yaml", ".yml") or Path(name).exists():
        raw = read_yaml(name)
        if isinstance(raw, dict) and "model" in raw:
            config = load_trial_config(raw).model
        else:
            try:
                config = resolve_config(raw)
            except ConfigError as error:
                raise ConfigError(f"{name}: {error.field}", error.message) from None
    else:
        raise ConfigError("", f"{name!r} is neither a preset ({', '.join(PRESETS)}) nor a YAML file")
    return config.replace(image_size=image_size) if image_size else config


store_option = click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="Store URL (sqlite:///PATH or postgresql://USER@HOST/DB); default $ARCHSEARCH_STORE, "
    "else sqlite:///archsearch.db.",
)


def _open_store(url: str | None, *, create: bool, read_only: bool = False):
    from harness.store import Store, StoreError

    try:
        return Store.open(url, create=create, read_only=read_only)
    except StoreError as error:
        raise UsageError(str(error)) from None


@main.command("studies")
@store_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def studies_command(store_url: str | None, fmt: str) -> None:
    """The studies in the store, with trial counts by status."""
    with _open_store(store_url, create=False, read_only=True) as store:
        frame = store.studies()
    rows = _records(frame)
    columns = ["name", "status", "objectives", "trials", "completed", "pruned", "failed", "diverged", "infeasible"]
    click.echo(render(rows, fmt, [*columns, "running", "interrupted", "updated_at", "message"]))


@main.command("trials")
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
def trials_command(study: str, store_url: str | None, fmt: str, limit: int | None, sort: str | None) -> None:
    """One row per trial of STUDY: number, status, config, params, FLOPs, throughput, final/best metrics.

    The table shows only the config keys that vary across the rows shown; CSV and JSON have all of them.
    With --sort and --limit the ordering and the cut happen in the database, so the top of a
    100,000-trial study comes back at once.
    """
    from harness.store import StoreError

    with _open_store(store_url, create=False, read_only=True) as store:
        try:
            metric, descending = _parse_sort(sort, store, study) if sort else (None, False)
            frame = store.trials(study, sort=metric, descending=descending, limit=limit)
            total = sum(n for status, n in store.counts(study).items() if status != "epochs")
        except StoreError as error:
            raise UsageError(str(error)) from None
    rows = _records(frame)
    if fmt != "table":
        click.echo(render(rows, fmt, list(frame.columns)))
        return
    config_columns = [c for c in frame.columns if c.startswith("config.")]
    varying = [c for c in config_columns if frame[c].astype(str).nunique() > 1]
    metric_columns = [c for c in frame.columns if c not in config_columns and c in _METRIC_COLUMNS]
    for row in rows:  # why a trial failed, in a few words (the whole error: --format json)
        error = " ".join(str(row.get("error") or "").split())
        row["error"] = error if len(error) <= 60 else error[:57] + "..."
    error_column = ["error"] if any(row["error"] for row in rows) else []
    columns = ["number", "status", *varying, "params", "flops", "throughput", *metric_columns, *error_column]
    click.echo(render(rows, "table", columns))
    if len(frame) < total:
        order = f", sorted by {metric} {'descending' if descending else 'ascending'}" if metric else ""
        click.echo(f"{len(frame)} of {total} trials{order}")


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
    objectives = {o["name"]: o["direction"] for o in store.study(study).get("objectives") or []}
    return metric, objectives.get(metric) == "max"


_METRIC_COLUMNS = ("top1", "top5", "eval_loss", "train_loss", "best_top1", "epochs")


def _records(frame) -> list[dict]:
    """DataFrame rows as plain dicts: NaN -> None, numpy scalars -> Python, times -> ISO strings."""
    import math

    records = []
    for record in frame.to_dict(orient="records"):
        clean = {}
        for key, value in record.items():
            if hasattr(value, "item") and not isinstance(value, (list, dict)):
                value = value.item()
            if hasattr(value, "isoformat"):
                value = value.isoformat()
            if isinstance(value, float) and math.isnan(value):
                value = None
            clean[key] = value
        records.append(clean)
    return records


@main.command("search")
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
    from harness.store import StoreError, resolve_store_url
    from search_space.validation import load_spec
    from trials.configio import ConfigError

    if spec_path is None and resume_study is None:
        raise UsageError("give a SPEC.yaml to start a search, or --resume STUDY to continue one")
    from harness.ray_setup import SearchError, check_study_name

    url = resolve_store_url(store_url)
    try:
        if spec_path is not None:
            spec = load_spec(spec_path, check_paths=address is None)
        check_study_name(resume_study or study_name or spec.name)  # before anything is written
        with _open_store(url, create=resume_study is None) as store:  # a bad URL fails here, before Ray starts
            if spec_path is None:
                spec = load_spec(store.study(resume_study)["spec"], check_paths=address is None)
    except (ConfigError, StoreError, SearchError) as error:
        raise _fail_on_config_error(error) from None
    from harness.cluster import ClusterError
    from harness.interrupts import SearchInterrupted
    from harness.search import run_search

    try:
        summary = run_search(
            spec,
            url,
            study_name=resume_study or study_name,
            address=address,
            results_dir=results_dir,
            resume=resume_study is not None,
            verbose=verbose,
        )
    except (StoreError, SearchError, ClusterError) as error:
        raise UsageError(str(error)) from None
    except SearchInterrupted as interrupted:  # Ctrl-C, SIGTERM, a store outage: resumable, one line
        click.echo(f"\n{interrupted}", err=True)
        raise SystemExit(interrupted.exit_code) from None
    except KeyboardInterrupt:  # before the search started: nothing ran
        click.echo("\nsearch interrupted before any trial ran", err=True)
        raise SystemExit(130) from None
    counts = ", ".join(f"{k} {v}" for k, v in summary.counts.items() if v and k != "epochs")
    click.echo(f"\nstudy {summary.study} in {summary.store_url}: {counts} ({summary.wall_time_s:.0f}s)")
    if summary.status != "completed":
        # The study is recorded as failed with this reason (`archsearch studies` shows it).
        click.echo(f"Error: search failed: {summary.message}", err=True)
        raise SystemExit(2 if summary.spec_problem else 1)
    from dashboards.columns import searched_config_columns

    front = summary.front
    config_columns = [c for c in front.columns if c.startswith("config.")]
    searched = searched_config_columns(spec.model_dump(mode="json"), config_columns)
    varying = [c for c in config_columns if front[c].astype(str).nunique() > 1]
    click.echo("Pareto front (" + ", ".join(f"{k}:{v}" for k, v in spec.objectives.items()) + "):")
    click.echo(render(_records(front), "table", ["number", *spec.objectives, *dict.fromkeys([*searched, *varying])]))


def _studies_objectives(store, studies: tuple[str, ...]) -> dict[str, str]:
    """The objectives the studies were searched for (they must agree; otherwise pass --objectives)."""
    import json

    from dashboards.pareto import ParetoError

    found = {}
    for name in studies:
        objectives = store.study(name)["objectives"]
        objectives = json.loads(objectives) if isinstance(objectives, str) else objectives
        found[name] = {o["name"]: o["direction"] for o in objectives}
    distinct = {tuple(v.items()) for v in found.values()}
    if len(distinct) > 1:
        shown = "; ".join(f"{k}: " + ",".join(f"{m}:{d}" for m, d in v.items()) for k, v in found.items())
        raise ParetoError(f"the studies have different objectives ({shown}): pass --objectives")
    return next(iter(found.values()))


@main.command("pareto")
@click.argument("studies", nargs=-1, required=True)
@click.option(
    "--objectives",
    default=None,
    help="2 or 3 METRIC:max|min, e.g. top1:max,flops:min (default: the study's own objectives).",
)
@click.option("--where", "where", multiple=True, metavar="KEY=VALUE", help="Filter by a config value (repeatable).")
@store_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def pareto_command(
    studies: tuple[str, ...], objectives: str | None, where: tuple[str, ...], store_url: str | None, fmt: str
):
    """The Pareto front of STUDY... (completed trials only; the others are counted)."""
    from dashboards.columns import searched_config_columns
    from dashboards.pareto import ParetoError, parse_objectives, parse_where, query_front
    from harness.store import StoreError

    try:
        filters = parse_where(where)
        with _open_store(store_url, create=False, read_only=True) as store:
            wanted = parse_objectives(objectives) if objectives else _studies_objectives(store, studies)
            result = query_front(store, list(studies), wanted, filters)
    except (ParetoError, StoreError) as error:
        raise UsageError(str(error)) from None
    front = result.front
    config_columns = [c for c in front.columns if c.startswith("config.")]
    if fmt == "table":  # the searched parameters always, and whatever else differs between members
        with _open_store(store_url, create=False, read_only=True) as store:
            specs = [store.study(name)["spec"] for name in studies]
        searched = [c for spec in specs for c in searched_config_columns(spec, config_columns)]
        varying = [c for c in config_columns if front[c].astype(str).nunique() > 1]
        columns = ["study", "number", *wanted, *dict.fromkeys([*searched, *varying])]
    else:  # JSON and CSV: flat rows, one key per column, as `trials` writes them
        columns = ["study", "number", *wanted, *config_columns]
    rows = [{c: record.get(c) for c in columns} for record in _records(front)]
    click.echo(render(rows, fmt, columns))
    if fmt == "table":
        counted = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
        click.echo(f"front of {len(front)} from {sum(result.counts.values())} trials ({counted})")


@main.command("report")
@click.argument("studies", nargs=-1, required=True)
@click.option("-o", "--output", "output", default="report.html", show_default=True, type=click.Path(dir_okay=False))
@click.option("--objectives", default=None, help="METRIC:max|min,... (default: each study's own objectives).")
@click.option("--png", "png_dir", default=None, type=click.Path(file_okay=False), help="Also write the figures here.")
@click.option("--color-by", default=None, help="Config key to colour the Pareto scatter by (e.g. config.model.layout).")
@store_option
def report_command(
    studies: tuple[str, ...],
    output: str,
    objectives: str | None,
    png_dir: str | None,
    color_by: str | None,
    store_url: str | None,
) -> None:
    """A self-contained HTML report of STUDY...: spec, hardware, counts, Pareto front, figures."""
    from dashboards.pareto import ParetoError, parse_objectives
    from harness.store import StoreError

    try:
        wanted = parse_objectives(objectives) if objectives else None
        with _open_store(store_url, create=False, read_only=True) as store:
            for study in studies:
                store.study(study)  # unknown study: a one-line error before any work
            from dashboards.report import write_report

            path = write_report(store, list(studies), wanted, output, png_dir=png_dir, color_by=color_by)
    except (ParetoError, StoreError) as error:
        raise UsageError(str(error)) from None
    except OSError as error:  # a non-directory or read-only place, a full disk: one line, exit 2
        if isinstance(error, (FileExistsError, NotADirectoryError)):
            reason = f"a file is in the way of its folder {Path(output).parent}"
        else:
            reason = error.strerror or str(error)
        raise UsageError(f"cannot write the report to {output}: {reason}") from None
    click.echo(f"report written to {Path(path).resolve()}")


@main.command("reproduce")
@click.argument("study", type=click.Choice(["coatnet-layouts", "cait-depth", "cait-class-attention"]))
@click.option(
    "--scale",
    type=click.Choice(["tiny", "cpu", "small", "paper"]),
    default="tiny",
    show_default=True,
    help="tiny: a smoke run; cpu: conclusive on a 2-core CPU; small: one GPU; paper: the papers' budgets.",
)
@click.option("--seeds", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option(
    "--protocol", "protocols", multiple=True, type=click.Choice(["generalisation", "capacity"]), help="Default: both."
)
@click.option("--dataset", default="synthetic", show_default=True, help="synthetic, digits, cifar10, cifar100, ...")
@click.option("--data-dir", default=None)
@click.option("--output", default="reproductions", show_default=True, type=click.Path(file_okay=False))
@click.option("--margin", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Equivalence margin of '~' claims, in the metric's units (points of top-1).")  # fmt: skip
@click.option("--large-margin", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="The difference a '>>' claim needs.")  # fmt: skip
@click.option("--report-only", is_flag=True, help="Write the summaries again from the store; run nothing.")
@click.option("--address", default=None, help="Ray cluster to join; default: local Ray.")
@store_option
def reproduce_command(
    study, scale, seeds, protocols, dataset, data_dir, output, margin, large_margin, report_only, address, store_url
) -> None:
    """Reproduce a paper comparison as a grid study; write a Markdown summary and an HTML report."""
    import os

    from harness.reproduce import reproduce
    from harness.store import StoreError, resolve_store_url
    from trials.configio import ConfigError

    url = resolve_store_url(store_url)
    _open_store(url, create=not report_only).close()
    protocols = tuple(protocols) or ("generalisation", "capacity")
    # The command as a reader can re-run it from where it ran: the output folder relative to there.
    shown = ["archsearch reproduce", study, f"--scale {scale}", f"--seeds {seeds}"]
    shown += [f"--protocol {p}" for p in protocols] if study == "coatnet-layouts" else []
    shown += [f"--dataset {dataset}"] + ([f"--data-dir {data_dir}"] if data_dir else [])
    shown += [f"--output {os.path.relpath(output)}"]
    shown += [f"--margin {margin:g}"] if margin != 1.0 else []
    shown += [f"--large-margin {large_margin:g}"] if large_margin != 5.0 else []
    try:
        written = reproduce(
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
        )
    except (ConfigError, StoreError, ValueError) as error:
        raise UsageError(str(error).splitlines()[0]) from None
    for path in written:
        click.echo(f"wrote {os.path.relpath(path)}")
