"""The ``archsearch`` command line.

Heavy imports (torch, ray, optuna) happen inside the commands, so ``archsearch --help`` is instant.
Bad input exits with code 2 and a one-line message naming the offending value.
"""

from __future__ import annotations

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
