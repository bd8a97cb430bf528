"""The trial's forward pass, compiled when the trial compiles: the decision, the compile, the fallback.

Why a module of its own: whether a trial compiles (``training.compile``, ``auto``'s rule read from
this node's ledger), compiling it after clearing what earlier trials of the process compiled,
running through the compiled model with an eager retry on compile errors only, counting the graphs
it really compiled (and those it recompiled after its first epoch) and leaving its compile
measurement for later trials are one job with its own state (the clock, the counters at the start,
the fallback).

What is compiled (:func:`choose_compile`): shapes are always static, so the batch-1 latency
measurement compiles a graph of its own instead of turning the training graph symbolic in the batch
(Dynamo's automatic dynamic shapes did that after a second batch size); by default each repeated
block alone (``training.compile_scope: regional``, :mod:`trials.models.regions`), so compile time
does not grow with depth and models that differ only in depth share graphs; CUDA graphs
(``reduce-overhead``, the whole model) for launch-bound trials on one GPU. The training loop only asks it to run a
forward (:meth:`CompiledForward.run`) and reads its facts; :class:`trials.training.train.Trainer` keeps the
public names (``compiled``, ``compiled_graphs``, ``compile_requested``...) as views of this.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from trials.compilation import compile_cache
from trials.compilation.compile_artifacts import SharedArtifacts
from trials.compilation.compile_cache import CompileClock
from trials.configio import ConfigError
from trials.devices.gpu import is_compile_error, release_memory
from trials.devices.torch_internals import dynamo_config, dynamo_utils
from trials.models.regions import compile_regions, uncompile_regions, variants_needed

Forward = Callable[[torch.Tensor], torch.Tensor]
RECOMPILE_NOTE = "torch.compile recompiled"
Result = TypeVar("Result")


@dataclass(frozen=True)
class CompileTarget:
    """What a trial compiles and where: everything that makes another trial's compile the same."""

    model: nn.Module
    device: torch.device
    dtype: torch.dtype
    channels_last: bool
    image_size: int
    batch_size: int | None  # the training source's batch (None: a source without one)
    world_size: int
    backend: str

    def architecture_key(self) -> str:
        """What makes another trial compile the same graphs and step at the same speed on this node."""
        model_config = getattr(self.model, "config", None)
        device = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else self.device.type
        return compile_cache.architecture_key(
            model=model_config.to_dict() if hasattr(model_config, "to_dict") else repr(self.model),
            image_size=self.image_size,
            batch_size=self.batch_size,
            world_size=self.world_size,
            dtype=str(self.dtype),
            channels_last=self.channels_last,
            device=device,
            backend=self.backend,
            torch=torch.__version__,
        )


@dataclass(frozen=True)
class CompilePlan:
    """``training.compile`` and what ``auto`` weighs: the trial's CPUs, steps and budget share;
    what compiles (``compile_scope``) and whether CUDA graphs may (``cuda_graphs``)."""

    setting: bool | str
    cpus: float | None
    total_steps: int
    budget_share: float
    scope: str = "regional"
    cuda_graphs: bool | str = "auto"
    artifacts_dir: str | None = None  # ``training.compile_artifacts_dir``: shared across nodes


CUDA_GRAPHS_MAX_IMAGE = 64  # ``cuda_graphs: auto``: images at most this size make launch-bound steps
REDUCE_OVERHEAD = "reduce-overhead"  # torch.compile's mode that records CUDA graphs


@dataclass(frozen=True)
class CompileChoice:
    """How a compiling trial compiles: ``scope`` (regional or whole), ``mode`` (None or
    ``reduce-overhead``) and, where CUDA graphs were asked for and not taken, why not."""

    scope: str
    mode: str | None
    note: str | None = None

    @property
    def cuda_graphs(self) -> bool:
        return self.mode == REDUCE_OVERHEAD


