"""What watches a running search from the driver: the store heartbeat, the stop watchdog, the local Ray.

Three daemon threads that run beside ``Tuner.fit()``; each reads the search's
:class:`harness.search.session.SearchSession` for a stop already asked for, and records an interrupted
study (its running trials and itself ``interrupted``, the resume command in its message).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from harness.search import adapter
from harness.search.interrupts import EXIT_CODES, SearchInterrupted, StopRequest
from harness.search.record.signals import InterruptCallback  # noqa: F401  (older experiments pickled it here)
from harness.search.session import SearchSession
from harness.store import LeaseLost, Store
from harness.store.liveness import HEARTBEAT_S
from trials.status import StudyStatus

HARD_STOP_AFTER_S = 45.0  # a graceful stop that takes longer than this ends the driver
RAY_GONE_GRACE_S = 3.0  # once the local Ray's core died under a stop, fit() has this long to return
STOP_POLL_S = 0.5


class StopWatchdog:
    """When a stop is requested, record the study as interrupted at once; end the driver if Ray cannot stop.

    The local Ray's processes ignore a stop signal sent to the whole process group (a batch scheduler,
    ``kill -- -PGID``: :func:`harness.stop_signals.blocked_in_children`), but a signal sent to them by
    name (``pkill raylet``, a node agent) or the OOM killer still ends them, and the driver would then
    wait a minute for Ray's control store before dying with exit 1. The store is marked first (the
    running trials and the study ``interrupted``); the driver then prints the resume line and exits
    with the signal's code if ``fit()`` has not returned :data:`RAY_GONE_GRACE_S` after the local Ray's
    core died (nothing is left for it to wait for, and a batch scheduler sends SIGKILL 30 s after
    SIGTERM), or after :data:`HARD_STOP_AFTER_S` in any case.
    Ray's experiment state, saved as the search went, resumes.
    """

    def __init__(self, store_url: str, name: str, command: str):
        self.store_url, self.name, self.command = store_url, name, command
        self._cancelled = threading.Event()
        self.session: SearchSession | None = None  # the search it guards, whose lease its writes go under

    def _lease(self) -> str | None:
        return self.session.lease if self.session is not None else None

    def arm(self, request) -> None:
        """Called from the signal handler: the work happens on a thread (the main thread may hold a
        store transaction that this must not wait for)."""
        threading.Thread(target=self._run, args=(request,), name="archsearch-stop", daemon=True).start()

    def _run(self, request) -> None:
        record_interruption(self.store_url, self.name, request, self.command, self._lease())
        if self._stopped_in_time():
            return
        message = record_interruption(self.store_url, self.name, request, self.command, self._lease())
        print(f"\n{message}", file=sys.stderr, flush=True)
        os._exit(request.exit_code)

    def _stopped_in_time(self) -> bool:
        """Whether ``fit()`` returned (:meth:`cancel`) before the hard stop is due (see the class docstring)."""
        deadline = time.monotonic() + HARD_STOP_AFTER_S
        ray_gone_at = None
        while not self._cancelled.wait(STOP_POLL_S):
            now = time.monotonic()
            if ray_gone_at is None and adapter.dead_local_ray_processes(RAY_CORE):
                ray_gone_at = now
            if now >= deadline or (ray_gone_at is not None and now - ray_gone_at >= RAY_GONE_GRACE_S):
                return False
        return True

    def cancel(self) -> None:
        self._cancelled.set()


def exit_at_once_if_local_ray_died(exit_code: int) -> None:
    """End the process now with ``exit_code`` when the local Ray this driver started lost its core.

    A signal to the whole process group ends Ray's own processes too; when ``fit()`` still returned
    in time, the interpreter's exit would run Ray's shutdown, whose core worker waits a minute for the
    dead GCS and then aborts the process with exit 1, hiding the signal's code from a batch
    scheduler. The command's last line is already printed: nothing is left to wait for."""
    if adapter.dead_local_ray_processes(RAY_CORE):
        end_process_and_local_ray(exit_code)


def end_process_and_local_ray(exit_code: int) -> None:
    """Kill what is left of the local Ray (nothing would stop it after ``os._exit``), flush what was said,
    and end the process with ``exit_code`` without running Ray's shutdown."""
    adapter.kill_local_ray()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


