"""One search's shared state, passed explicitly to every hook that needs it.

Ray Tune calls a search's hooks (the searcher, the callbacks, the stoppers) from its loop in an order
it does not promise, and a program may run several searches one after another in one process. So
what the hooks share lives in one :class:`SearchSession` that the driver creates per search and
hands to each hook (``bind``), never in module globals:

* the **stop request**: why the search is stopping (a signal, a store failure), first one wins, and
  Ray Tune's graceful-stop handler that a request triggers;
* the **stop rules' reading**: the rule that ended the search and the progress line's plateau note;
* the **trial ends** this driver recorded, which the hopeless-search stopper watches;
* the search's **clock** and when this driver's session started on it, the origin of
  ``search.stop.max_hours`` (a replay's clock is simulated);
* the study's **lease** this driver holds (:mod:`harness.store.liveness`): every store a hook opens
  writes under it (``hold``), so a driver whose study was taken over or deleted stops instead of
  writing into someone else's record;
* the user's **on_epoch** (``run_search(on_epoch=...)``): every epoch the driver hears of, handed over in
  the driver's process, its errors a warning (:class:`trials.epoch_progress.GuardedCallback`);
* the **store and study** this driver was given (``store_url``, ``study``): a hook bound to the
  session takes them over what it was pickled with (``rebind``), so a study resumed under a new name
  (``studies --rename``) or from a copied store writes where the command said, never into the store
  or study name saved in Ray's state.

Hooks are pickled into Ray's experiment state; the session is not (:class:`SessionBound` drops it).
Ray Tune unpickles hooks inside the driver at two moments it gives no seam for: ``Tuner.restore``
(the searcher and callbacks of ``tuner.pkl``) and inside ``fit()``, where a resumed controller replaces
the stoppers it was given by those of its last snapshot. So the driver runs both within
``session.active()``, and a hook unpickled there binds itself to that session (``__setstate__``). The
one context variable that makes this work is scoped to that block; outside it an unpickled hook is
unbound and says so when used.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from harness.search.interrupts import STOP_SIGNALS, SearchInterrupted, StopRequest
from harness.store.errors import LeaseLost  # the store's errors alone: no database driver imported
from trials.epoch_progress import EpochProgress, GuardedCallback, OnEpoch

# The session of the search whose Tuner is being restored or fitted in this context (see the module
# docstring); set only by SearchSession.active(), for the length of that block.
_ACTIVE: ContextVar[SearchSession | None] = ContextVar("archsearch_active_search_session", default=None)


class PlateauWatcher(Protocol):
    def look(self) -> None: ...


class SearchSession:
    """What the hooks of one search share (see the module docstring). Thread-safe where threads meet:
    a stop may be requested from a signal handler, a watcher thread or Tune's loop."""

    def __init__(
        self,
        study: str,
        *,
        on_stop: Callable[[StopRequest], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        store_url: str | None = None,
        on_epoch: OnEpoch | None = None,
    ):
        self.study = study
        self.on_epoch = GuardedCallback(on_epoch) if on_epoch is not None else None
        self.store_url = store_url  # the store this driver writes (no password): hooks rebind to it
        self.clock = clock  # the search's clock: the wall's, or a replay's simulated one
        self.started = clock()
        self._lock = threading.Lock()
        self._request: StopRequest | None = None
        self._on_stop = on_stop  # called once, with the first request (the driver's stop watchdog)
        self._graceful_stop: Any = None  # Ray Tune's SIGINT handler while fit() runs
        self._deferring = False  # while Ray starts: a signal is recorded, acted on once it has started
        self._handed_to_ray = False  # the stop request was given to Ray Tune's graceful stop
        self._signals_received = 0  # stop signals this process's handler ran for (a second one stops hard)
        self.rule_reason: str | None = None  # why a stop rule ended the search
        self.rule_note: str | None = None  # the plateau rule's last reading, for the progress line
        self._plateau_watcher: PlateauWatcher | None = None
        self.trials_ended = 0  # trial ends this driver recorded (the hopeless-search stopper's trigger)
        self.lease: str | None = None  # the study's lease this driver holds (set once it claimed the study)
        self.lease_lost = False  # a write found the lease gone: nothing more is written or told to Optuna

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a SearchSession belongs to one driver process and is never pickled")

    @contextlib.contextmanager
    def active(self) -> Iterator[SearchSession]:
        """The block in which Ray unpickles this search's hooks (``Tuner.restore``, ``fit()``): each
        binds itself to this session."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    # -- stopping -------------------------------------------------------------------------------

    @property
    def stop_request(self) -> StopRequest | None:
        return self._request

    @property
    def stop_signal(self) -> int | None:
        request = self._request
        return request.signum if request else None

    def request_stop(self, reason: str, signum: int | None = None) -> bool:
        """Ask the search to stop gracefully; the first request wins. Returns whether it was the first."""
        with self._lock:
            first = self._request is None
            if first:
                self._request = StopRequest(reason, signum)
            on_stop = self._on_stop
        if first and on_stop is not None:
            on_stop(self._request)
        if first:
            self.hand_stop_to_ray()
        return first

    def hand_stop_to_ray(self) -> None:
        """Hand a stop request to Ray Tune's graceful stop, once, from the main thread.

        Ray's handler sets its "interrupted" event and then restores the previous SIGINT handler with
        ``signal.signal``, which Python allows on the main thread only: called from a watcher thread
        (the heartbeat's lost lease, the Ray watch's signal seen in Ray's own processes) it raised
        ``ValueError`` in that thread. A request made off the main thread waits here, and
        :class:`harness.search.record.signals.InterruptCallback` hands it over at Tune's next step,
        which runs on the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        with self._lock:
            handler, request = self._graceful_stop, self._request
            due = request is not None and callable(handler) and not self._handed_to_ray
            if due:
                self._handed_to_ray = True
        if due:
            handler(signal.SIGINT, None)

    def hold(self, store):
        """``store`` (a :class:`harness.store.Store` a hook opened) writing to this search's study under
        this driver's lease; returned for chaining."""
        store.hold_lease(self.study, self.lease)
        return store

    def say(self, line: str) -> None:
        """Every line a hook of this search says to the person watching (why it stops, what it found),
        on standard error beside the progress line, which it does not interrupt."""
        print(line, file=sys.stderr, flush=True)

    def stop_on_lost_lease(self, error: BaseException) -> None:
        """The study is no longer this driver's (taken over, judged gone, deleted): stop the search in
        one line; nothing more is written to the study or told to Optuna."""
        self.lease_lost = True
        self.request_stop(f"stopped: {error}")

    def stop_on_store_failure(self, what: str, error: BaseException) -> None:
        """A store that fails mid-search stops the search gracefully (resumable), with one line saying why.

        Raising inside a Tune callback would print Ray's tracebacks and abort the run; instead the
        search stops as on Ctrl-C and ``archsearch search`` exits 1 with the cause and the resume command.
        A lost lease (:class:`harness.store.LeaseLost`) is said as such (:meth:`stop_on_lost_lease`).
        """
        if isinstance(error, LeaseLost):
            self.stop_on_lost_lease(error)
            return
        text = " ".join(str(getattr(error, "orig", None) or error).split())[:300]
        self.request_stop(f"stopped: the store failed while {what}: {type(error).__name__}: {text}")

    def on_signal(self, signum: int, frame: Any) -> None:
        """The handler of every stop signal (:data:`harness.search.interrupts.STOP_SIGNALS`) while this search runs."""
        name = signal.Signals(signum).name
        self._signals_received += 1
        first = self.request_stop(f"interrupted by {name}", signum)
        if not first and self._signals_received == 1 and self._request.signum is not None:
            # The first signal this process got, though a stop for a signal was already asked for: the
            # Ray watch saw Ray's own processes end by it (sent to them too) before this handler ran.
            # The same signal, not a second one: still the graceful stop.
            first = True
            self.hand_stop_to_ray()
        if first and self._deferring:
            return  # Ray is starting: acted on by deferring_signals() once it has
        if not first or self._graceful_stop is None:
            raise KeyboardInterrupt(name)  # a second signal, or no graceful path: stop now

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[None]:
        """Every stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) requests a graceful stop for the whole
        search (from the main thread); the previous handlers come back afterwards. Before Ray Tune's
        own handler is in place a signal raises KeyboardInterrupt, as Ctrl-C always did."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for s in previous:
            signal.signal(s, self.on_signal)
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    @contextlib.contextmanager
    def deferring_signals(self) -> Iterator[None]:
        """While Ray starts (its processes, the driver's core worker): a first SIGINT or SIGTERM is only
        recorded, and raised as :class:`SearchInterrupted` (exit 130 or 143) when the block ends, never
        in the middle of it.

        A KeyboardInterrupt raised inside ``ray.init`` left a half-connected core worker whose teardown
        at exit crashed the driver (``Segmentation fault``, exit 139, about 1 start in 4).
        """
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        request = self._request
        if request is not None and request.signum is not None:
            name = signal.Signals(request.signum).name
            raise SearchInterrupted(request, f"search interrupted by {name} while Ray started, before any trial ran")

    def take_over_signals_from_ray(self) -> None:
        """Inside ``fit()``, once Ray Tune installed its graceful SIGINT handler: route SIGINT and
        SIGTERM through this session to it (a signal that came before Ray was ready acts now)."""
        if threading.current_thread() is not threading.main_thread():
            return  # signals are delivered to the main thread only; Ray handles nothing here either
        ray_handler = signal.getsignal(signal.SIGINT)
        ours = getattr(ray_handler, "__self__", None) is self
        with self._lock:
            self._graceful_stop = ray_handler if callable(ray_handler) and not ours else None
            pending = self._request
        for stop in STOP_SIGNALS:
            signal.signal(stop, self.on_signal)
        if pending is not None:
            self.hand_stop_to_ray()

    # -- stop rules and trial ends ---------------------------------------------------------------

    def elapsed(self) -> float:
        """Seconds since this driver's session started, on the search's clock (``max_hours``)."""
        return self.clock() - self.started

    def watch_plateau(self, watcher: PlateauWatcher) -> None:
        self._plateau_watcher = watcher

    def refresh_plateau(self) -> None:
        """Bring the plateau reading up to date with the trials the store holds now. The progress
        line calls it after a trial's end is recorded; without it the line would show the reading
        of the previous trial end (Tune asks the stoppers after the callbacks of a step)."""
        if self._plateau_watcher is not None and self._request is None:
            self._plateau_watcher.look()

    def epoch_ended(self, record: EpochProgress) -> None:
        """A trial's epoch ended (the progress callback heard it from Tune): to the user's ``on_epoch``, if any."""
        if self.on_epoch is not None:
            self.on_epoch(record)

    def trial_ended(self) -> None:
        with self._lock:
            self.trials_ended += 1


class SessionBound:
    """A hook that uses the search's session: bound by the driver, never pickled with it.

    The driver passes the session when it builds the hook; a hook Ray unpickles within
    ``session.active()`` binds itself to it (``__setstate__``).
    """

    session: SearchSession | None = None

    def bind(self, session: SearchSession) -> None:
        self.session = session
        if session.store_url is not None:
            self.rebind(session.store_url, session.study)

    def rebind(self, store_url: str, study: str) -> None:
        """The store and study this search's driver was given win over those a hook was pickled with
        (a study renamed since, or a store copied with its results dir). A hook that holds them as
        ``store_url`` and ``study`` needs nothing more; one that holds more (the searcher's Optuna
        study) overrides this."""
        if hasattr(self, "store_url") and (self.store_url, getattr(self, "study", study)) != (store_url, study):
            self.store_url = store_url
            if isinstance(getattr(self, "study", None), str):
                self.study = study
            if hasattr(self, "_store"):
                self._store = None  # opened again, on the right store

    def _unbound_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "session": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        session = _ACTIVE.get()
        if session is not None:
            self.bind(session)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """A copy in this process (Ray Tune deep-copies an experiment's stoppers and callbacks before
        it runs them) keeps the session: the copy is the hook that runs in this search. Everything
        else is copied as pickling would (``__getstate__``)."""
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        state = self.__getstate__() if hasattr(self, "__getstate__") else dict(self.__dict__)
        clone.__dict__.update(copy.deepcopy({k: v for k, v in state.items() if k != "session"}, memo))
        clone.session = self.session
        return clone

    def _say(self, line: str) -> None:
        """A line for the person watching, through the session (:meth:`SearchSession.say`): hooks
        never print themselves. Unbound (a replay, a test), it goes to standard error as it is."""
        if self.session is not None:
            self.session.say(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def _session(self) -> SearchSession:
        if self.session is None:
            raise RuntimeError(f"{type(self).__name__} used before the driver bound it to a search session")
        return self.session


# Loggers a search quiets (harness.search.cluster.ray_setup.quiet_ray); put back as they were after it.
QUIETED_LOGGERS = ("ray", "ray.tune", "ray.train", "ray._private.authentication.authentication_token_setup", "optuna")


@contextlib.contextmanager
def process_state_restored() -> Iterator[None]:
    """What a search sets on its process is its own: the environment (the store's ``PGPASSWORD``, a
    tracker's MLflow credentials, Ray's output and auth settings), the umask its files are created
    under (0077: checkpoints and searcher state are the user's alone), Optuna's verbosity and the
    level of the loggers it quiets all come back as they were when the search ends, however it ends.
    A second ``run_search`` in one process inherited the first one's secrets and settings."""
    environment = dict(os.environ)
    levels = {name: logging.getLogger(name).level for name in QUIETED_LOGGERS}
    umask = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(umask)
        for key in set(os.environ) - set(environment):
            os.environ.pop(key, None)
        for key, value in environment.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        for name, level in levels.items():  # Optuna's verbosity is its logger's level
            logging.getLogger(name).setLevel(level)
