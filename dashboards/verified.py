"""The front on verified values: a study's front members with the throughput and latency that
``archsearch verify`` re-measured beside the in-trial ones, and who stays on the front; and which in-trial
throughputs were measured beside other work (the cells a table marks ``*``, and the footnote that says why)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from dashboards.pareto import front_mask
from dashboards.reader import StudyReader
from trials.measurement.machine_load import load_note
from trials.status import TrialStatus

MAX_LOAD_NOTES = 5  # a footnote names this many marked trials, then counts the rest

TIMED_OBJECTIVES = ("throughput", "latency_ms")


def compare_fronts(front: pd.DataFrame, verified: pd.DataFrame, objectives: dict[str, str]) -> pd.DataFrame:
    """The front's members with their in-trial and verified values, and whether each stays on the
    front when its timed objectives (throughput, latency) take the verified medians."""
    table = front[["number", *objectives]].copy().reset_index(drop=True)
    for name in TIMED_OBJECTIVES:
        if name in verified:
            table[f"{name}_verified"] = table["number"].map(verified[name])
            table[f"{name}_verified_min"] = table["number"].map(verified[f"{name}_min"])
            table[f"{name}_verified_max"] = table["number"].map(verified[f"{name}_max"])
    again = table[["number", *objectives]].copy().assign(status=TrialStatus.COMPLETED)
    for name in TIMED_OBJECTIVES:
        if name in objectives and f"{name}_verified" in table:
            again[name] = table[f"{name}_verified"]
    table["on_front"] = True
    table["on_verified_front"] = front_mask(again, objectives)
    return table


def load_marks(store: StudyReader, study: str, numbers: Iterable[int]) -> dict[int, str]:
    """The trials among ``numbers`` whose stored throughput was measured beside other work, with why
    (:func:`trials.measurement.machine_load.load_note`); read from their stored measurements."""
    wanted = [int(n) for n in numbers]
    if not wanted:
        return {}
    records = store.trial_records(study, wanted)
    return {n: note for n, record in records.items() if (note := load_note(record.get("measurement") or {}))}


def load_footnote(marked: Mapping[str, str]) -> str | None:
    """``* measured beside other work ...: trial 3: why; ...`` for the cells a table marked (``marked``: a
    trial's label -> why), at most :data:`MAX_LOAD_NOTES` named; None when none was marked."""
    if not marked:
        return None
    named = "; ".join(f"{label}: {why}" for label, why in list(marked.items())[:MAX_LOAD_NOTES])
    more = len(marked) - MAX_LOAD_NOTES
    return (
        "* throughput measured beside other work, a lower bound (archsearch verify re-measures the front alone): "
        + named
        + (f"; and {more} more" if more > 0 else "")
    )