def record_interruption(store_url: str, name: str, stop, command: str, lease: str | None = None):
    """Record an interrupted search (running trials and the study ``interrupted``) and say how to resume.

    Under the driver's ``lease``: a study taken over (or deleted) is not this driver's to record, and
    the message says so instead of offering a resume."""
    counts: dict[str, int] = {}
    try:
        with Store.open(store_url) as store:
            store.hold_lease(name, lease)
            store.interrupt_running_trials(name)
            store.set_study_status(name, StudyStatus.INTERRUPTED, message=f"{stop.reason}; resume with: {command}")
            counts = store.counts(name, epochs=False)
    except LeaseLost as lost:
        reason = stop.reason if str(lost) in stop.reason else f"{stop.reason}; {lost}"
        return SearchInterrupted(stop, f"search {reason}; nothing more was written to it")
    except Exception:  # the store may be what failed: the message still says how to resume
        pass
    done = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    return SearchInterrupted(stop, f"search {stop.reason}{f' ({done})' if done else ''}; resume with: {command}")


def set_study_status(
    store_url: str, name: str, status: str, message: str | None, lease: str | None = None, *, trials: bool = False
) -> None:
    """Record the study's status under the driver's ``lease``; ``trials``: its ``running`` trials become
    ``interrupted`` too (the search that would record their end is not going to run)."""
    try:
        with Store.open(store_url) as store:
            store.hold_lease(name, lease)
            if trials:
                store.interrupt_running_trials(name)
            store.set_study_status(name, status, message=message)
    except Exception:  # recording the status must never hide the original error
        pass


class Heartbeat:
    """Renews the driver's lease on its study every ``interval_s`` while the search runs
    (:meth:`harness.store.Store.heartbeat`), so that a driver that died is recognised by its silence
    from any host or container, and a driver whose study was taken over or deleted stops.

    A beat that fails for another reason (the database briefly away) is skipped, never the end of
    the beats: a transient error must not make a live driver look dead ten minutes later."""

    def __init__(
        self, store_url: str, name: str, session: SearchSession | None = None, interval_s: float = HEARTBEAT_S
    ):
        self.store_url, self.name, self.session, self.interval_s = store_url, name, session, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="archsearch-heartbeat", daemon=True)

    def _run(self) -> None:
        store = None
        while not self._stop.wait(self.interval_s):
            try:
                if store is None:  # never created: a store that is not there (a mount away) is not made empty
                    store = Store.open(self.store_url, create=False)
                    if self.session is not None:
                        self.session.hold(store)
                store.heartbeat(self.name)
            except LeaseLost as lost:
                if self.session is not None:
                    self.session.stop_on_lost_lease(lost)
                break
            except Exception:  # a missed heartbeat must never stop the search: try again next time
                if store is not None:
                    store.close()
                store = None
        if store is not None:
            store.close()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


RAY_WATCH_S = 1.0  # how often the driver checks that the local Ray it started is still alive
RAY_WATCH_GRACE_S = 2.0  # after a death is seen, before it is reported (a signal may explain it)
RAY_CORE = ("gcs_server", "raylet")  # without either, no trial can finish and Ray's driver only waits


class RayWatch:
    """Ends the driver in one line when the local Ray it started dies under it (its GCS or raylet
    killed: the OOM killer, a user's ``kill``), instead of Ray's core worker waiting a minute and
    printing its own lines ("Failed to connect to GCS within 60 seconds") before aborting.

    The study and its running trials are marked ``interrupted``, the resume command is printed,
    and the driver exits 1. A cluster joined with ``--address`` has its processes elsewhere: not
    watched here (its head's failure surfaces through Ray).
    """

    def __init__(self, store_url: str, name: str, command: str, session: SearchSession):
        self.store_url, self.name, self.command, self.session = store_url, name, command, session
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="archsearch-ray-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(RAY_WATCH_S):
            if self.session.stop_request is not None:  # a stop was asked for (a signal to the whole group
                continue  # ends Ray too): the stop's own path reports it, with its exit code
            dead = adapter.dead_local_ray_processes(RAY_CORE)
            if not dead:
                continue
            # Ray's processes ended by a stop signal (SIGINT, SIGTERM, SIGHUP...): sent to them by name
            # (they block one sent to the whole process group, harness.stop_signals.blocked_in_children),
            # or to a group whose Ray was started before it blocked them: stopped as that signal asks,
            # even if the driver's own handler has not run yet (the main thread may be inside Ray's C++).
            signalled = [-code for _, code in dead if code < 0 and -code in EXIT_CODES]
            if signalled:
                self.session.request_stop(f"interrupted by {signal.Signals(signalled[0]).name}", signalled[0])
                continue
            if self._stop.wait(RAY_WATCH_GRACE_S) or self.session.stop_request is not None:
                continue
            if not self._stop.is_set():
                what = ", ".join(f"{kind} (exit {code})" for kind, code in dead)
                request = StopRequest(f"stopped: Ray's local processes died under the driver: {what}")
                message = record_interruption(self.store_url, self.name, request, self.command, self.session.lease)
                print(f"\n{message}", file=sys.stderr, flush=True)
                end_process_and_local_ray(request.exit_code)

    def __enter__(self) -> RayWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
