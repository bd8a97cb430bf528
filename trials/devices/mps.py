"""Packed trials that overlap on one GPU: CUDA's Multi-Process Service (``search.resources.mps``).

Without MPS, the CUDA contexts of the processes packed on a GPU time-slice: one runs at a time, so
packing only fills one trial's host gaps (a 32x32 trial's Python step). Under MPS the processes are
clients of one server and their kernels run concurrently. The daemon belongs to the node, not to
us: it is checked (a running ``nvidia-cuda-mps-control`` and its control pipe), never started, and
a search that asks for MPS where it is not running is refused in one line that says how to start it.

MPS's own limit on a client's device memory (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) is the hard cap:
the caching allocator's cap (:func:`trials.devices.gpu.cap_process_memory`) does not see the context, the
cuBLAS workspace or the compiled kernels; the MPS limit covers all of a client's device memory. It
is read when the process creates its CUDA context, so the trial sets it before anything is
allocated; Ray shows each trial one GPU, so its ordinal is 0.

A fatal GPU fault (an illegal address, a device-side assert) in one MPS client is not contained to
it: every client of that GPU's server gets an error and the server restarts. Each such trial is
recorded ``failed`` with its error and its worker ended (a broken CUDA context is never reused), and
``search.retries`` runs them again on fresh workers.
"""

from __future__ import annotations

import os
import platform
import stat
from pathlib import Path

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
PINNED_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
DAEMON = "nvidia-cuda-mps-control"
HOW_TO_START = f"start it on every GPU node as the user that runs the trials (`{DAEMON} -d`)"


def pipe_directory() -> Path:
    """Where the MPS control daemon keeps its pipes (the clients read the same variable)."""
    return Path(os.environ.get(PIPE_ENV) or DEFAULT_PIPE_DIRECTORY)


def _daemon_processes(proc: Path = Path("/proc")) -> list[int]:
    """Process ids whose command is the MPS control daemon (Linux ``/proc``; [] elsewhere)."""
    found = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip().startswith(DAEMON[:15]):  # comm holds 15 characters
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def daemon_problem(pipes: Path | None = None, proc: Path = Path("/proc")) -> str | None:
    """None when this node's MPS control daemon is running; else one line saying what is missing
    and how to start it. Both are checked: a daemon that died leaves its control pipe behind."""
    pipes = pipes or pipe_directory()
    control = pipes / "control"
    node = platform.node()
    try:
        is_pipe = stat.S_ISFIFO(control.stat().st_mode)
    except OSError:
        is_pipe = False
    if not is_pipe:
        return f"the CUDA MPS control daemon is not running on {node} (no control pipe {control}): {HOW_TO_START}"
    if not _daemon_processes(proc):
        return f"the CUDA MPS control daemon is not running on {node} (its pipe {control} is stale): {HOW_TO_START}"
    return None


def pinned_limit(share: float, total_bytes: int) -> str:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``'s value for a client with ``share`` of a GPU of
    ``total_bytes``: ordinal 0 (the one GPU Ray shows the trial), in whole MiB."""
    return f"0={int(share * total_bytes) // 2**20}M"
