"""A reproduction's per-seed data, committed beside its summary, and its verdicts recomputed from it.

Beside ``<name>.md`` a reproduction writes ``<name>.runs.csv`` (one row per run: ``variant``,
``seed``, ``status``, ``value`` = the number the verdicts compare, ``left_out``, then the run's other
metrics) and ``<name>.verdicts.json`` (a list, one entry per claim: ``claim``, ``a``, ``b``,
``kind``, ``margin``, ``n``, ``diff_mean``, ``ci``, ``p_t``, ``p_exact``, ``p_holm``, ``verdict``).
:func:`recompute` decides the claims again from the runs file alone with the study's pre-registered
protocol, so a reader (or a test) can check every committed verdict without the store that made it.
The file is validated before any verdict (:func:`read_runs`, :func:`harness.reproduce.analysis.check_runs`):
a value that is not a finite number in the metric's range on a counted run, a value on a run that
is not counted, a seed counted twice or above 2**32 - 1, a variant the study does not have, an unknown
status, a missing column or a bad first line is
refused with a :class:`trials.errors.DataError` naming the file, the line, the column and the value.
Floats are written with 17 significant digits (a double's round trip): a recomputation gives the
same digits. Where runs kept their per-image test predictions, ``<name>.predictions.csv.gz`` lies
beside the runs file (:mod:`harness.reproduce.predictions`); :func:`recompute_test_pairs` gives the
summary's exploratory test-split table again from the two files, its seed x image bootstrap included.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dashboards.files import OutputSet
from harness.reproduce.analysis import (
    REQUIRED_COLUMNS,
    PairOnTestSplit,
    check_runs,
    pairs_on_test_split,
    summarize_runs,
)
from harness.reproduce.predictions import read_sidecar, sidecar_path, write_sidecar
from harness.reproduce.studies import Protocol
from trials.configio import MAX_INTEGER
from trials.errors import DataError
from trials.training.predictions import TestPredictions

RUNS_SUFFIX = ".runs.csv"
VERDICTS_SUFFIX = ".verdicts.json"
METRIC_KEY = "metric"  # the runs file's first line: "# metric: <words>", what ``value`` is


def verdict_record(verdict: dict[str, Any]) -> dict[str, Any]:
    """One claim's entry in the verdicts file (the summary's verdict dict, renamed for readers).

    ``p_t``: the paired t-test's one-sided p-value in the claim's direction (TOST's for ``~``);
    ``p_exact``: the sign-flip p-value of the same hypothesis; ``p_holm``: the two-sided p-value
    after Holm over the study's claims; ``ci``: the 95% interval of A - B (better-oriented).
    """
    decided = "difference" in verdict
    return {
        "claim": verdict["claim"],
        "a": verdict["a"],
        "b": verdict["b"],
        "kind": verdict["kind"],
        "margin": verdict.get("margin"),
        "n": verdict.get("n", 0),
        "diff_mean": _finite(verdict["difference"]) if decided else None,
        "ci": [_finite(verdict["low"]), _finite(verdict["high"])] if decided else None,
        "p_t": verdict.get("p_t"),
        "p_exact": verdict.get("p_claim_exact"),
        "p_holm": verdict.get("p_holm"),
        "verdict": verdict["verdict"],
    }


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


def write_records(
    output: Path,
    name: str,
    runs: pd.DataFrame,
    verdicts: list[dict[str, Any]],
    metric: str,
    predictions: Mapping[tuple[str, int], TestPredictions] | None = None,
) -> list[Path]:
    """Write the runs file and the verdicts file of summary ``name`` (all to temporary names, renamed together),
    and, where ``predictions`` ((study, number) -> a run's per-image test predictions) hold any of
    its runs', their sidecar ``<name>.predictions.csv.gz``."""
    buffer = io.StringIO()
    buffer.write(f"# {METRIC_KEY}: {metric}\n")
    runs.to_csv(buffer, index=False, float_format="%.17g", lineterminator="\n")
    runs_path, verdicts_path = output / f"{name}{RUNS_SUFFIX}", output / f"{name}{VERDICTS_SUFFIX}"
    with OutputSet() as outputs:  # the three land together: a verdicts file never beside another run's runs
        outputs.write(runs_path, buffer.getvalue())
        outputs.write(verdicts_path, json.dumps([verdict_record(v) for v in verdicts], indent=2) + "\n")
        sidecar = write_sidecar(sidecar_path(runs_path), runs, predictions or {}, outputs)
        outputs.commit()
    return [runs_path, verdicts_path, *([sidecar] if sidecar else [])]


def read_runs(
    path: Path, protocol: Protocol | str | None = None, *, variants: Collection[str] | None = None
) -> tuple[pd.DataFrame, str]:
    """(runs, metric in words) from a runs file, validated first (:func:`check_runs`): a file that is
    not a runs file, or a row no verdict may use, is refused with a :class:`DataError` naming the file,
    its line (the metric line is line 1, the header line 2), the column and the value. ``protocol``
    (or its kind as a word) sets the metric's range (without it: at least 0); ``variants`` (by default
    the protocol's, :attr:`Protocol.variants`), where known, are the only variant names allowed."""
    name = str(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            first = handle.readline()
            if not first:
                raise DataError(f"{name} line 1: the file is empty (a runs file starts '# {METRIC_KEY}: ...')")
            first = first.rstrip("\r\n")
            if not first.startswith(f"# {METRIC_KEY}: ") or not first[len(f"# {METRIC_KEY}: ") :].strip():
                raise DataError(f"{name} line 1: {first[:80]!r} is not '# {METRIC_KEY}: <what value is>'")
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            rows, lines = [], []
            for row in reader:
                if row:  # a blank line carries nothing
                    rows.append(row)
                    lines.append(1 + reader.line_num)
    except csv.Error as error:
        raise DataError(f"{name} line {1 + reader.line_num}: not CSV ({error})") from None
    except UnicodeDecodeError:
        raise DataError(f"{name}: not UTF-8 text") from None
    except OSError as error:
        raise DataError(f"{name}: cannot be read ({error.strerror or error})") from None
    if not header:
        raise DataError(f"{name} line 2: no header (the column names: {', '.join(REQUIRED_COLUMNS)}, ...)")
    header = [column.strip() for column in header]
    for column in header:
        if header.count(column) > 1:
            raise DataError(f"{name} line 2: column {column!r} appears twice in the header")
    for column in REQUIRED_COLUMNS:
        if column not in header:
            raise DataError(
                f"{name} line 2: the header has no column {column!r} (a runs file has {', '.join(REQUIRED_COLUMNS)})"
            )
    for row, line in zip(rows, lines, strict=True):
        if len(row) != len(header):
            raise DataError(f"{name} line {line}: {len(row)} fields where the header has {len(header)}")
    text = pd.DataFrame({column: [row[k] for row in rows] for k, column in enumerate(header)}, dtype=object)
    kind = protocol.kind if isinstance(protocol, Protocol) else protocol
    if variants is None and isinstance(protocol, Protocol) and protocol.variants:
        variants = protocol.variants  # the study's own: a variant it never ran decides nothing
    check_runs(text, kind, source=name, labels=[f"line {line}" for line in lines], variants=variants)
    runs = pd.DataFrame({column: _typed(column, text[column].tolist()) for column in header})
    return runs, first[len(f"# {METRIC_KEY}: ") :].strip()


TEXT_COLUMNS = ("variant", "status", "left_out", "study")


def _typed(column: str, cells: list[str]) -> pd.Series:
    """A checked column as a table holds it: text, whole numbers, or floats (NaN where empty). A
    float is parsed by Python (correctly rounded): the 17 digits written give back the same double."""
    cells = [cell.strip() for cell in cells]
    if column in TEXT_COLUMNS:
        return pd.Series(cells, dtype=object)
    if cells and all(re.fullmatch(r"[+-]?[0-9]{1,19}", cell) and abs(int(cell)) <= MAX_INTEGER for cell in cells):
        return pd.Series([int(cell) for cell in cells], dtype="int64")
    try:
        return pd.Series([float(cell) if cell else math.nan for cell in cells], dtype=float)
    except ValueError:  # a column of the reader's own, not a number: kept as text
        return pd.Series(cells, dtype=object)


def recompute(runs_path: Path, protocol: Protocol, *, variants: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The verdicts file's entries decided again from the runs file alone, under ``protocol``'s
    pre-registered claims and margins; the file is validated first (:func:`read_runs`), and a file
    that fails is refused (:class:`DataError`, exit 2 on the command line), never decided from."""
    runs, metric = read_runs(runs_path, protocol, variants=variants)
    _, verdicts, _ = summarize_runs(
        runs, protocol, metric=metric, margin=protocol.margin, large_margin=protocol.large_margin
    )
    return [verdict_record(v) for v in verdicts]


def recompute_test_pairs(
    runs_path: Path, protocol: Protocol, *, variants: Collection[str] | None = None
) -> list[PairOnTestSplit]:
    """The summary's exploratory pairs on the test split, again from the runs file (validated) and
    its predictions sidecar where there is one (each row checked against the runs file: a completed
    run's, once, scoring that run's ``test_top1``): the t-intervals over seeds and, where every run of
    a pair kept its per-image predictions, the seed x image bootstrap interval."""
    runs, _ = read_runs(runs_path, protocol, variants=variants)
    predictions = read_sidecar(sidecar_path(runs_path), runs)
    return pairs_on_test_split(runs, list(protocol.claims), predictions)
