"""The ``archsearch`` command line.

Commands live by what they touch: :mod:`.trial_commands` (one model or trial, no store),
:mod:`.read_commands` (read studies), :mod:`.run_commands` (run studies, write the store),
:mod:`.check_command` (what a search would do, writing nothing); :mod:`.common` holds what they share.
Heavy packages are bound lazily (``trials.lazy``), so ``archsearch --help`` imports neither torch nor Ray.
Bad input exits with code 2 and a one-line message naming the offending value.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
import warnings

import click

from harness import __version__
from harness.cli.admin_commands import export_command
from harness.cli.check_command import check_command
from harness.cli.common import crash_log, one_line
from harness.cli.fidelity_command import fidelity_command
from harness.cli.read_commands import pareto_command, report_command, studies_command, trials_command
from harness.cli.run_commands import reproduce_command, search_command, verify_command
from harness.cli.trial_commands import bench_command, models_command, trial_command
from harness.stop_signals import STOP_SIGNALS
from search_space.buildable import PartlyInvalidSpace
from trials.errors import ArchsearchError, printable

ONE_LINE_WARNINGS = (PartlyInvalidSpace,)  # warnings a command prints as one line: "warning: ..."


def _one_line_warnings(show):
    """``warnings.showwarning`` that prints :data:`ONE_LINE_WARNINGS` as one line on standard error
    (no file, line or source: the message says what and where) and leaves every other warning to ``show``."""

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ONE_LINE_WARNINGS):
            click.echo(printable(one_line(f"warning: {message}")), err=True)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


class _Terminated(BaseException):
    """SIGTERM, SIGHUP or SIGQUIT reached a command that has no handler of its own (a search installs
    its own): ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_RECEIVED: list[int] = []  # signals that reached a command: an error after one is the stop, not a bug


def _raise_terminated(signum, frame) -> None:
    _RECEIVED.append(signum)
    raise _Terminated(signum)


def _raise_interrupt(signum, frame) -> None:
    _RECEIVED.append(signum)
    raise KeyboardInterrupt


def _catch_signals():
    """SIGINT -> KeyboardInterrupt, every other stop signal (SIGTERM, SIGHUP, SIGQUIT) ->
    :class:`_Terminated`, each remembered (an import that a Ctrl-C cut short may swallow the
    KeyboardInterrupt and fail later with another error); main thread only. Returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _RECEIVED.clear()
    return {
        stop: signal.signal(stop, _raise_interrupt if stop == signal.SIGINT else _raise_terminated)
        for stop in STOP_SIGNALS
    }


def _standard_output_failed(error: BaseException) -> bool:
    """``error`` is a write to standard output that failed (``> /dev/full``, a pipe closed early):
    an OSError raised where a stream that is standard output was written or flushed (``click.echo``'s
    ``file``, a renderer's ``sys.stdout``), so every command's output fails the same one way."""
    if not isinstance(error, OSError) or error.__traceback__ is None:
        return False
    innermost = error.__traceback__
    while innermost.tb_next is not None:
        innermost = innermost.tb_next
    names = innermost.tb_frame.f_locals
    streams = [names.get("file"), names.get("stream"), names.get("self")]
    return any(_is_standard_output(stream) for stream in streams if stream is not None)


def _is_standard_output(stream) -> bool:
    if stream is sys.stdout or stream is sys.__stdout__:
        return True
    try:
        return callable(getattr(stream, "write", None)) and stream.fileno() == 1
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def _silence_standard_output() -> None:
    """Point a failed standard output at /dev/null, so that what is still buffered is not flushed into
    the failure again at exit ("Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        if sys.stdout.fileno() == 1:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)


class _Commands(click.Group):
    """The command group; a Ctrl-C that reaches a command (its own handlers not installed yet, or a
    command without any: verify, report) ends it with one line and exit 130, not click's "Aborted!"
    and exit 1."""

    def invoke(self, ctx: click.Context):
        previous = _catch_signals()
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _one_line_warnings(warnings.showwarning)
                return super().invoke(ctx)
        except KeyboardInterrupt:
            name = ctx.invoked_subcommand or "archsearch"
            click.echo(f"\n{name} interrupted by SIGINT", err=True)
            ctx.exit(130)
        except _Terminated as terminated:
            name = ctx.invoked_subcommand or "archsearch"
            click.echo(f"\n{name} terminated by {signal.Signals(terminated.signum).name}", err=True)
            ctx.exit(128 + terminated.signum)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except ArchsearchError as error:  # every error a user can cause or fix: one line, its exit code
            click.echo(printable(one_line(f"Error: {error}")), err=True)
            ctx.exit(error.exit_code)
        except Exception as error:  # anything else is a bug: say so, keep the traceback off the screen
            if _standard_output_failed(error):  # a full disk, a closed pipe: the place, not a bug
                click.echo(one_line(f"Error: cannot write to standard output: {error.strerror or error}"), err=True)
                _silence_standard_output()
                ctx.exit(2)
            if _RECEIVED:  # a stop that surfaced as another error (an import cut short by Ctrl-C)
                name = ctx.invoked_subcommand or "archsearch"
                received = _RECEIVED[-1]
                click.echo(f"\n{name} interrupted by {signal.Signals(received).name}", err=True)
                ctx.exit(128 + received)
            log = crash_log(error)
            click.echo(
                one_line(f"archsearch: internal error (a bug, please report it): {type(error).__name__}: {error}")
                + f"; traceback in {log}",
                err=True,
            )
            ctx.exit(1)
        finally:
            for stop, handler in (previous or {}).items():
                signal.signal(stop, handler)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="archsearch")
def main() -> None:
    """archsearch: search and benchmark CaiT and CoAtNet architectures."""


for _command in (
    models_command,
    trial_command,
    bench_command,
    studies_command,
    trials_command,
    check_command,
    search_command,
    pareto_command,
    report_command,
    fidelity_command,
    reproduce_command,
    verify_command,
    export_command,
):
    main.add_command(_command)
