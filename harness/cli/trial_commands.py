"""Commands about one model or one trial, no store involved: ``models``, ``trial``, ``bench``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from harness.cli.common import UsageError, config_error, one_line
from harness.output import FORMATS, render
from harness.preflight import bench_preflight, memory_preflight
from search_space.validation import check_data_dir
from trials.config.data_config import MAX_BATCH_SIZE
from trials.config.trial_config import anchor_paths, load_trial_config, read_yaml
from trials.configio import ConfigError
from trials.devices.cpus import usable_cpus
from trials.lazy import lazy_import
from trials.status import TrialStatus

# torch and the models: only for the commands that build one (``--help`` stays instant).
models_package = lazy_import("trials.models")
measure = lazy_import("trials.measurement.measure")
runner = lazy_import("trials.runner")
train = lazy_import("trials.training.train")
gpu = lazy_import("trials.devices.gpu")  # the device a config names, checked before anything runs
tqdm_std = lazy_import("tqdm.std")  # the epoch bar: only when a trial runs with it


@click.command("models")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--family", type=click.Choice(["cait", "coatnet"]), default=None, help="Only this family.")
@click.option(
    "--residual-schemes",
    "schemes",
    is_flag=True,
    help="The residual schemes a CaiT/DeiT model takes (`residual:`), with their update and paper.",
)
@click.option(
    "--init-schemes",
    "inits",
    is_flag=True,
    help="The initialisations a model's linear layers take (`init:`), with their rule and source.",
)
def models_command(fmt: str, family: str | None, schemes: bool, inits: bool) -> None:
    """The catalogue of model presets with their key settings and parameter counts."""
    if inits:
        docs = models_package.INIT_SCHEME_DOCS
        rows = [{"init": name, "rule": rule, "source": source} for name, (rule, source) in docs.items()]
        click.echo(render(rows, fmt, ["init", "rule", "source"]))
        return
    if schemes:
        docs = models_package.RESIDUAL_SCHEME_DOCS
        rows = [{"residual": name, "update": update, "paper": paper} for name, (update, paper) in docs.items()]
        click.echo(render(rows, fmt, ["residual", "update", "paper"]))
        return
    rows = []
    for name in models_package.preset_names(family):
        config = models_package.PRESETS[name]
        row = {"name": name, "family": config.family, "image_size": config.image_size}
        row.update(_key_settings(config))
        if config.family == "cait":
            row["residual"] = config.residual_scheme
        row["init"] = config.init_scheme
        row["params"] = models_package.preset_parameter_count(config)
        row["params_m"] = round(row["params"] / 1e6, 2)
        if fmt == "json":
            row["config"] = config.to_dict()
        rows.append(row)
    columns = ["name", "family", "image_size", "settings", "params_m"]
    click.echo(render(rows, fmt, columns))


def _key_settings(config) -> dict[str, str]:
    if config.family == "cait":
        ca = f"+{config.ca_depth}CA" if config.ca_depth else f" cls@{config.class_token_layer}"
        gain = config.residual_gain()
        scheme = config.residual_scheme
        residual = f"{scheme} eps={gain[1]:g}" if scheme in ("layerscale", "scalar") and gain else scheme
        th = " th" if config.talking_heads else ""
        text = f"{config.depth}SA{ca} d={config.embed_dim} h={config.num_heads} p={config.patch_size} {residual}{th}"
    else:
        depths = "-".join(str(d) for d in config.depths)
        dims = "-".join(str(d) for d in config.dims)
        text = f"{config.layout} blocks {depths} dims {dims}"
    return {"settings": text}


@click.command("trial")
@click.argument("config_path", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--device", default=None, help="Override the config's device (auto, cpu, cuda, cuda:N).")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bars on stderr: epochs (with loss and top-1) and each epoch's steps (default: on a terminal only).",
)
@click.option(
    "--init-from",
    "init_from",
    type=click.Path(dir_okay=False),
    default=None,
    help="Start from these model weights (archsearch export --weights): a fine-tune; overrides init_from.",
)
def trial_command(config_path: str, fmt: str, device: str | None, progress: bool | None, init_from: str | None) -> None:
    """Run one trial from a YAML config: build, measure, train, evaluate; print the result.

    With ``--init-from W.pt`` (or ``init_from:`` in the config, relative to the config file) the
    model starts from those weights, loaded strictly, and the optimiser and schedule start fresh: a
    fine-tune of the same model (same params and FLOPs).

    Exit code 0 when the trial completed or diverged (both are results), 1 when it failed,
    2 when the config is invalid.
    """
    try:
        raw = anchor_paths(read_yaml(config_path), Path(config_path).parent)  # init_from: beside the YAML
        if not isinstance(raw, dict):  # never echoed: the file may not be the config the user meant
            raise ConfigError("", f"{config_path}: a trial config is a YAML mapping (model:, data:, ...), "
                                  f"this file holds a {type(raw).__name__}")  # fmt: skip
        if device is not None:
            raw["device"] = device
        if init_from is not None:  # relative to where the command runs, as any path on its command line
            raw["init_from"] = os.path.abspath(Path(init_from).expanduser())
        config = load_trial_config(raw)
        device = gpu.checked_device(config.device)  # a device this machine lacks: one line now, not a failed trial
        check_data_dir(config.data, search=False)  # a data_dir that is not a directory here: one line now
        check_local_processes(config.distributed.workers, device.type)
        check_init_from(config.init_from)
    except ConfigError as error:
        raise config_error(error) from None
    except gpu.DeviceError as error:
        raise UsageError(f"device: {error}") from None
    show = sys.stderr.isatty() if progress is None else progress
    bar = EpochBar(config.training.epochs if config.training.steps is None else None) if show else None
    try:
        result = runner.run_trial(config, progress=show, preflight=memory_preflight, on_epoch=bar)
    finally:
        if bar is not None:
            bar.close()
    refused = result.status == TrialStatus.FAILED and result.config_key is not None  # the input, not the run
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    elif not refused:
        click.echo(_trial_report(result))
    if refused:  # a usage error naming the key, as if it had been found before the trial started
        raise UsageError(one_line((result.error or "").removeprefix("ConfigError: ")))
    if result.status == TrialStatus.FAILED:
        raise SystemExit(1)


class EpochBar:
    """``archsearch trial``'s bar: one tick per epoch, the last epoch's training loss and validation top-1 as
    its postfix, on stderr (stdout keeps the result, a JSON or a table). It appears as the trial starts (0 of E
    while the data and the model are built, measured and compiled); the trainer's bar of the epoch's steps
    sits under it and goes when the epoch ends. ``epochs``: the budget, or None until the first epoch
    says it (a ``training.steps`` budget is counted in epochs by the trainer)."""

    def __init__(self, epochs: int | None, stream=None):
        self.bar = tqdm_std.tqdm(total=epochs, desc="trial", unit="epoch", file=stream or sys.stderr, leave=True)

    def __call__(self, record) -> None:
        """An :class:`trials.epoch_progress.EpochProgress` from ``run_trial``'s ``on_epoch``."""
        if record.epochs is not None and self.bar.total != record.epochs:
            self.bar.total = record.epochs
        self.bar.set_postfix_str(f"loss {record.train_loss:.4g}  top1 {record.top1:.1f}%", refresh=False)
        self.bar.update(record.epoch - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def check_init_from(path: str | None) -> None:
    """A weights file that is not there: one line now, not after the data is built (whether the
    weights fit the model is checked once it is built: :func:`trials.training.checkpoint.load_initial_weights`)."""
    if path is not None and not Path(path).is_file():
        what = "no such file" if not Path(path).exists() else "not a regular file"
        raise ConfigError("init_from", f"{path}: {what} (archsearch export STUDY N --weights W.pt writes one)")


def check_local_processes(workers: int, device_type: str) -> None:
    """A data-parallel trial on this machine's CPUs runs one process per rank: more ranks than usable
    CPUs is refused (six ranks on two cores once spawned five processes, 3.5 GB, to crawl)."""
    if workers > 1 and device_type == "cpu":
        cpus = usable_cpus()
        if workers > cpus:
            raise ConfigError(
                "distributed.workers",
                f"{workers} processes on the CPU, but this process may use {cpus} CPUs: at most {cpus} "
                "(or run it in a search on a Ray cluster, one node's CPUs per rank)",
            )


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


@click.command("bench")
@click.argument("models", nargs=-1, required=True, metavar="PRESET_OR_CONFIG...")
@click.option("--image-size", type=int, default=None, help="Input size (default: each model's own).")
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--dtype", type=click.Choice(["auto", "fp32", "bf16", "fp16"]), default="auto", show_default=True)
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
    try:
        configs = [(name, _bench_config(name, image_size)) for name in models]
    except ConfigError as error:
        raise config_error(error) from None
    if batch_size < 1 or repeats < 1 or warmup < 0:
        raise UsageError("--batch-size and --repeats must be >= 1, --warmup >= 0")
    if batch_size > MAX_BATCH_SIZE:  # the bound every batch size of a trial config has
        raise UsageError(f"--batch-size {batch_size} is more than {MAX_BATCH_SIZE:,} images")
    dev = train.resolve_device(device)
    for name, config in configs:  # before any is built: one that cannot fit is refused naming its values
        try:
            bench_preflight(config, dev, batch_size)
        except ConfigError as error:
            raise config_error(ConfigError(f"{name}: {error.field}", error.message)) from None
    rows = []
    for name, config in configs:
        cost = measure.measure_cost(
            models_package.build_model(config),
            config.image_size,
            device=dev,
            dtype=train.resolve_dtype(dtype, dev),
            batch_size=batch_size,
            warmup=warmup,
            repeats=repeats,
        )
        rows.append({"name": name, "family": config.family, **cost.to_dict()})
    columns = ["name", "params", "flops", "throughput", "latency_ms", "batch_size", "image_size", "dtype", "device"]
    click.echo(render(rows, fmt, columns))


def _bench_config(name: str, image_size: int | None):
    """A preset name, or a YAML file holding a model config or a trial config (its ``model``)."""
    presets = models_package.PRESETS
    if name in presets:
        config = models_package.resolve_config(name)
    elif Path(name).suffix in (".yaml", ".yml") or Path(name).exists():
        raw = read_yaml(name)
        if isinstance(raw, dict) and "model" in raw:
            config = load_trial_config(raw).model
        else:
            try:
                config = models_package.resolve_config(raw)
            except ConfigError as error:
                raise ConfigError(f"{name}: {error.field}", error.message) from None
    else:
        raise ConfigError("", f"{name!r} is neither a preset ({', '.join(presets)}) nor a YAML file")
    return config.replace(image_size=image_size) if image_size else config
