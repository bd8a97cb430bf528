"""A finished trial's outcome as Optuna is told it: a frozen record, and the one mapping of
:class:`trials.status.TrialStatus` onto Optuna's ``TrialState``.

The searcher tells Optuna each trial's outcome once, remembers it so that a duplicate of the trial
is told the same, and on resume rebuilds it from what Optuna holds; the driver reconciles trials that
never ended. All of them go through :class:`TrialOutcome` and :data:`OPTUNA_STATE`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from harness.search.result_keys import STATUS_KEY
from trials.status import TrialStatus

# The one place a trial status becomes an Optuna state. A duplicate is told its original's outcome.
OPTUNA_STATE: Mapping[TrialStatus, TrialState] = {
    TrialStatus.RUNNING: TrialState.RUNNING,
    TrialStatus.COMPLETED: TrialState.COMPLETE,
    TrialStatus.PRUNED: TrialState.PRUNED,
    TrialStatus.FAILED: TrialState.FAIL,
    TrialStatus.DIVERGED: TrialState.FAIL,
    TrialStatus.INFEASIBLE: TrialState.PRUNED,  # never trained: no values, and not a failure of the space
    TrialStatus.INTERRUPTED: TrialState.FAIL,  # lost or cut off: its budget slot runs again
}
_FROM_OPTUNA = {TrialState.COMPLETE: TrialStatus.COMPLETED, TrialState.PRUNED: TrialStatus.PRUNED}


@dataclass(frozen=True)
class TrialOutcome:
    """What a finished trial tells Optuna: COMPLETED with its objective values, PRUNED or FAILED."""

    status: TrialStatus
    values: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if (self.status is TrialStatus.COMPLETED) != (self.values is not None):
            raise ValueError(f"a {self.status} outcome {'needs' if self.values is None else 'has no'} values")

    @property
    def state(self) -> TrialState:
        return OPTUNA_STATE[self.status]

    @property
    def retried_if_proposed_again(self) -> bool:
        """A failure may be retried when its configuration is proposed again; anything else is a duplicate."""
        return self.state is TrialState.FAIL

    @classmethod
    def of_result(cls, result: Mapping[str, Any] | None, error: bool, metrics: Sequence[str]) -> TrialOutcome:
        """The outcome of a trial Ray reports finished (``error``: it raised)."""
        status = (result or {}).get(STATUS_KEY)
        if error or status in (TrialStatus.FAILED, TrialStatus.DIVERGED):
            return cls(TrialStatus.FAILED)
        if status == TrialStatus.COMPLETED:
            return cls(TrialStatus.COMPLETED, tuple(float(result[m]) for m in metrics))
        return cls(TrialStatus.PRUNED)  # stopped by the scheduler before the end of its budget

    @classmethod
    def of_frozen(cls, frozen: optuna.trial.FrozenTrial) -> TrialOutcome:
        """The outcome an earlier driver told Optuna (a trial counted on resume)."""
        status = _FROM_OPTUNA.get(frozen.state, TrialStatus.FAILED)
        values = tuple(float(v) for v in frozen.values) if status is TrialStatus.COMPLETED else None
        return cls(status, values)

    @classmethod
    def coerce(cls, value: Any) -> TrialOutcome:
        """An outcome as an older archsearch pickled it: ``("values", (...))``, ``("failed",)``, ``("pruned",)``."""
        if isinstance(value, TrialOutcome):
            return value
        if value[0] == "values":
            return cls(TrialStatus.COMPLETED, tuple(value[1]))
        return cls(TrialStatus.PRUNED if value[0] == TrialStatus.PRUNED else TrialStatus.FAILED)

    def tell(self, study: optuna.Study, number: int) -> None:
        """Tell Optuna, once: a trial Optuna already holds as finished is left as it is."""
        if self.values is not None:
            study.tell(number, list(self.values), skip_if_finished=True)
        else:
            study.tell(number, state=self.state, skip_if_finished=True)
