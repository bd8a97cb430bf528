"""Stopping a search on purpose: Ctrl-C, SIGTERM from a scheduler, a terminal that went away (SIGHUP,
SIGQUIT), or a store that stopped answering.

Every such stop goes the same way, Ray Tune's graceful one: no new trial is dispatched, the
running trials stop, the experiment state (trials, their last checkpoints, the searcher) is saved,
and ``tuner.fit()`` returns. Nothing is told to Optuna and nothing is marked failed, so
``archsearch search --resume STUDY`` continues exactly where the search stopped and finishes
exactly ``n_trials``. The request itself is kept by the search's
:class:`harness.search.session.SearchSession`. After ``fit`` returns, the driver sees the recorded
:class:`StopRequest`, marks the running trials and the study ``interrupted`` and raises
:class:`SearchInterrupted`; the CLI prints one line (how to resume) and exits 130 (SIGINT), 143
(SIGTERM), 129 (SIGHUP), 131 (SIGQUIT) or 1 (a store failure).

Ray Tune installs its graceful-stop handler for SIGINT inside ``fit()``, just before it builds its
controller; :class:`harness.search.record.signals.InterruptCallback` (set up by that controller)
wraps it, so the first signal is recorded here and then handled by Ray, and SIGTERM takes the same
path. A second signal stops hard.
"""

from __future__ import annotations

from dataclasses import dataclass

from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from harness.stop_signals import EXIT_CODES, STOP_SIGNALS
from harness.store import StoreError
from trials.errors import ArchsearchError

__all__ = ["EXIT_CODES", "STOP_SIGNALS", "SearchInterrupted", "StopRequest", "store_failures"]


@dataclass(frozen=True)
class StopRequest:
    """Why the search was asked to stop: a signal (``signum``) or a failure (``reason``)."""

    reason: str
    signum: int | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signum, 128 + self.signum) if self.signum else 1


class SearchInterrupted(ArchsearchError, RuntimeError):
    """The search stopped before its end and can be resumed; ``str()`` is the one line to print."""

    kind = "interrupted"

    def __init__(self, request: StopRequest, message: str):
        self.request = request
        super().__init__(message)

    @property
    def exit_code(self) -> int:
        return self.request.exit_code


def store_failures() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the store (or Optuna's storage in the same database) stopped answering.

    Optuna's RDB storage wraps a failed commit (a full disk, a server gone) in its own
    ``StorageInternalError``, not a SQLAlchemy error: without it here a full disk during a
    suggestion escaped as Ray's tracebacks instead of the one-line, resumable stop.
    """
    return (SQLAlchemyError, StorageInternalError, StoreError, OSError)