def choose_compile(target: CompileTarget, plan: CompilePlan) -> CompileChoice:
    """Regional or whole, with or without CUDA graphs: the one rule, a pure function of the trial.

    CUDA graphs replay a recorded sequence of kernels, removing the per-kernel launch cost that
    dominates small steps (a 32x32 CoAtNet step is ~1.2 ms of GPU work against 4-7 ms of dispatch).
    They need CUDA, static shapes (always, here) and one process (DDP's collectives sit between the
    recorded kernels), and they pay off only where launches dominate: ``auto`` takes them for images
    of at most :data:`CUDA_GRAPHS_MAX_IMAGE` px. They record the whole model: per-block graphs would
    leave the stem, head and every launch between blocks outside.
    """
    why_not = None
    if target.device.type != "cuda":
        why_not = f"this trial runs on {target.device.type}"
    elif target.world_size > 1:
        why_not = f"this trial is data-parallel over {target.world_size} processes"
    small = target.image_size <= CUDA_GRAPHS_MAX_IMAGE
    if why_not is None and (plan.cuda_graphs is True or (plan.cuda_graphs == "auto" and small)):
        return CompileChoice("whole", REDUCE_OVERHEAD)
    note = f"training.cuda_graphs: true needs one CUDA process; {why_not}" if plan.cuda_graphs is True else None
    return CompileChoice(plan.scope, None, note)


