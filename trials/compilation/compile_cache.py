"""Compile once per architecture per node: Inductor's caches, its compile threads, and ``compile: auto``.

Three things decide what torch.compile costs a trial, all set here before a trial compiles:

* **Compile threads.** Inductor sizes its compile pool from every core of the node
  (``torch._inductor.config.compile_threads``); four packed trials on a 16-core node would start 64
  compile processes at once. :func:`configure_compiler` sets it from the trial's CPUs (Ray's assignment).
* **On-disk caches.** Inductor's FX-graph cache and the AOTAutograd cache persist compiled kernels
  under ``TORCHINDUCTOR_CACHE_DIR``, keyed by the graph (weights are inputs, not constants): a
  repeated architecture on the same node loads its kernels instead of generating and building them.
  ``torch.compiler.reset()``, which each trial still calls
  (see :class:`trials.compilation.compiled_forward.CompiledForward`), clears only Dynamo's in-memory
  state, never these files. The directory is ``$ARCHSEARCH_COMPILE_CACHE``, else
  the user's ``$TORCHINDUCTOR_CACHE_DIR``, else ``<tmp>/archsearch-inductor-<uid>``: node-local, one
  per user, shared by every trial process of that user on the node.
* **The auto rule.** ``training.compile: auto`` compiles on CUDA unless this node has measured that
  this architecture's compile, with its kernels already cached, would take more than
  ``training.compile_budget_share`` of the trial's training time (:func:`compile_pays`,
  :func:`decide_auto`). The measurements live beside the caches, one small JSON file per
  architecture (:class:`CompileLedger`).

:class:`CompileClock` times every compile of a trial with Dynamo's compile callbacks, split into
the training graphs (grad enabled, and the lazily compiled backward) and the graphs compiled without
gradients (evaluation, BatchNorm recalibration, the cost measurement).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trials import ownership
from trials.atomic import atomic_write
from trials.configio import ConfigError
from trials.devices.cpus import usable_cpus
from trials.devices.torch_internals import (
    async_compile,
    dynamo_callback,
    dynamo_utils,
    functorch_config,
    inductor_config,
    inductor_utils,
)
from trials.ownership import CACHE_ENV, TORCH_CACHE_ENV, chosen_compile_cache, compile_cache_problem

LEDGER_DIR = "archsearch-compile-ledger"  # measured compile and step seconds per architecture, in the cache
AUTO_DEVICE_TYPES = ("cuda",)  # where ``compile: auto`` compiles at all (CPU: eager; tests may widen it)
MAX_COMPILE_THREADS = 32  # Inductor's own ceiling

# Counters torch keeps per process (torch._dynamo.utils.counters): hits and misses of both caches.
CACHE_COUNTERS = {
    "fxgraph_cache_hits": ("inductor", "fxgraph_cache_hit"),
    "fxgraph_cache_misses": ("inductor", "fxgraph_cache_miss"),
    "autograd_cache_hits": ("aot_autograd", "autograd_cache_hit"),
    "autograd_cache_misses": ("aot_autograd", "autograd_cache_miss"),
}


# -- threads and the cache directory --------------------------------------------------------------


def compile_threads(cpus: float | None) -> int:
    """Inductor compile processes for a trial holding ``cpus`` CPUs (None: the CPUs this process may use).

    A fractional share rounds down, never below one (one thread compiles in the trial's own
    process, with no pool at all); Inductor's own ceiling of 32 stays.
    """
    if cpus is None:
        cpus = usable_cpus()
    return max(1, min(MAX_COMPILE_THREADS, math.floor(cpus)))


def default_cache_dir() -> Path:
    """``<tmp>/archsearch-inductor-<uid>``: node-local, one per user (a uid always resolves; a name may not)."""
    return Path(tempfile.gettempdir()) / f"archsearch-inductor-{os.getuid()}"


def cache_dir() -> Path:
    """Where this node's trials keep compiled kernels: ``$ARCHSEARCH_COMPILE_CACHE``, the user's own
    ``$TORCHINDUCTOR_CACHE_DIR``, or :func:`default_cache_dir`; each checked to be ours alone
    (:func:`trials.ownership.not_private`, the one rule). A directory the environment chose that is not
    is refused (:class:`ConfigError` naming the variable); the default one falls back to a fresh one."""
    problem = compile_cache_problem()
    if problem is not None:
        raise ConfigError(problem.partition(":")[0], problem.partition(": ")[2])
    chosen = chosen_compile_cache()
    if chosen is not None:
        return chosen[1]
    path = default_cache_dir()
    if ownership.private_directory(path) is None:
        return path
    fallback = Path(tempfile.mkdtemp(prefix="archsearch-inductor-"))
    warnings.warn(
        f"{path} belongs to another user or is writable by others: compiled kernels are loaded as code, "
        f"so this process uses {fallback} instead (no reuse across trials); set ${CACHE_ENV} to a directory of yours",
        RuntimeWarning,
        stacklevel=2,
    )
    return fallback


def configure_compiler(cpus: float | None) -> dict[str, Any]:
    """Set Inductor up for this trial before it compiles; returns the facts for the trial's record.

    The thread count is process-wide: a pool an earlier trial started at another size is shut down,
    so the next compile starts one at this trial's size. The cache directory goes through the
    environment (Inductor reads ``TORCHINDUCTOR_CACHE_DIR`` whenever it needs it, and compile
    subprocesses inherit it); Inductor's in-memory caches are cleared only when it changes.
    """
    threads = compile_threads(cpus)
    if inductor_config.compile_threads != threads:
        async_compile.shutdown_compile_workers()
        inductor_config.compile_threads = threads
    directory = str(cache_dir())
    if os.environ.get(TORCH_CACHE_ENV) != directory:
        os.environ[TORCH_CACHE_ENV] = directory
        inductor_utils.clear_caches()
    return {
        "compile_threads": threads,
        "compile_cache_dir": directory,
        "fx_graph_cache": bool(inductor_config.fx_graph_cache),
        "autograd_cache": bool(functorch_config.enable_autograd_cache),
    }


def cache_counts() -> dict[str, int]:
    """Both caches' hits and misses in this process so far (the trial's are the change over the trial)."""
    counters = dynamo_utils.counters
    return {name: int(counters[group][key]) for name, (group, key) in CACHE_COUNTERS.items()}


# -- timing every compile ------------------------------------------------------------------------


class CompileClock:
    """Seconds spent compiling, from Dynamo's compile-start and compile-end callbacks.

    A compile that starts with gradients enabled, or the lazily compiled backward, counts as
    ``train``; one that starts without (``torch.no_grad``/``inference_mode``: evaluation,
    BatchNorm recalibration, the cost measurement) as ``no_grad``. Recompiles (a new batch size,
    a guard that failed) count where they happen. ``torch.compiler.reset()`` drops the callbacks:
    :meth:`install` right after it, once per trial.
    """

    def __init__(self) -> None:
        self.seconds = {"train": 0.0, "no_grad": 0.0}
        self._started: tuple[str, float] | None = None

    def install(self) -> None:
        dynamo_callback.on_compile_start(self._start)
        dynamo_callback.on_compile_end(self._end)

    def _start(self, args: Any) -> None:
        lazy_backward = args.callback_trigger == dynamo_callback.CallbackTrigger.LAZY_BACKWARD
        kind = "train" if lazy_backward or torch.is_grad_enabled() else "no_grad"
        self._started = (kind, time.perf_counter())

    def _end(self, args: Any) -> None:
        if self._started is not None:
            kind, start = self._started
            self.seconds[kind] += time.perf_counter() - start
            self._started = None

    @property
    def total(self) -> float:
        return self.seconds["train"] + self.seconds["no_grad"]


# -- what a compile costs on this node, per architecture ------------------------------------------


def architecture_key(**parts: Any) -> str:
    """A short stable hash of what makes two trials compile the same graphs and step at the same speed
    (model config, input size, batch, dtype, device, backend, torch version...)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class CompileRecord:
    """One compiled trial's measurements: every compile's seconds, and a compiled training step's."""

    compile_s: float
    step_s: float
    cold: bool  # some graph missed the FX-graph cache: the first compile of this architecture here

    def to_dict(self) -> dict[str, Any]:
        return {"compile_s": self.compile_s, "step_s": self.step_s, "cold": self.cold, "at": time.time()}


