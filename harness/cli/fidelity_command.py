"""``archsearch fidelity``: does a cheap signal predict the expensive one (reads the store, never writes it).

One study: does an early epoch rank its completed trials as the end does, and what would its early-stopping
rule have kept of the final front? Two studies (CHEAP EXPENSIVE, one space at two budgets, image or data
sizes): do the configurations both completed rank alike, and how much of the expensive front does the cheap
front recover? The maths is :mod:`dashboards.fidelity`'s; the early-stopping rule comes from
:mod:`harness.search.stop.replay`.
"""

from __future__ import annotations

import json

import click

from harness.cli.common import UsageError, open_store, store_option, warn_damaged, where_option
from harness.output import printable, render, strict_json_value
from trials.lazy import lazy_import

fidelity = lazy_import("dashboards.fidelity")  # scipy, pandas, moocore
pareto = lazy_import("dashboards.pareto")
replay = lazy_import("harness.search.stop.replay")  # Ray's scheduler module (the rule lives beside it)
store_package = lazy_import("harness.store")  # SQLAlchemy

STUDY_COLUMNS = ["epoch", "trials", "tau", "tau_95", "rho", "rho_95", "front_kept"]
CROSS_COLUMNS = ["scope", "expensive_front_held", "untrained_by_cheap", "cheap_front_trained", "hv_recovered"]


@click.command("fidelity")
@click.argument("studies", nargs=-1, required=True)
@where_option
@click.option(
    "--resamples",
    type=click.IntRange(min=0, max=100_000),
    default=2000,
    show_default=True,
    help="Bootstrap resamples for the 95%% intervals (0: none).",
)
@store_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: everything as one JSON object on standard output (as pareto --format json).",
)
def fidelity_command(
    studies: tuple[str, ...], where: tuple[str, ...], resamples: int, store_url: str | None, fmt: str
) -> None:
    """Does a cheap signal predict the expensive one?

    STUDY: per epoch with at least 5 completed trials, Kendall's tau and Spearman's rho between that epoch's
    accuracy and the final one (95% bootstrap intervals), and how many final-front members the study's
    early-stopping rule would have kept deciding there; then one verdict line.

    CHEAP EXPENSIVE: two studies of one space at two fidelities (epochs, image size, data size): tau on the
    configurations both completed, the expensive front members the cheap front holds, and the expensive
    hypervolume recovered by training the cheap front alone.
    """
    if len(studies) > 2:
        raise UsageError(f"fidelity takes one study or two (CHEAP EXPENSIVE), got {len(studies)}")
    try:
        filters = pareto.parse_where(where)
        with open_store(store_url, create=False, read_only=True) as store:
            for name in studies:
                store.study(name)  # an unknown study: its one-line error first
            if len(studies) == 1:
                result = fidelity.study_fidelity(
                    store, studies[0], replay.rung_rule, where=filters, resamples=resamples
                )
            else:
                result = fidelity.cross_fidelity(store, studies[0], studies[1], where=filters, resamples=resamples)
    except (fidelity.FidelityError, pareto.ParetoError, pareto.FilterError, store_package.StoreError) as error:
        raise UsageError(str(error)) from None
    warn_damaged(store)  # on stderr: --json stays parseable
    if fmt == "json":
        click.echo(json.dumps(strict_json_value(result.record()), indent=2, default=str, allow_nan=False))
        return
    if len(studies) == 1:
        click.echo(printable(f"study {result.study}: does epoch e rank like the end?"))
        _echo_lines(render(result.rows(), "table", STUDY_COLUMNS))
    else:
        click.echo(printable(result.differences_line()))
        _echo_lines(render(result.rows(), "table", CROSS_COLUMNS))
    for line in result.notes():
        click.echo(printable(f"note: {line}"))
    click.echo(printable(f"verdict: {result.verdict}"))


def _echo_lines(text: str) -> None:
    """A table, each line escaped (a stored value never reaches the terminal as a control sequence)."""
    for line in text.splitlines():
        click.echo(printable(line))
