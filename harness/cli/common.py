"""What every ``archsearch`` command shares: one-line usage errors, the --store option, store opening,
and DataFrame rows as plain records."""

from __future__ import annotations

import math
import os
import re
import sys
import tempfile
import traceback

import click

from dashboards.files import standard_output_is
from harness.output import printable
from trials.errors import cut_at_word
from trials.lazy import lazy_import
from trials.status import TrialStatus

store_package = lazy_import("harness.store")  # SQLAlchemy: only for the commands that open a store
store_schema = lazy_import("harness.store.schema")  # which stored columns hold whole numbers
store_rows = lazy_import("harness.store.rows")  # which final metrics are accuracies and losses
pandas = lazy_import("pandas")  # only where a command writes a frame's rows


class UsageError(click.ClickException):
    """A one-line error about the user's input; exit code 2 (like click's own usage errors).

    One line, whatever it quotes: the message is cut to its first line and MAX_ERROR_LINE characters
    (a 100,000-character name or path must not come back whole) and its control characters escaped
    (a study name or a path holding a terminal escape must not reach the terminal): here, once, for
    every message a command raises, not at each place a value is quoted."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(printable(one_line(str(message))))


MAX_ERROR_LINE = 600  # characters: an error is one readable line, whatever value it quotes


def one_line(text: str) -> str:
    """The first line of ``text``, cut at a word to MAX_ERROR_LINE characters (:func:`trials.errors.cut_at_word`)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return cut_at_word(line, MAX_ERROR_LINE)


def config_error(error: Exception) -> UsageError:
    """A configuration error as the one-line usage error the CLI prints."""
    return UsageError(one_line(str(error)) or type(error).__name__)


# --where in every read command that lists trials (trials, pareto, fidelity): one syntax, one help
where_option = click.option(
    "--where",
    "where",
    multiple=True,
    metavar="FILTER",
    help="Filter by a config value or a metric: KEY=VALUE, KEY!=VALUE, KEY<VALUE, KEY<=VALUE, KEY>VALUE, "
    "KEY>=VALUE or 'KEY in V1,V2', e.g. layout=CCTT, depths[3]=2, 'lr>0.002', 'params<1e6', "
    "'layout in CCTT,CTTT' (repeatable, ANDed; numbers compare as numbers, text as text, None matches a "
    "missing value (the table's -), true/false a flag; a key is a column as the table names it (epochs, "
    "batch_size), else a config key by the end of its path (layout, training.epochs); over several "
    "studies a key names one column in all, and a study without it matches nothing).",
)

store_option = click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="Store URL (sqlite:///PATH or postgresql://USER@HOST/DB); default $ARCHSEARCH_STORE, "
    "else sqlite:///archsearch.db.",
)


_URL_SECRET = re.compile(r"(://[^/\s:@]*:)[^@\s]*@")  # user:PASSWORD@ in any URL of a traceback


def crash_log(error: BaseException) -> str:
    """Write the traceback of an unexpected error to a private file (0600, passwords in URLs masked)
    and return its path: a bug is reported in one line with where to look, never as a wall of text."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    text = _URL_SECRET.sub(r"\1***@", text)
    fd, path = tempfile.mkstemp(prefix="archsearch-crash-", suffix=".log")
    with os.fdopen(fd, "w") as handle:  # mkstemp: 0600, this user's
        handle.write(text)
    return path


def check_utf8_arguments(arguments: list[str] | None = None) -> None:
    """Ray takes the driver's command line as UTF-8 text: a file or store name that is not UTF-8
    (Python keeps its bytes as surrogates) failed deep in Ray's worker start with a traceback.
    Refused here in one line, naming the argument."""
    for argument in sys.argv[1:] if arguments is None else arguments:
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            shown = argument.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise UsageError(f"'{shown}' is not valid UTF-8 (Ray cannot take it): rename it or pass another") from None


def refuse_store_as_standard_output(url: str | None) -> None:
    """A one-line usage error where this process's standard output (file descriptor 1) is one of the
    store's files (``archsearch trials S >> store.db``), compared by (device, inode)."""
    try:
        store_file = standard_output_is(store_package.sqlite_files(store_package.resolve_store_url(url)))
    except store_package.StoreError:  # a bad URL: opening the store says so
        return
    if store_file is not None:
        raise UsageError(printable(f"standard output is the store's file {store_file}; send it elsewhere"))


def open_store(url: str | None, *, create: bool, read_only: bool = False):
    """The store at ``url`` (or the default), or a one-line usage error naming what is wrong with it;
    refused, before it is opened, where standard output is one of its files (``>> store.db``): what the
    command prints would be written into the store."""
    refuse_store_as_standard_output(url)
    try:
        return store_package.Store.open(url, create=create, read_only=read_only)
    except store_package.StoreError as error:
        raise UsageError(str(error)) from None


DAMAGED_SHOWN = 20  # damaged rows a command names, one line each, before it counts the rest


