"""The stop signals while Ray Tune's ``fit()`` runs: a callback, so it lives with the callbacks.

Ray Tune installs its own SIGINT handler when its controller starts; :class:`InterruptCallback` (set up
by that controller) hands every stop signal (:data:`harness.search.interrupts.STOP_SIGNALS`) to the
search's session instead, which asks Tune for its graceful stop (see :mod:`harness.search.session`).
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

from harness.search.session import SearchSession, SessionBound


class InterruptCallback(SessionBound, Callback):
    """Routes every stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) to Ray Tune's graceful stop while
    ``fit()`` runs (driver side)."""

    def __init__(self, session: SearchSession | None = None):
        self.session = session

    def setup(self, **info: Any) -> None:
        self._session().take_over_signals_from_ray()

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        """A stop asked for off the main thread (a watcher's) reaches Ray's graceful stop here, on
        the main thread where Tune's loop runs (:meth:`SearchSession.hand_stop_to_ray`)."""
        session = self.session
        if session is not None and session.stop_request is not None:
            session.hand_stop_to_ray()

    def __getstate__(self) -> dict[str, Any]:
        return {"session": None}
