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
    "'layout in CCTT,CTTT' (repeatable, ANDed; numbers compare as numbers, text as text; over several "
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


def integer_columns(frame) -> set[str]:
    """The columns of ``frame`` that hold whole numbers although pandas made them floats (a missing
    value turns a column of ints into floats: ``seed`` 1.0, ``params`` 156606.0): every stored
    integer column (:data:`harness.store.schema.INTEGER_FIELDS`), the whole-number final metrics, and
    a config value (``config.*``, ``sampled.*``, ``fixed.*``) whose every present value is whole while
    another trial lacks it. A float column with no missing value stays as it is: pandas kept its type."""
    names = {*store_schema.INTEGER_FIELDS, *store_schema.INTEGER_METRICS}
    found = set()
    for column in frame.columns:
        series = frame[column]
        if series.dtype.kind != "f":
            continue
        present = series.dropna()
        if not bool((present % 1 == 0).all()):  # a fraction or an infinity: a float column
            continue
        name = str(column)
        if name in names or (name.startswith(("config.", "sampled.", "fixed.")) and len(present) < len(series)):
            found.add(name)
    return found


def records(frame) -> list[dict]:
    """DataFrame rows as plain dicts: NaN -> None, numpy scalars -> Python, times -> ISO strings, and
    whole numbers as ints where pandas made their column floats (:func:`integer_columns`), so CSV and
    JSON write ``seed`` 1, not 1.0."""
    integers = integer_columns(frame)
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
            if key in integers and isinstance(value, float):
                value = int(value)
            clean[key] = value
        records.append(clean)
    return records
