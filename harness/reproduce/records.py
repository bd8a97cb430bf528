"""A reproduction's per-seed data, committed beside its summary, and its verdicts recomputed from it.

Beside ``<name>.md`` a reproduction writes ``<name>.runs.csv`` (one row per run: ``variant``,
``seed``, ``status``, ``value`` = the number the verdicts compare, ``left_out``, then the run's other
metrics) and ``<name>.verdicts.json`` (a list, one entry per claim: ``claim``, ``a``, ``b``,
``kind``, ``margin``, ``n``, ``diff_mean``, ``ci``, ``p_t``, ``p_exact``, ``p_holm``, ``verdict``).
:func:`recompute` decides the claims again from the runs file alone with the study's pre-registered
protocol, so a reader (or a test) can check every committed verdict without the store that made it.
Floats are written with 17 significant digits (a double's round trip): a recomputation gives the
same digits.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from dashboards.files import atomic_write
from harness.reproduce.analysis import summarize_runs
from harness.reproduce.studies import Protocol

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
    output: Path, name: str, runs: pd.DataFrame, verdicts: list[dict[str, Any]], metric: str
) -> list[Path]:
    """Write the runs file and the verdicts file of summary ``name`` (each to a temporary name, renamed)."""
    buffer = io.StringIO()
    buffer.write(f"# {METRIC_KEY}: {metric}\n")
    runs.to_csv(buffer, index=False, float_format="%.17g", lineterminator="\n")
    runs_path, verdicts_path = output / f"{name}{RUNS_SUFFIX}", output / f"{name}{VERDICTS_SUFFIX}"
    atomic_write(runs_path, buffer.getvalue())
    atomic_write(verdicts_path, json.dumps([verdict_record(v) for v in verdicts], indent=2) + "\n")
    return [runs_path, verdicts_path]


def read_runs(path: Path) -> tuple[pd.DataFrame, str]:
    """(runs, metric in words) from a runs file."""
    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
        if not first.startswith(f"# {METRIC_KEY}: "):
            raise ValueError(f"{path}: the first line must be '# {METRIC_KEY}: ...'")
        runs = pd.read_csv(handle, dtype={"left_out": str, "variant": str, "status": str})
    runs["left_out"] = runs["left_out"].fillna("")
    return runs, first[len(f"# {METRIC_KEY}: ") :].strip()


def recompute(runs_path: Path, protocol: Protocol) -> list[dict[str, Any]]:
    """The verdicts file's entries decided again from the runs file alone, under ``protocol``'s
    pre-registered claims and margins."""
    runs, metric = read_runs(runs_path)
    _, verdicts, _ = summarize_runs(
        runs, protocol, metric=metric, margin=protocol.margin, large_margin=protocol.large_margin
    )
    return [verdict_record(v) for v in verdicts]
