"""The signals that stop a command or a search, and the exit code each ends with: one list for both.

Ctrl-C (SIGINT), a scheduler's SIGTERM, and what a terminal sends when it goes away (SIGHUP: a dropped
ssh session, a closed tmux pane) or on Ctrl-\\ (SIGQUIT). A search takes its one interrupt path on each
(:mod:`harness.search.interrupts`: the study ``interrupted``, running trials recorded, Ray's processes
ended, the resume command printed); any other command ends with one line and the code. Kept apart and
import-light: the command line installs these handlers before anything heavy is imported.
"""

from __future__ import annotations

import signal

# A signal the platform lacks is left out.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name)
)
EXIT_CODES = {stop: 128 + int(stop) for stop in STOP_SIGNALS}  # the shell's convention: 130, 143, 129, 131
