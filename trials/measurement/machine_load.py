"""What else ran on a trial's CPUs while its throughput was timed, and the mark a table puts on such a number.

A CPU throughput timed beside a busy neighbour (another trial of the search on the same cores, anything
else on the machine) is the neighbour's share of the cores, not the model's speed: 183 img/s stored beside a
busy trial, 1,398 img/s re-measured alone. So the window in which a throughput is timed is watched: the CPU
time the cores this process may run on (its affinity) spent busy, from ``/proc/stat``, less this process's
own CPU time, over the window's wall time, is how many of those cores other processes kept busy
(``others_cores``; hypervisor steal counts, it is another machine's work on these cores).

Why this and not the load average or the search's concurrency: the 1-minute load average lags by a minute
(a trial measured just after its neighbour ended would be marked) and counts tasks on every core, and a
count of the search's running trials cannot tell a neighbour on another node, or on idle cores, from one on
ours; what the cores did during the very seconds that were timed can. A GPU throughput is marked when the
GPU was shared (``throughput_shared``, a packed trial): its CPU neighbours barely move it.

The rule (:func:`contended`): marked when the cores left to the timing (``cores - others_cores``) were fewer
than its threads, with a quarter of a core of slack for the machine's own background. Linux only (elsewhere
no reading: no mark); a window under :data:`MIN_WINDOW_S` is not judged (``/proc/stat`` counts in ticks of
10 ms per core: a shorter window's reading is mostly rounding). No torch here: the tables import the rule.
"""

from __future__ import annotations

import numbers
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC_STAT = Path("/proc/stat")
MIN_WINDOW_S = 0.25  # shorter windows: ticks of 10 ms per core make the reading mostly rounding
SLACK_CORES = 0.25  # the machine's own background (daemons, the driver's heartbeat) is not a neighbour
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (guest time is inside user)


@dataclass(frozen=True)
class LoadReading:
    """Others' use of this process's cores during one timing window: ``others_cores`` of ``cores`` busy,
    while the timing ran on ``threads`` threads."""

    others_cores: float
    cores: int
    threads: int


def _busy_ticks(cpus: frozenset[int]) -> int | None:
    """The busy ticks of ``cpus`` so far (``/proc/stat``'s per-CPU lines), or None where it cannot be read."""
    try:
        text = PROC_STAT.read_text()
    except OSError:
        return None
    total, seen = 0, 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        fields = [int(v) for v in rest.split()]
        total += sum(fields[i] for i in _BUSY_FIELDS if i < len(fields))
        seen += 1
    return total if seen == len(cpus) else None


def _own_cpus() -> frozenset[int]:
    return frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


class LoadWindow:
    """``with LoadWindow() as window: <time something>`` then ``window.reading(threads)``: the load others put
    on this process's cores meanwhile, or None (not Linux, unreadable, or a window under ``MIN_WINDOW_S``)."""

    def __init__(self) -> None:
        self.cpus = _own_cpus()
        self.tick_s = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
        self._start: tuple[int | None, float, float] | None = None
        self._end: tuple[int | None, float, float] | None = None

    def _now(self) -> tuple[int | None, float, float]:
        return _busy_ticks(self.cpus) if self.cpus else None, time.process_time(), time.perf_counter()

    def __enter__(self) -> LoadWindow:
        self._start = self._now()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._end = self._now()

    def reading(self, threads: int) -> LoadReading | None:
        if self._start is None or self._end is None:
            return None
        (busy0, own0, wall0), (busy1, own1, wall1) = self._start, self._end
        wall = wall1 - wall0
        if busy0 is None or busy1 is None or wall < MIN_WINDOW_S:
            return None
        others = ((busy1 - busy0) * self.tick_s - (own1 - own0)) / wall
        return LoadReading(round(min(max(others, 0.0), float(len(self.cpus))), 2), len(self.cpus), int(threads))


def load_fields(reading: LoadReading | None) -> dict[str, Any]:
    """A reading as a measurement's ``load_others_cores``, ``load_cores``, ``load_threads`` (None: not read)."""
    if reading is None:
        return {"load_others_cores": None, "load_cores": None, "load_threads": None}
    return {"load_others_cores": reading.others_cores, "load_cores": reading.cores, "load_threads": reading.threads}


def contended(others_cores: float | None, cores: int | None, threads: int | None) -> bool:
    """Whether other processes left the timing fewer cores than its threads (see the module docstring)."""
    if others_cores is None or not cores or not threads:
        return False
    return cores - others_cores < min(threads, cores) - SLACK_CORES


def load_note(measurement: Mapping[str, Any]) -> str | None:
    """Why a stored throughput was measured beside other work, in a few words, or None where it was not
    (or nothing says): a stored measurement's ``throughput_shared``, ``load_others_cores``, ``load_cores``,
    ``load_threads``. Read by every table that shows a throughput, which marks the cell."""
    if measurement.get("throughput_shared") is True or measurement.get("throughput_shared") == 1:
        return "on a GPU shared with other trials (packed)"
    others, cores, threads = (measurement.get(k) for k in ("load_others_cores", "load_cores", "load_threads"))
    if not _number(others) or not _number(cores) or not _number(threads):
        return None
    if not contended(float(others), int(cores), int(threads)):
        return None
    threads = int(threads)
    return (
        f"other processes kept {float(others):.1f} of its {int(cores)} CPUs busy "
        f"(timed on {threads} thread{'s' if threads != 1 else ''})"
    )


def _number(value: Any) -> bool:
    """A finite number (a store's missing value comes back as None or NaN)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value
