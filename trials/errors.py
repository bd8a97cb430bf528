"""archsearch's one error taxonomy: every error a user can cause or fix derives from ArchsearchError.

Each kind carries its exit code, so the command line catches the root once and prints one line
(:class:`harness.cli._Commands`); anything that is not an ArchsearchError is a bug and is reported
as one, with the path of its traceback. Lives in the lowest layer (``trials``, standard library
only) so that every package can raise its kind without importing upwards. The kinds:

=============  =====  ==========================================================================
kind           exit   raised for
=============  =====  ==========================================================================
spec           2      a spec, trial config or model config that does not validate (ConfigError)
store          2      a store that cannot be opened or read, an unknown study (StoreError)
run            2      where or how a search cannot run here: names, results dir, resources, device
cluster        2      a Ray cluster that cannot be joined (ClusterError)
data           2      data or files a command reads that are unusable (a table, a front query)
environment    2      installed versions archsearch cannot work with
interrupted    130    a stop on request (SIGINT 130, SIGTERM 143; a failing store stops with 1)
=============  =====  ==========================================================================
"""

from __future__ import annotations


class ArchsearchError(Exception):
    """The root: a one-line message for the user, ``kind`` and the ``exit_code`` the CLI exits with."""

    kind = "usage"
    exit_code = 2


class RunError(ArchsearchError):
    kind = "run"


class DataError(ArchsearchError):
    kind = "data"


class EnvironmentProblem(ArchsearchError):
    kind = "environment"


ECHO_LIMIT = 80  # characters of a user's value an error line repeats


def cut_at_word(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: whole, or cut at the last space before the limit with
    ``...`` after the last whole word (``... (coatnet) or ...``, never ``(coatne...``); a text with no
    space in its second half (one huge value) is cut at the limit."""
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit - 3)  # text[:space] ends on a whole word; " ..." fits after it
    if space < limit // 2:
        return text[: limit - 3] + "..."
    return text[:space].rstrip(" ,;:(/") + " ..."


def capped(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` as an error line may repeat it: at most ``limit`` characters, then how long it was.

    A value is echoed so the user can find it, not to print it back whole: a 100,000-character
    study name must not become a 100,000-character error line.
    """
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def printable(text: str) -> str:
    """``text`` with every non-printable character as its escape: safe to print to a terminal (a
    study name or a path holding a terminal escape sequence is shown, never obeyed)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
