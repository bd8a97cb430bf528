"""The read-only seam between the store and everything that reads studies.

``dashboards`` sits below ``harness``, so it cannot name ``harness.store.Store``; it names this
protocol instead, and the store satisfies it structurally (no inheritance: the store needs nothing
from here). What the protocol promises, modelled on Optuna's ``BaseStorage`` contract:

- **Reads never write.** None of these methods changes the store. A study whose search driver died
  stays ``running`` in the store until someone calls the store's explicit ``mark_interrupted()``
  (the CLI's read commands do, on a writable store); a reader only *shows* such a study as
  ``interrupted`` in :meth:`StudyReader.studies`.
- **Typed counts.** :class:`StudyCounts` keeps the trials by status apart from the number of epoch
  rows: no pseudo-status to filter out by hand.
- Frames are pandas DataFrames (imported only for the annotations: this module stays light).

Any other backend (a read-only replica, an in-memory fake in a test) can stand in for the store by
implementing these methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: pandas stays unloaded until a frame is asked for
    import pandas as pd


@dataclass(frozen=True)
class StudyCounts:
    """How much a study holds: trials by status (every status, zeros included), epoch rows, trials in all.

    Frozen: a count is a snapshot of a read, never something a caller updates.
    """

    by_status: dict[str, int] = field(default_factory=dict)
    epochs: int = 0
    total: int = 0

    @classmethod
    def of(cls, by_status: Mapping[str, int], epochs: int) -> StudyCounts:
        """Counts with ``total`` derived from ``by_status`` (so the two can never disagree)."""
        statuses = {str(k): int(v) for k, v in by_status.items()}
        return cls(by_status=statuses, epochs=int(epochs), total=sum(statuses.values()))


@runtime_checkable
class StudyReader(Protocol):
    """What ``dashboards`` reads from a store; ``harness.store.Store`` implements it. No method writes."""

    def study_names(self) -> list[str]:
        """Every study's name."""
        ...

    def studies(self) -> pd.DataFrame:
        """One row per study: name, status (a dead driver's study shown ``interrupted``), counts by status."""
        ...

    def study(self, name: str) -> dict[str, Any]:
        """The study's record: spec, objectives, status, times, version, hardware."""
        ...

    def objectives(self, name: str) -> dict[str, str]:
        """``{metric: "max" | "min"}`` in the spec's order."""
        ...

    def study_counts(self, study: str) -> StudyCounts:
        """Trials by status, epoch rows, trials in all."""
        ...

    def counts(self, study: str) -> dict[str, int]:
        """Trials by status only (one cheap query, fit to poll)."""
        ...

    def trials(
        self,
        study: str,
        *,
        flatten_config: bool = True,
        sort: str | None = None,
        descending: bool = False,
        limit: int | None = None,
        statuses: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """One row per trial: number, status, costs, final metrics, config."""
        ...

    def trial_records(
        self, study: str, numbers: Iterable[int] | None = None, *, statuses: Sequence[str] | None = None
    ) -> dict[int, dict[str, Any]]:
        """Whole records by number: status, config, parameters, final, measurement, epochs."""
        ...

    def metric_names(self, study: str) -> list[str]:
        """Every metric a query can name for the study."""
        ...

    def outcomes(
        self, study: str, metrics: Sequence[str] | None = None, *, config_keys: Sequence[str] = (), strict: bool = True
    ) -> pd.DataFrame:
        """Lean per-trial frame for fronts: number, status, ended_at, costs, the metrics asked for."""
        ...

    def config_columns(self, study: str, sample: int = 500) -> list[str]:
        """Flattened config column names seen in a sample of the study's trials."""
        ...

    def configs(self, study: str, numbers: Iterable[int]) -> pd.DataFrame:
        """``number`` and ``config.*`` columns of the trials ``numbers``."""
        ...

    def verified(self, study: str) -> pd.DataFrame:
        """The latest ``archsearch verify`` measurement of each verified trial (empty when none)."""
        ...

    def learning_curves(self, study: str, numbers: Iterable[int] | None = None) -> pd.DataFrame:
        """Per-epoch metrics, one row per epoch."""
        ...

    def data_starved_epochs(self, study: str, threshold: float) -> pd.DataFrame:
        """Epochs whose data wait exceeded ``threshold``."""
        ...
