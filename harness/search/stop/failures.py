"""Why trials failed, in one line: the reason a search reports when every trial failed the same way."""

from __future__ import annotations

import json
import re
from typing import Any

from search_space.spec import param_target

# An exception's own line: its (dotted) class name, then its message: ``RuntimeError: ...``,
# ``torch.OutOfMemoryError: ...``, ``KeyError: 'x'``; or a class name alone (``StopIteration``).
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::\s.*|:)?$")
NOT_AN_EXCEPTION = ("Traceback (", "During handling", "The above exception", "Failure # ")


def error_reason(error: str | None) -> str:
    """What went wrong, in one line: the exception's type and the first line of its message.

    A trial's error is ``Type: message`` followed by its traceback's frames (indented), a Ray error
    file is the frames first and the exception last, a chained one holds several: the reason is the
    last unindented line that names an exception, never a line of source (``raise RuntimeError(``).
    An error text with no such line is reported by its first line.
    """
    lines = [line.rstrip() for line in (error or "").splitlines() if line.strip()]
    exceptions = [
        index
        for index, line in enumerate(lines)
        if not line[0].isspace() and EXCEPTION_LINE.match(line) and not line.startswith(NOT_AN_EXCEPTION)
    ]
    if not exceptions:
        return lines[0].strip()[:300] if lines else ""
    return lines[exceptions[-1]][:300]


def common_error(errors: list[str]) -> str | None:
    """The reason shared by every error, or None when they differ (or there are none)."""
    reasons = {error_reason(e) for e in errors}
    return reasons.pop() if len(reasons) == 1 and errors else None


def searched_value(spec: dict, config: dict, name: str) -> Any:
    """The value a sampled trial config holds for the spec's searched parameter ``name``."""
    section, field, index = param_target(name, spec["family"])
    if section == "variant":
        return config.get("name")
    if section == "seed":
        return config.get("seed")
    value = (config.get(section) or {}).get(field)
    if index is not None and isinstance(value, list):
        return value[index] if index < len(value) else None
    return value


def shared_searched_value(spec: dict, configs: list[dict]) -> tuple[str, Any] | None:
    """A searched parameter (and its value) that every one of ``configs`` has in common, if any.

    When every failed trial shares a sampled value, that value may be why they failed, and other
    values may work: the search must go on. Failures spread over the space point at the setup.
    """
    if len(configs) < 2:
        return None
    for name, domain in (spec.get("params") or {}).items():
        if not isinstance(domain, dict) or "fixed" in domain:
            continue  # fixed: the same in every trial by design
        values = {json.dumps(searched_value(spec, c, name), sort_keys=True, default=str) for c in configs}
        if len(values) == 1:
            return name, searched_value(spec, configs[0], name)
    return None
