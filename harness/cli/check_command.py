"""``archsearch check SPEC``: what a search of the spec would do, before it spends anything.

The validated space, its size, the share of it refused before training (with why and examples), the
priced cost range, the time here and the first proposals as their trials would run them; written nowhere,
Ray never started (:mod:`harness.search.dry_run`). A spec error is the search's own one-line error (exit 2).
"""

from __future__ import annotations

import json

import click

from harness.cli.common import UsageError, check_utf8_arguments, config_error, store_option
from harness.output import printable
from harness.search.cluster.ray_setup import SearchError, check_study_name
from search_space.validation import load_spec
from trials.configio import ConfigError
from trials.lazy import lazy_import

dry_run = lazy_import("harness.search.dry_run")  # Optuna, Ray's searcher class and torch: only once it runs
store_package = lazy_import("harness.store")  # SQLAlchemy


@click.command("check")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(dir_okay=False))
@store_option
@click.option("--name", "study_name", default=None, help="Study name (default: the spec's name).")
@click.option(
    "--address",
    default=None,
    help="The Ray cluster the search would join (not contacted): on-disk data paths are then left to its "
    "workers, as with search --address.",
)
@click.option(
    "--proposals",
    type=click.IntRange(0, 1000),
    default=None,
    help="How many first proposals to show (default: the spec's concurrency, the trials a search starts with).",
)
@click.option("--no-timing", is_flag=True, help="Do not time a training step here (no time estimate).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: everything as one JSON object on standard output.",
)
def check_command(
    spec_path: str,
    store_url: str | None,
    study_name: str | None,
    address: str | None,
    proposals: int | None,
    no_timing: bool,
    fmt: str,
) -> None:
    """Check a search spec without running it: nothing is written, Ray is not started.

    Prints the validated space (each parameter's domain, the fixed values, the constraints), its size, the
    share of its configs refused before training (does not build, breaks a constraint) with examples, the
    priced FLOPs and params of the feasible ones, the time the search would take here (one timed training
    step of the cheapest, median and dearest config), and the first proposals of the spec's sampler and
    seed as their trials would run them.
    """
    check_utf8_arguments()
    try:
        url = store_package.resolve_store_url(store_url)
        spec = load_spec(spec_path, check_paths=address is None)
        check_study_name(study_name if study_name is not None else spec.name, "--name" if study_name else "name")
        result = dry_run.check_search(spec, url, name=study_name, proposals=proposals, timed=not no_timing)
    except (ConfigError, SearchError) as error:
        raise config_error(error) from None
    except store_package.StoreError as error:
        raise UsageError(str(error)) from None
    if fmt == "json":
        click.echo(json.dumps(result.record(), indent=2, allow_nan=False))
        return
    for line in result.lines():
        click.echo(printable(line))