class CompileLedger:
    """Per architecture key, the latest cold and the latest warm :class:`CompileRecord` of this node.

    One small JSON file per key under the cache directory, replaced atomically: packed trials may
    write at once (the last writer wins, and either record is a true measurement), and reading one
    architecture's costs never reads the others'.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory) / LEDGER_DIR

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def read(self, key: str) -> dict[str, CompileRecord]:
        """``{"cold": ..., "warm": ...}``, each present once measured; {} when unknown or unreadable."""
        try:
            raw = json.loads(self._path(key).read_text())
            return {
                kind: CompileRecord(float(r["compile_s"]), float(r["step_s"]), kind == "cold")
                for kind, r in raw.items()
                if kind in ("cold", "warm")
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def write(self, key: str, record: CompileRecord) -> None:
        """Keep ``record`` as the key's latest cold or warm one (a failure to write costs only the estimate)."""
        entries = {kind: r.to_dict() for kind, r in self.read(key).items()}
        entries["cold" if record.cold else "warm"] = record.to_dict()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(self._path(key), json.dumps(entries))
        except OSError as error:
            warnings.warn(f"could not record compile time in {self.directory}: {error}", RuntimeWarning, stacklevel=2)


# -- the auto rule -------------------------------------------------------------------------------


def compile_pays(compile_s: float, step_s: float, steps: int, share: float) -> bool:
    """Whether compiling stays within budget: its time at most ``share`` of the trial's training time.

    The training time is ``steps`` compiled steps of ``step_s`` seconds each. The rule bounds the
    overhead, not the break-even point: a compiled step is typically 1.3-2x faster than an eager
    one, so a compile within a quarter of training repays itself, while one that takes most of a
    short trial's budget does not.
    """
    return compile_s <= share * step_s * steps