class CompiledForward:
    """The model's forward as the trial runs it: compiled when asked (or ``auto`` decides), eager
    after a compile error. Notes for the trial's record go to ``notes`` (the trainer's list);
    :attr:`facts` holds what was decided as it was set up (compile threads, cache, ``auto``)."""

    def __init__(self, target: CompileTarget, plan: CompilePlan, notes: list[str]):
        self.target = target
        self.notes = notes
        self.facts: dict[str, Any] = {}
        self.skipped_because: str | None = None  # why compile: auto chose eager for this trial
        self.clock = CompileClock()  # every compile of this trial: training and no-grad graphs apart
        self._cache_dir: str | None = None  # set as the trial is set up to compile
        self._graphs_at_start = 0
        self._graphs_after_first_epoch: int | None = None  # graphs compiled by the end of epoch 1
        self._cache_counts_at_start: dict[str, int] = {}
        self._no_grad_before_training: float | None = None  # the cost measurement's share, left out
        self._recorded = False  # this node's compile ledger has this trial's measurement
        self._artifacts: SharedArtifacts | None = None  # the cluster's shared compile artifacts, if named
        self._artifacts_done = False  # this trial's artifacts saved (or found unnecessary)
        self.requested = self._wanted(plan)
        self.choice = choose_compile(target, plan)
        self._use_compiled = self.requested
        self._forward: Forward = target.model
        if self.requested:
            if self.choice.note:
                self.notes.append(self.choice.note)
            self._artifacts = self._shared_artifacts(plan.artifacts_dir)
            self._forward = self._compile(target.backend)
            self.facts.update(regional_compile=self.choice.scope == "regional", cuda_graphs=self.choice.cuda_graphs)

    # -- deciding and compiling ----------------------------------------------------------------
    def _wanted(self, plan: CompilePlan) -> bool:
        """Whether this trial compiles. When it may, Inductor is first set up for it (compile threads
        from the CPUs, the node's cache directory: :func:`trials.compilation.compile_cache.configure_compiler`);
        ``auto`` then applies :func:`trials.compilation.compile_cache.decide_auto` to what this node measured of
        the architecture, and a skip is said in the notes and the facts."""
        device_type = self.target.device.type
        if plan.setting is False or (plan.setting == "auto" and device_type not in compile_cache.AUTO_DEVICE_TYPES):
            return False
        facts = compile_cache.configure_compiler(plan.cpus)
        self._cache_dir = facts["compile_cache_dir"]
        self.facts.update(facts)
        if plan.setting != "auto":
            return True
        known = self._ledger().read(self.target.architecture_key())
        decision = compile_cache.decide_auto(device_type, known, plan.total_steps, plan.budget_share)
        self.facts.update(decision.facts())
        if not decision.compile:
            self.notes.append(decision.reason)
            self.skipped_because = decision.reason
        return decision.compile

    def _shared_artifacts(self, directory: str | None) -> SharedArtifacts | None:
        """The spec's shared artifacts directory, when it names one this user alone may write."""
        if directory is None:
            return None
        artifacts = SharedArtifacts(directory)
        problem = artifacts.usable()
        if problem is None:
            return artifacts
        note = f"training.compile_artifacts_dir not used: {problem}"
        warnings.warn(note, RuntimeWarning, stacklevel=3)
        self.notes.append(note)
        return None

    def _ledger(self) -> compile_cache.CompileLedger:
        return compile_cache.CompileLedger(self._cache_dir or compile_cache.cache_dir())

    def _compile(self, backend: str) -> Forward:
        """Compile the model as :attr:`choice` says, after clearing what earlier trials of this
        process compiled. Shapes are static (``dynamic=False``): a new batch size compiles a graph
        of its own, counted, instead of making every graph symbolic in the batch.

        Dynamo keeps a limited number of compiled variants per code object (``recompile_limit``,
        8), and every model of one class shares its ``forward``'s (every block shares
        ``nn.Module._call_impl``'s under regional compilation): in a reused Ray actor the cache
        fills after a few trials, and later ones silently run eagerly. Resetting per trial, and
        raising the limit to what this model's blocks can need, keeps each trial compiled;
        :attr:`graphs` counts what this trial really compiled.
        """
        torch.compiler.reset()  # Dynamo's in-memory state only: Inductor's on-disk caches stay
        self.clock.install()  # after the reset, which drops compile callbacks
        needed = variants_needed(self.target.model)
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, needed)
        dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4 * needed)
        self._graphs_at_start = dynamo_utils.counters["stats"]["unique_graphs"]
        if self._artifacts is not None:  # before compiling: another node's compile, if one was saved
            self.facts.update(self._artifacts.load(self.target.architecture_key()))
        self._cache_counts_at_start = compile_cache.cache_counts()
        model, mode = self.target.model, self.choice.mode
        try:
            if self.choice.scope == "regional" and compile_regions(model, backend=backend, mode=mode):
                return model
            return torch.compile(model, backend=backend, mode=mode, dynamic=False)
        except Exception as error:  # an unknown backend name is a config error, named as such
            uncompile_regions(model)
            raise ConfigError("training.compile_backend", f"{backend!r}: {str(error).splitlines()[0]}") from None

    # -- running -------------------------------------------------------------------------------
    def run(self, call: Callable[[Forward], Result]) -> Result:
        """``call(forward)`` through the compiled model; on a compile error, once more eagerly.

        Only compile errors fall back (forward, or the backward AOTAutograd compiles lazily at the
        first ``backward()``); an out-of-memory propagates as what it is. The eager retry happens
        after the ``except`` block, once the failed attempt's traceback, and with it its
        activations, are gone. A compiled call that failed updated nothing, so nothing runs twice.
        """
        if self._use_compiled:
            reason = None
            if self.choice.cuda_graphs:  # a new step: outputs of the previous replay may be overwritten
                torch.compiler.cudagraph_mark_step_begin()
            try:
                return call(self._forward)
            except Exception as error:
                if not is_compile_error(error):
                    raise
                reason = compile_failure_reason(error)
            self._failed(reason)
        return call(self.target.model)

    def _failed(self, reason: str) -> None:
        """torch.compile could not compile this model: run it eagerly, say so once, keep the note."""
        note = f"torch.compile failed ({reason}); the trial ran eagerly"
        warnings.warn(note, RuntimeWarning, stacklevel=3)
        self.notes.append(note)
        self._use_compiled = False
        uncompile_regions(self.target.model)
        self._forward = self.target.model
        release_memory(self.target.device)  # the failed attempt's buffers, before the eager retry allocates

    # -- what it compiled ----------------------------------------------------------------------
    @property
    def graphs(self) -> int:
        """Graphs torch.compile produced for this trial so far (0 when it ran eagerly)."""
        if not self.requested:
            return 0
        return int(dynamo_utils.counters["stats"]["unique_graphs"] - self._graphs_at_start)

    @property
    def recompiles(self) -> int:
        """Graphs compiled after the first epoch (its evaluation included): 0 when every shape and
        guard a trial meets was met in its first epoch, as it should be with static shapes."""
        if self._graphs_after_first_epoch is None:
            return 0
        return self.graphs - self._graphs_after_first_epoch

    @property
    def compiled(self) -> bool:
        """Whether this trial really ran compiled: asked for, no fallback, and at least one graph compiled."""
        return self._use_compiled and self.graphs > 0

    def training_starts(self) -> None:
        """Mark the start of training (once): what compiled without gradients before it (the cost
        measurement) is left out of ``eval_compile_s``."""
        if self._no_grad_before_training is None:
            self._no_grad_before_training = self.clock.seconds["no_grad"]

    def epoch_facts(self, train_images_per_s: float) -> dict[str, float]:
        """After an epoch of a compiling trial: its compile facts so far ({} when it does not compile).

        ``eval_compile_s``: the graphs compiled without gradients since training began (evaluation,
        BatchNorm recalibration; the compiled training step's own time is ``compile_s``);
        ``compile_total_s``: every compile of the trial, the cost measurement's included; the cache
        hits and misses of this trial. The first epoch that ran compiled also leaves this node's
        measurement of the architecture in the compile ledger, for ``compile: auto`` to read.
        """
        if not self.requested:
            return {}
        counts = self._cache_counts()
        before = self._no_grad_before_training or 0.0
        if self._graphs_after_first_epoch is None:
            self._graphs_after_first_epoch = self.graphs
        elif self.recompiles and not any(note.startswith(RECOMPILE_NOTE) for note in self.notes):
            self.notes.append(f"{RECOMPILE_NOTE} after the first epoch (a shape or guard changed)")
        facts = {
            "eval_compile_s": self.clock.seconds["no_grad"] - before,
            "compile_total_s": self.clock.total,
            "recompiles": self.recompiles,
        }
        self._remember(train_images_per_s, cold=counts["fxgraph_cache_misses"] > 0)
        self._share(compiled_new=counts["fxgraph_cache_misses"] > 0)
        return {**facts, **counts, **{k: v for k, v in self.facts.items() if k.startswith("compile_artifacts")}}

    def _share(self, compiled_new: bool) -> None:
        """After the first compiled epoch (training and evaluation graphs both compiled): save the
        architecture's artifacts for the cluster, unless they were loaded and nothing new compiled.
        A trial that loaded them yet compiled more replaces them with its fuller set."""
        if self._artifacts is None or self._artifacts_done or not self.compiled:
            return
        self._artifacts_done = True
        loaded = self.facts.get("compile_artifacts_loaded") == 1.0
        if loaded and not compiled_new:
            return
        self.facts.update(self._artifacts.save(self.target.architecture_key(), replace=loaded))

    def _cache_counts(self) -> dict[str, int]:
        """This trial's cache hits and misses: the process's counts less those at its compile."""
        counts = compile_cache.cache_counts()
        return {name: value - self._cache_counts_at_start.get(name, 0) for name, value in counts.items()}

    def _remember(self, train_images_per_s: float, cold: bool) -> None:
        """The first compiled epoch's measurement, into this node's ledger (once per trial)."""
        batch = self.target.batch_size
        if self._recorded or not self.compiled or not batch or train_images_per_s <= 0:
            return
        record = compile_cache.CompileRecord(self.clock.total, batch / train_images_per_s, cold=cold)
        self._ledger().write(self.target.architecture_key(), record)
        self._recorded = True


def compile_failure_reason(error: BaseException) -> str:
    """``Type: first line`` of a compile error, short enough for a note."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()] or [""]
    return f"{type(error).__name__}: {' '.join(lines[:2])[:200]}".rstrip(": ")
