"""The hopeless-search rule: stop a search whose first trials all failed the same way.

:func:`hopeless_reason` is the rule (the driver applies it once more at the end);
:class:`HopelessSearchStopper` applies it while the search runs, each time the session says a trial ended.
"""

from __future__ import annotations

from typing import Any

from ray.tune.stopper import Stopper

from harness.search.interrupts import store_failures
from harness.search.session import SearchSession, SessionBound
from harness.search.stop.failures import common_error, shared_searched_value
from harness.store import Store
from search_space.spec import SearchSpec
from trials.status import TrialStatus

HOPELESS_AFTER = 3  # this many failed trials, none completed, all with the same error: the search stops


def hopeless_after(spec: SearchSpec) -> int:
    """How many trials must fail the same way before a search is hopeless: 3, or ``n_trials`` if fewer."""
    return min(HOPELESS_AFTER, spec.search.n_trials)


def hopeless_reason(store, name: str, after: int, spec: dict | None = None) -> str | None:
    """The common error when no trial completed and at least ``after`` failed all the same way,
    over different sampled values (what :class:`harness.search.stop.hopeless.HopelessSearchStopper`
    stops a search on), else None."""
    counts = store.counts(name, epochs=False)
    if counts[TrialStatus.COMPLETED] or counts[TrialStatus.PRUNED] or counts[TrialStatus.FAILED] < after:
        return None
    common = common_error(store.trial_errors(name, (TrialStatus.FAILED,), limit=50))
    if common is None or spec is None:
        return common
    failed = store.trials(name, statuses=(TrialStatus.FAILED,), limit=50, flatten_config=False)
    return None if shared_searched_value(spec, list(failed.get("config", []))) else common


class HopelessSearchStopper(SessionBound, Stopper):
    """Stops the whole search when every trial so far failed, the last ``after`` of them (and all
    the others) for the same reason: a broken environment or config that no sampled value fixes
    would otherwise burn the whole budget. Trials that fail at once fail in bursts, so it is asked at
    every step of Tune's loop (about ten a second), and it queries the store (a COUNT, about a
    millisecond) only when the store writer counted a trial's end in the session since its last look
    (``session.trials_ended``), and once at the start (a resumed study may be hopeless already)."""

    def __init__(
        self,
        store_url: str,
        study: str,
        after: int = 3,
        spec: dict | None = None,
        session: SearchSession | None = None,
    ):
        self.store_url = store_url
        self.session = session
        self.study = study
        self.after = max(1, after)
        self.spec = spec
        self._store = None
        self._looked_at: int | None = None  # session.trials_ended at the last look
        self.reason: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return self._unbound_state({**self.__dict__, "_store": None, "_looked_at": None})

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        if self.reason is not None:
            return True
        session = self._session()
        if self._looked_at == session.trials_ended:
            return False
        self._looked_at = session.trials_ended
        try:
            if self._store is None:
                self._store = Store.open(self.store_url)
            reason = hopeless_reason(self._store, self.study, self.after, self.spec)
            failed = self._store.counts(self.study, epochs=False)[TrialStatus.FAILED] if reason else 0
        except store_failures() as error:
            session.stop_on_store_failure("counting the trials", error)
            return False
        if reason is None:
            return False
        self.reason = reason
        self._say(f"[{self.study}] stopping: the first {failed} trials all failed with: {reason}")
        return True