@dataclass(frozen=True)
class AutoDecision:
    """What ``compile: auto`` decided for a trial, and from what."""

    compile: bool
    reason: str
    estimate_s: float | None = None  # the measured compile seconds the decision used
    budget_s: float | None = None  # share x the trial's estimated training seconds

    def facts(self) -> dict[str, float]:
        out = {"compile_auto_skipped": float(not self.compile)}
        if self.estimate_s is not None and self.budget_s is not None:
            out.update(compile_estimate_s=self.estimate_s, compile_budget_s=self.budget_s)
        return out


def decide_auto(device_type: str, known: Mapping[str, CompileRecord], steps: int, share: float) -> AutoDecision:
    """``training.compile: auto`` for a trial of ``steps`` steps on ``device_type``, given what this
    node measured of its architecture (:meth:`CompileLedger.read`).

    * Not a CUDA device: eager (on a CPU, compiling a short trial rarely repays its minutes).
    * No warm record yet (never compiled here, or compiled once with the caches cold): compile. The
      first compile fills the caches, the second measures what a compile costs with them full;
      skipping on the cold time alone would never learn that.
    * Otherwise compile iff :func:`compile_pays` with the warm compile seconds and compiled step time.
    """
    if device_type not in AUTO_DEVICE_TYPES:
        return AutoDecision(False, f"training.compile: auto compiles on {'/'.join(AUTO_DEVICE_TYPES)} only")
    warm = known.get("warm")
    if warm is None:
        return AutoDecision(True, "training.compile: auto: no cached compile of this architecture measured here yet")
    budget = share * warm.step_s * steps
    if compile_pays(warm.compile_s, warm.step_s, steps, share):
        return AutoDecision(True, "training.compile: auto: compiling fits the budget", warm.compile_s, budget)
    reason = (
        f"training.compile: auto skipped compiling: this architecture's compile took {warm.compile_s:.1f} s here "
        f"with its kernels cached, more than {share:g} of the trial's estimated training time "
        f"({steps} steps x {warm.step_s * 1000:.1f} ms = {warm.step_s * steps:.1f} s); the trial ran eagerly"
    )
    return AutoDecision(False, reason, warm.compile_s, budget)
