"""The machine a benchmark ran on, for the header of its table: results from these noisy,
shared machines are only comparable when the CPU and the load at the time are on the page."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, e.g. ``0.58, 1.74, 1.61``."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())
