"""Stopping a search on purpose: Ctrl-C, SIGTERM from a scheduler, or a store that stopped answering.

Every such stop goes the same way, Ray Tune's graceful one: no new trial is dispatched, the
running trials stop, the experiment state (trials, their last checkpoints, the searcher) is saved,
and ``tuner.fit()`` returns. Nothing is told to Optuna and nothing is marked failed, so
``archsearch search --resume STUDY`` continues exactly where the search stopped and finishes
exactly ``n_trials``. After ``fit`` returns, :func:`harness.search.run_search` sees the recorded
:class:`StopRequest`, marks the running trials and the study ``interrupted`` and raises
:class:`SearchInterrupted`; the CLI prints one line (how to resume) and exits 130 (SIGINT), 143
(SIGTERM) or 1 (a store failure).

Ray Tune installs its graceful-stop handler for SIGINT inside ``fit()``, just before it builds its
controller; :class:`InterruptCallback` (set up by that controller) wraps it, so the first signal is
recorded here and then handled by Ray, and SIGTERM takes the same path. A second signal stops hard.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from typing import Any

from optuna.exceptions import StorageInternalError
from ray.tune import Callback
from sqlalchemy.exc import SQLAlchemyError

from harness.store import StoreError
from trials.errors import ArchsearchError

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


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


class _State:
    """This driver process's stop request and Ray's graceful-stop handler (one search at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.request: StopRequest | None = None
        self.graceful_stop: Any = None  # Ray Tune's SIGINT handler while a fit() runs
        self.deferring = False  # while Ray starts: a signal is recorded, acted on once it has started
        self.on_stop: Any = None  # called once, with the request, when the first stop is requested


_state = _State()


def reset(on_stop=None) -> None:
    """Forget any earlier request (a new search starts); ``on_stop(request)`` runs on the first one."""
    with _state.lock:
        _state.request = None
        _state.graceful_stop = None
        _state.on_stop = on_stop


def current() -> StopRequest | None:
    return _state.request


def current_signal() -> int | None:
    request = _state.request
    return request.signum if request else None


@contextlib.contextmanager
def handling_signals():
    """SIGINT and SIGTERM request a graceful stop for the whole search (from the main thread);
    the previous handlers come back afterwards. Before Ray Tune's own handler is in place a signal
    raises KeyboardInterrupt, as Ctrl-C always did."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def request_stop(reason: str, signum: int | None = None) -> bool:
    """Ask the running search to stop gracefully; the first request wins. Returns whether it was the first."""
    with _state.lock:
        first = _state.request is None
        if first:
            _state.request = StopRequest(reason, signum)
        handler, on_stop = _state.graceful_stop, _state.on_stop
    if first and on_stop is not None:
        on_stop(_state.request)
    if first and callable(handler):
        # Ray's handler only sets its "interrupted" event (and restores the default SIGINT handler,
        # so that a second Ctrl-C stops hard): safe to call from any thread.
        handler(signal.SIGINT, None)
    return first


def _on_signal(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    first = request_stop(f"interrupted by {name}", signum)
    if first and _state.deferring:
        return  # Ray is starting: acted on by deferring_signals() once it has
    if not first or _state.graceful_stop is None:
        raise KeyboardInterrupt(name)  # a second signal, or no graceful path: stop now


@contextlib.contextmanager
def deferring_signals():
    """While Ray starts (its processes, the driver's core worker): a first SIGINT or SIGTERM is only
    recorded, and raised as :class:`SearchInterrupted` (exit 130 or 143) when the block ends, never
    in the middle of it.

    A KeyboardInterrupt raised inside ``ray.init`` left a half-connected core worker whose teardown
    at exit crashed the driver (``Segmentation fault``, exit 139, about 1 start in 4).
    """
    _state.deferring = True
    try:
        yield
    finally:
        _state.deferring = False
    request = _state.request
    if request is not None and request.signum is not None:
        name = signal.Signals(request.signum).name
        raise SearchInterrupted(request, f"search interrupted by {name} while Ray started, before any trial ran")


def store_failures() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the store (or Optuna's storage in the same database) stopped answering.

    Optuna's RDB storage wraps a failed commit (a full disk, a server gone) in its own
    ``StorageInternalError``, not a SQLAlchemy error: without it here a full disk during a
    suggestion escaped as Ray's tracebacks instead of the one-line, resumable stop.
    """
    return (SQLAlchemyError, StorageInternalError, StoreError, OSError)


def stop_on_store_failure(what: str, error: BaseException) -> None:
    """A store that fails mid-search stops the search gracefully (resumable), with one line saying why.

    Raising inside a Tune callback would print Ray's tracebacks and abort the run; instead the
    search stops as on Ctrl-C and ``archsearch search`` exits 1 with the cause and the resume command.
    """
    text = " ".join(str(getattr(error, "orig", None) or error).split())[:300]
    request_stop(f"stopped: the store failed while {what}: {type(error).__name__}: {text}")


class InterruptCallback(Callback):
    """Routes SIGINT and SIGTERM to Ray Tune's graceful stop while ``fit()`` runs (driver side)."""

    def setup(self, **info: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals are delivered to the main thread only; Ray handles nothing here either
        ray_handler = signal.getsignal(signal.SIGINT)
        with _state.lock:
            _state.graceful_stop = ray_handler if callable(ray_handler) and ray_handler is not _on_signal else None
            pending = _state.request
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
        if pending is not None and _state.graceful_stop is not None:
            _state.graceful_stop(signal.SIGINT, None)  # a signal that came before Ray was ready

    def __getstate__(self) -> dict[str, Any]:
        return {}
