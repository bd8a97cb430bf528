"""The machine a benchmark ran on, for the header of its table: results from these noisy,
shared machines are only comparable when the CPU and the load at the time are on the page."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


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


PROVENANCE_PACKAGES = (
    *("optuna", "numpy", "scipy", "ray", "torch", "syne-tune"),
    *("optuna-integration", "botorch", "gpytorch", "linear-operator"),  # sampler: botorch (its extra)
)


def provenance(packages: tuple[str, ...] = PROVENANCE_PACKAGES) -> dict:
    """What a result was computed with, so that it can be recomputed and two results compared: the commit
    (and whether the tree had changes not in it), Python and each package's installed version (None where
    it is not installed)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": git("rev-parse", "HEAD"),
        "uncommitted_changes": None if status is None else bool(status),
        "python": sys.version.split()[0],
        "packages": versions,
        "cpu": cpu_model(),
    }
