"""The signals that stop a command or a search, and the exit code each ends with: one list for both.

Ctrl-C (SIGINT), a scheduler's SIGTERM, and what a terminal sends when it goes away (SIGHUP: a dropped
ssh session, a closed tmux pane) or on Ctrl-\\ (SIGQUIT). A search takes its one interrupt path on each
(:mod:`harness.search.interrupts`: the study ``interrupted``, running trials recorded, Ray's processes
ended, the resume command printed); any other command ends with one line and the code. Kept apart and
import-light: the command line installs these handlers before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

# A signal the platform lacks is left out.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name)
)
EXIT_CODES = {stop: 128 + int(stop) for stop in STOP_SIGNALS}  # the shell's convention: 130, 143, 129, 131


@contextlib.contextmanager
def blocked_in_children() -> Iterator[None]:
    """Within the block, the stop signals are blocked in this thread, so processes it starts inherit
    them blocked (a signal mask survives fork and exec); this thread's mask comes back afterwards and a
    signal that arrived meanwhile is delivered then.

    Why: Ray blocks SIGINT in the local Ray's processes so that Ctrl-C, which a terminal sends to the
    whole process group, reaches the driver alone, which stops the search and then ends Ray. A
    scheduler's SIGTERM and a closed terminal's SIGHUP go to the whole group as well, and ended Ray's
    core under the driver: its core worker then terminated the driver at once ("the connection to the
    plasma store is failed", exit 1) before its handler could record the study ``interrupted``. Started
    within this block, Ray's processes treat every stop signal as Ray treats SIGINT."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
