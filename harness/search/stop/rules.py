"""``search.stop``: end a search before ``n_trials`` when its front stopped moving, or after a
wall-clock budget.

Optuna's ``Terminator`` is single-objective and Ray Tune's plateau stoppers watch one metric; a
NAS search watches its Pareto front. The rule here: after each completed trial, the hypervolume of
all completed trials is compared with that of the trials completed before the last ``window``,
against a reference point fixed at the start of that window
(:func:`dashboards.multiobjective.plateau_check`); a relative gain below ``min_gain`` ends the
study. ``max_hours`` counts this driver's wall time (a resumed search starts a new budget).

The stopper runs in the driver (Tune calls ``stop_all`` in its loop) and keeps its reason in the
search's :class:`harness.search.session.SearchSession` (``rule_reason``), which the driver records as the
study's message; trials still running when it fires are stopped with the search and recorded
``interrupted``. Tune runs the callbacks of a trial's end before its loop step asks the stoppers, so
the progress line brings the reading up to date itself (``session.refresh_plateau()``): the line
printed for the N-th completed trial shows the reading that counts it, and a plateau found there
ends the search at that step's look.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.tune.stopper import Stopper

from dashboards.multiobjective import PlateauCheck, plateau_check
from harness.search.interrupts import store_failures
from harness.search.session import SearchSession, SessionBound
from harness.store import Store
from trials.status import TrialStatus


def completed_points(store, study: str, objectives: dict[str, str]) -> np.ndarray:
    """The objectives of completed trials, in the order they finished."""
    frame = store.outcomes(study, list(objectives), strict=False)
    frame = frame[frame["status"] == TrialStatus.COMPLETED].sort_values(["ended_at", "number"], kind="stable")
    return frame[list(objectives)].to_numpy(dtype=float)


def plateau_reason(check: PlateauCheck | None, min_gain: float) -> str | None:
    """The study's message when ``check`` shows a plateau, else None."""
    if check is None or check.gain >= min_gain:
        return None
    reference = ", ".join(f"{v:.4g}" for v in check.reference)
    return (
        f"hypervolume plateau: the front gained {check.gain:.3%} (below {min_gain:.3%}) over the last "
        f"{check.window} completed trials (reference point ({reference}) fixed at the start of the window; "
        f"hypervolume {check.volume_before:.4g} -> {check.volume_after:.4g})"
    )


class StopRulesStopper(SessionBound, Stopper):
    """Tune stopper for ``search.stop`` (see the module docstring). Each check is one COUNT query;
    the hypervolume is computed only when another trial has completed."""

    def __init__(
        self,
        store_url: str,
        study: str,
        objectives: dict[str, str],
        rules: dict[str, Any],
        session: SearchSession | None = None,
    ):
        self.store_url = store_url
        self.study = study
        self.objectives = objectives
        self.rules = rules
        self._store = None
        self._completed = -1
        self._found: str | None = None  # a plateau found by a refresh, announced at the next stop_all
        if session is not None:
            self.bind(session)

    def bind(self, session: SearchSession) -> None:
        super().bind(session)
        session.watch_plateau(self)

    def __getstate__(self) -> dict[str, Any]:
        return self._unbound_state({**self.__dict__, "_store": None, "_completed": -1, "_found": None})

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def look(self) -> None:
        """Check the plateau now (``session.refresh_plateau``); the stop itself is announced by ``stop_all``."""
        if self._found is None:
            self._found = self._plateau()

    def stop_all(self) -> bool:
        session = self._session()
        if session.rule_reason is not None:
            return True
        reason = self._found or self._over_time() or self._plateau()
        if reason is None:
            return False
        session.rule_reason = reason
        self._say(f"[{self.study}] stopping: {reason}")
        return True

    def _over_time(self) -> str | None:
        hours = self.rules.get("max_hours")
        if hours and self._session().elapsed() > hours * 3600:
            return f"max_hours: {hours:g} h of wall time reached"
        return None

    def _plateau(self) -> str | None:
        plateau = self.rules.get("hypervolume_plateau")
        if not plateau:
            return None
        try:
            if self._store is None:
                self._store = Store.open(self.store_url)
            completed = self._store.counts(self.study, epochs=False)[TrialStatus.COMPLETED]
            if completed == self._completed:
                return None
            self._completed = completed
            points = completed_points(self._store, self.study, self.objectives)
        except store_failures() as error:
            self._session().stop_on_store_failure("checking the hypervolume plateau", error)
            return None
        check = plateau_check(points, list(self.objectives.values()), plateau["window"])
        if check is not None:
            self._session().rule_note = f"hv {check.gain:+.2%} over the last {check.window}"
        return plateau_reason(check, plateau["min_gain"])
