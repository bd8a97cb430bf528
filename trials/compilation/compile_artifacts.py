"""Compile once per architecture per cluster: a compile's cache artifacts in a directory every node reads.

The FX-graph and AOTAutograd caches of :mod:`trials.compilation.compile_cache` are node-local, so on a cluster
every node pays an architecture's cold compile again (144 s for a small CaiT on a CPU here, minutes
at 224 px on a GPU). After a trial's first compiled epoch its process holds the architecture's
compiled artifacts; ``torch.compiler.save_cache_artifacts()`` serialises them and
``load_cache_artifacts`` puts them into a fresh process's caches, so a trial on another node that
loads them before compiling finds its graphs cached and pays only Dynamo's tracing.

``training.compile_artifacts_dir`` names the shared directory (NFS, Lustre...). One file per
architecture key (:meth:`trials.compilation.compiled_forward.CompileTarget.architecture_key`, which names the
device, the torch version, the model and its shapes), written to a temporary name and renamed, so
a reader never sees half a file and concurrent writers leave one whole file. Artifacts are loaded as
code: a directory that is not this user's alone is refused, as the node cache is.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch

from trials.atomic import atomic_write
from trials.ownership import private_directory

SUFFIX = ".artifacts"


class SharedArtifacts:
    """The compile artifacts of architectures in ``directory``, one file per architecture key."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory).expanduser()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def usable(self) -> str | None:
        """None when the directory may be used; else why not (it is created when absent)."""
        problem = private_directory(self.directory)
        return None if problem is None else f"{problem} (compile artifacts are loaded as code)"

    def load(self, key: str) -> dict[str, float]:
        """Load the architecture's artifacts into this process's compile caches, if a trial saved
        them: ``{"compile_artifacts_loaded": 1.0 or 0.0, "compile_artifacts_load_s": seconds}``.
        An unreadable or damaged file is warned about and compiles as if absent."""
        path = self.path(key)
        started = time.perf_counter()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return {"compile_artifacts_loaded": 0.0}
        except OSError as error:
            warnings.warn(f"compile artifacts {path} unreadable: {error}", RuntimeWarning, stacklevel=2)
            return {"compile_artifacts_loaded": 0.0}
        try:
            info = torch.compiler.load_cache_artifacts(data)  # None: torch found the bytes damaged
        except Exception as error:  # a foreign file: compile from scratch, say so
            info, why = None, str(error).splitlines()[0] if str(error) else type(error).__name__
        else:
            why = "damaged (checksum)"
        if info is None:
            warnings.warn(f"compile artifacts {path} not loaded: {why}", RuntimeWarning, stacklevel=2)
            return {"compile_artifacts_loaded": 0.0}
        return {"compile_artifacts_loaded": 1.0, "compile_artifacts_load_s": time.perf_counter() - started}

    def save(self, key: str, replace: bool) -> dict[str, float]:
        """Serialise what this process compiled for the architecture, unless a file is there already
        and ``replace`` is false (another trial was first; its artifacts are as good).
        ``{"compile_artifacts_saved": 1.0 or 0.0, "compile_artifacts_bytes": size}``."""
        path = self.path(key)
        if path.exists() and not replace:
            return {"compile_artifacts_saved": 0.0}
        saved = torch.compiler.save_cache_artifacts()
        if not saved or not saved[0]:
            return {"compile_artifacts_saved": 0.0}
        data = saved[0]
        try:
            atomic_write(path, data)
        except OSError as error:
            warnings.warn(f"compile artifacts not saved to {path}: {error}", RuntimeWarning, stacklevel=2)
            return {"compile_artifacts_saved": 0.0}
        return {"compile_artifacts_saved": 1.0, "compile_artifacts_bytes": float(len(data))}
