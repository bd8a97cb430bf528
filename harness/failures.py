"""Why trials failed, in one line: the reason a search reports when every trial failed the same way."""

from __future__ import annotations


def error_reason(error: str | None) -> str:
    """The line of an error that says what went wrong (the exception line at the end of a traceback)."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def common_error(errors: list[str]) -> str | None:
    """The reason shared by every error, or None when they differ (or there are none)."""
    reasons = {error_reason(e) for e in errors}
    return reasons.pop() if len(reasons) == 1 and errors else None
