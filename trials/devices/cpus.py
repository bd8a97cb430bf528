"""How many CPUs this process may really use: the one count every sizing decision starts from
(the local Ray's size, a trial's processes, DataLoader processes, Inductor's compile threads)."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and taskset narrow), not
    the machine's count: a local Ray sized to the machine offered CPUs this process cannot use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
