"""What became of a trial, and of a study, as types: the one vocabulary every layer uses.

A trial's status is stored in the store's ``status`` column, reported by a trial's result, counted by
the dashboards and told to Optuna. It used to be a bare string spelt in some forty places; here it is
an enum whose values are those strings (a ``StrEnum``: a member compares equal to its string, so the
store's column and JSON carry the plain word). How a status maps to Optuna's ``TrialState`` is decided
in one place, :mod:`harness.search.outcome`.
"""

from __future__ import annotations

from enum import StrEnum


class TrialStatus(StrEnum):
    """A trial's status in the store (and in a trial's result, for the ones a trial reports itself)."""

    RUNNING = "running"  # dispatched, not finished
    COMPLETED = "completed"  # trained to its end: on the front if it earns it
    PRUNED = "pruned"  # stopped early by the scheduler (ASHA, MO-ASHA): truncated values, off the front
    FAILED = "failed"  # raised, ran out of memory, or its worker died
    DIVERGED = "diverged"  # a non-finite loss: recorded as such, the search goes on
    INFEASIBLE = "infeasible"  # the constraints excluded it before dispatch: never trained
    DUPLICATE = "duplicate"  # the same configuration as an earlier trial: never trained again
    INTERRUPTED = "interrupted"  # cut off by a stop (a signal, a store outage, a stop rule, a lost driver)

    @property
    def trained(self) -> bool:
        """Whether a worker trained it (to the end or not)."""
        return self in (TrialStatus.COMPLETED, TrialStatus.PRUNED, TrialStatus.FAILED, TrialStatus.DIVERGED)

    @property
    def finished(self) -> bool:
        return self is not TrialStatus.RUNNING


class StudyStatus(StrEnum):
    """A study's status in the store."""

    RUNNING = "running"  # a live driver holds it
    INTERRUPTED = "interrupted"  # stopped before its end: resumable
    COMPLETED = "completed"  # ran to its end (or a stop rule the user set ended it)
    FAILED = "failed"  # no trial completed (the reason in its status message)


TRIAL_STATUSES = tuple(TrialStatus)