def warn_damaged(store, study: str | None = None) -> int:
    """One warning line on stderr for each row the command's reads found damaged (a JSON column or
    a number of the store that does not parse: ``harness.store.rows``), escaped, at most
    :data:`DAMAGED_SHOWN` of them, then how many more; returns how many trials they left out. A trial
    named here was left out of what the command shows; a study, read without the damaged column."""
    damaged = store.damaged_rows(study)
    for problem in damaged[:DAMAGED_SHOWN]:
        left_out = "; left out" if problem.trial is not None else ""
        click.echo(printable(one_line(f"warning: {problem}{left_out}")), err=True)
    if len(damaged) > DAMAGED_SHOWN:
        click.echo(f"warning: and {len(damaged) - DAMAGED_SHOWN} more damaged rows", err=True)
    return sum(problem.trial is not None for problem in damaged)


def show_cut_off_trials(store, frame, studies: list[str]):
    """``frame`` (trials with a ``status`` column, and ``study`` where several studies are read) with
    the trials a gone driver left ``running`` shown ``interrupted``, as ``studies`` shows their study;
    one note on stderr per such study. A read writes nothing: the next sitting or resume records it."""
    gone = {name: why for name, why in store.gone_drivers().items() if name in studies}
    if not gone or frame.empty:
        return frame
    frame = frame.copy()
    of_gone = frame["study"].isin(list(gone)) if "study" in frame.columns else True
    cut = (frame["status"] == TrialStatus.RUNNING) & of_gone
    frame.loc[cut, "status"] = TrialStatus.INTERRUPTED.value
    for name, why in gone.items():
        n = int((cut & (frame["study"] == name)).sum()) if "study" in frame.columns else int(cut.sum())
        if n:
            click.echo(printable(one_line(f"note: study {name}: {why}; the {n} trials it left running are "
                                          "shown interrupted")), err=True)  # fmt: skip
    return frame


def _whole_valued(series) -> bool:
    """A float column that holds at least one number and only whole ones (no fraction, no infinity)."""
    present = series.dropna()
    return len(present) > 0 and bool((present % 1 == 0).all())


def _quality_metric(name: str) -> bool:
    """An accuracy or a loss (``top1``, ``best_top1``, ``test_top1``, ``eval_loss``, ``test_loss``): a
    measurement that may be whole by chance (top-1 50.0 on two images), named as the final metrics
    the store checks as numbers (:data:`harness.store.rows.FINAL_NUMBERS`) are."""
    kinds = {n.rsplit("_", 1)[-1] for n in store_rows.FINAL_NUMBERS if n not in store_schema.INTEGER_METRICS}
    return name.rsplit("_", 1)[-1] in kinds


def integer_columns(frame) -> set[str]:
    """The columns of ``frame`` that hold whole numbers although they are floats, each known by where
    its values come from rather than by a list of names kept here:

    - a stored integer column (:data:`harness.store.schema.INTEGER_FIELDS`, from the tables' column
      types) or a final metric the trial records as an int (``epochs``, ``steps``), which a missing
      value turned into floats (pandas: ``seed`` 1.0, ``params`` 156606.0);
    - a config value (``config.*``, ``sampled.*``, ``fixed.*``) whose every present value is whole
      while another trial lacks it (a float column with no missing value stays as pandas typed it);
    - a fact of how the trial ran, in its final record: :func:`trials.runner.trial_facts` records every
      int and bool fact (``threads``, ``world_size``, ``data_workers``, ``measure_warmup``,
      ``compiled_graphs``, the flags ``cudnn_benchmark``, ``compiled``...) as a float, so a column
      that is neither stored nor config and holds only whole numbers is one of them, written as the
      int it was (a flag 0 or 1, as the record holds it and as ``KEY=false`` matches it). An accuracy
      or a loss (:func:`_quality_metric`) stays a float, whole or not.
    """
    stored = {*store_schema.INTEGER_FIELDS, *store_schema.INTEGER_METRICS}
    schema_columns = {c.name for table in store_schema.Base.metadata.sorted_tables for c in table.columns}
    found = set()
    for column in frame.columns:
        series = frame[column]
        if series.dtype.kind != "f" or not _whole_valued(series):
            continue
        name = str(column)
        if name in stored:
            found.add(name)
        elif name.startswith(("config.", "sampled.", "fixed.")):
            if series.isna().any():
                found.add(name)
        elif name not in schema_columns and not _quality_metric(name):
            found.add(name)
    return found


def _missing(value) -> bool:
    """A missing scalar: None, NaN, or pandas' missing time (``NaT``, which has an ``isoformat``)."""
    return value is None or value is pandas.NaT or (isinstance(value, float) and math.isnan(value))


def records(frame) -> list[dict]:
    """DataFrame rows as plain dicts: a missing value (NaN, a missing time ``NaT``) -> None, numpy
    scalars -> Python, times -> ISO strings, and whole numbers as ints where their column is floats
    (:func:`integer_columns`), so CSV writes ``seed`` 1, not 1.0, and a missing time empty, not ``NaT``."""
    integers = integer_columns(frame)
    records = []
    for record in frame.to_dict(orient="records"):
        clean = {}
        for key, value in record.items():
            if _missing(value):
                clean[key] = None
                continue
            if hasattr(value, "item") and not isinstance(value, (list, dict)):
                value = value.item()
            if hasattr(value, "isoformat"):
                value = value.isoformat()
            if key in integers and isinstance(value, float):
                value = int(value)
            clean[key] = value
        records.append(clean)
    return records
