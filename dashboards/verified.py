"""The front on verified values: a study's front members with the throughput and latency that
``archsearch verify`` re-measured beside the in-trial ones, and who stays on the front."""

from __future__ import annotations

import pandas as pd

from dashboards.pareto import front_mask
from trials.status import TrialStatus

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
