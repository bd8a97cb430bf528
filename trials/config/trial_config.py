"""What a trial is: model + data + training budget and settings + what to measure, as one config.

A trial config is plain data (YAML on disk, a dict from a search). :func:`load_trial_config`
validates it and names the offending key on error, e.g. ``training.lr: must be > 0, got -1``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from trials.config.data_config import MAX_BATCH_SIZE, DataConfig
from trials.configio import (
    ConfigError,
    check_declared,
    check_fields,
    flag,
    from_mapping,
    integer,
    is_number,
    number,
    one_of,
    require,
    seed_field,
    text,
    to_mapping,
)
from trials.errors import capped
from trials.models.build import resolve_config
from trials.models.config import CaiTConfig, CoAtNetConfig, ModelConfig, ModelConfigError
from trials.yaml_bounds import YamlDuplicateKey, YamlTooLarge, safe_load_bounded

Precision = Literal["auto", "fp32", "bf16", "fp16"]

# Budgets, bounded (the integer bound rule of trials.configio): a trial that asks for more would train
# until it is killed. 100,000 epochs and 10^9 optimiser steps are far beyond any study's.
MAX_EPOCHS = 100_000
MAX_STEPS = 10**9
MAX_MEASURE_REPEATS = 10_000  # measure.repeats and measure.warmup: timed calls
MAX_WORKERS = 1024  # distributed.workers: processes of one trial


@dataclass(frozen=True)
class TrainingConfig:
    """Optimiser, schedule and budget. The budget is ``epochs``, or ``steps`` when given.

    AdamW with linear warmup then cosine decay to ``min_lr``; weight decay skips norms, biases,
    LayerScale gains, positional/class tokens and relative-position tables (as timm does).
    """

    # searchable: a search space may vary the field by its bare name (search_space.spec.TRAINING_FIELDS).
    epochs: int = integer(10, 1, MAX_EPOCHS, "must be a positive integer", searchable=True)
    steps: int | None = integer(None, 1, MAX_STEPS, "must be a positive integer", optional=True, searchable=True)
    lr: float = number(1e-3, gt=0, searchable=True)
    min_lr: float = number(1e-5, ge=0, searchable=True)
    weight_decay: float = number(0.05, ge=0, searchable=True)
    warmup_epochs: float = number(1.0, ge=0, searchable=True)
    warmup_steps: int | None = integer(None, 0, MAX_STEPS, "must be a non-negative integer", optional=True)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = number(1.0, gt=0, optional=True, searchable=True)
    label_smoothing: float = number(0.1, ge=0, lt=1, searchable=True)
    # torch.compile the model: "auto" (on for CUDA when the model compiles, off on CPU), true, false.
    # On CUDA, "auto" runs eagerly when this node measured the architecture's compile (kernels cached)
    # at more than compile_budget_share of the trial's estimated training time (trials.compilation.compile_cache).
    compile: bool | Literal["auto"] = one_of("auto", (True, False, "auto"), "must be true, false or auto, got {value}")
    compile_budget_share: float = number(0.25, gt=0, le=1, must="must be a number in (0, 1]")
    # torch.compile backend when compiling (timm's --torchcompile takes the same names): "inductor"
    # generates kernels; "aot_eager"/"eager" trace without code generation (debugging, CPU tests).
    compile_backend: str = text("inductor", "must be a torch.compile backend name such as inductor, got {value}")
    # What torch.compile compiles, always with static shapes (trials.compilation.compiled_forward): "regional"
    # compiles each repeated block alone (one graph per distinct block, shared across depths; compile
    # time does not grow with depth), "whole" the model as one graph (fewest kernel launches).
    compile_scope: Literal["regional", "whole"] = one_of(
        "regional", ("regional", "whole"), "must be regional or whole, got {value}"
    )
    # CUDA graphs (torch.compile's "reduce-overhead": the whole model, replayed as one graph) for trials
    # whose steps are launch-bound: "auto" on one CUDA GPU when images are at most 64 px; true: wherever
    # possible (one CUDA process), said in the notes where not; false: never.
    cuda_graphs: bool | Literal["auto"] = one_of(
        "auto", (True, False, "auto"), "must be true, false or auto, got {value}"
    )
    # A directory every node reads (a shared file system): each architecture's compile artifacts are
    # saved there after its first compiled epoch, and a compiling trial anywhere loads them first
    # (trials.compilation.compile_artifacts). None: each node compiles for itself.
    compile_artifacts_dir: str | None = None
    # Divergence (a non-finite loss or gradient) is recorded on the device every step and checked
    # every this many steps and at the end of each epoch; None: every step on CPU (free there),
    # every 32 steps on CUDA (one host sync per check instead of one per step).
    divergence_check_every: int | None = integer(
        None, 1, MAX_STEPS, "must be a positive integer or null", optional=True
    )
    # Before each evaluation, recompute BatchNorm's statistics over the training split (no
    # augmentation, train mode, a cumulative average) and record the training loss in eval mode
    # (``train_eval_loss``). Running statistics lag the weights early in training (8% vs 96%
    # top-1 after one epoch on digits); comparisons read at a training loss need both.
    recalibrate_batchnorm: bool = flag(False)

    def __post_init__(self) -> None:
        """The declared rules, then what they cannot say: warmup within the budget, betas, the artifacts path."""
        check_declared(self)
        if self.steps is None:
            require(
                self.warmup_epochs <= self.epochs,
                "warmup_epochs",
                f"{self.warmup_epochs!r} is longer than the budget of {self.epochs} epochs",
            )
        elif self.warmup_steps is not None:
            require(
                self.warmup_steps <= self.steps,
                "warmup_steps",
                f"{self.warmup_steps!r} is longer than the budget of {self.steps} steps",
            )
        require(
            isinstance(self.betas, (tuple, list))
            and len(self.betas) == 2
            and all(is_number(b) and 0 <= b < 1 for b in self.betas),
            "betas",
            f"must be two numbers in [0, 1), got {self.betas!r}",
        )
        if self.compile_artifacts_dir is not None:
            require(
                isinstance(self.compile_artifacts_dir, str)
                and os.path.isabs(os.path.expanduser(self.compile_artifacts_dir)),
                "compile_artifacts_dir",
                f"must be an absolute path that every node reads, got {self.compile_artifacts_dir!r}",
            )


@dataclass(frozen=True)
class MeasureConfig:
    """Cost measurement before training: FLOPs (fvcore), inference throughput, batch-1 latency.

    ``batch_size`` None: the batch the trial trains with on one device (throughput at the size the
    trial runs, not a fixed 64). ``warmup`` None: 10 calls on a GPU, 2 on a CPU
    (``trials.measurement.measure.default_warmup``); the record states the number used.
    """

    flops: bool = flag(True)
    throughput: bool = flag(True)
    latency: bool = flag(True)
    batch_size: int | None = integer(None, 1, MAX_BATCH_SIZE, "must be a positive integer", optional=True)
    warmup: int | None = integer(None, 0, MAX_MEASURE_REPEATS, "must be >= 0", optional=True)
    repeats: int = integer(5, 1, MAX_MEASURE_REPEATS, "must be a positive integer")

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class DistributedConfig:
    """Data parallelism: the trial runs as ``workers`` processes, one rank each (DDP).

    ``data.batch_size`` stays the global batch: each rank trains on its contiguous share of every
    batch, so one process and N processes take the same optimiser steps. ``backend``: ``auto`` is
    ``nccl`` on CUDA and ``gloo`` on the CPU.
    """

    workers: int = integer(1, 1, MAX_WORKERS, "must be a positive integer")
    backend: Literal["auto", "nccl", "gloo"] = one_of(
        "auto", ("auto", "nccl", "gloo"), "must be auto, nccl or gloo; got {value}"
    )

    def __post_init__(self) -> None:
        check_declared(self)


MAX_THREADS = 1024  # torch's intra-op threads: any real machine has fewer
THREADS_RULE = f"must be an integer in 1..{MAX_THREADS} or null"  # one line for too few and too many


def trial_threads(trial: TrialConfig, device_type: str) -> int | None:
    """The intra-op threads ``trial`` runs with (None: leave torch's default; a GPU trial that names none)."""
    if trial.threads is not None:
        return trial.threads
    if trial.cpus is not None:
        return max(1, math.floor(trial.cpus))
    return 1 if device_type == "cpu" else None


@dataclass(frozen=True)
class TrialConfig:
    """One trial. ``model`` is a preset name, a model mapping (``family`` or ``preset`` key), or a config.

    The model's ``num_classes`` and ``image_size`` follow the dataset: they are set from the data
    when the trial runs, so one search space works on any dataset.
    """

    model: ModelConfig
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    seed: int = seed_field(0)
    device: str = text("auto", "must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
    precision: Precision = one_of("auto", ("auto", "fp32", "bf16", "fp16"))
    name: str | None = text(None, "must be a string or null, got {value}", optional=True, blank_ok=True)
    # Share of the GPU's memory this trial may use (several trials packed on one GPU): an
    # out-of-memory stays this trial's failure instead of killing a neighbour. None: all of it.
    gpu_memory_fraction: float | None = number(
        None, gt=0, le=1, must="must be a number in (0, 1] or null", optional=True
    )
    # A client of this node's CUDA MPS daemon (search.resources.mps): its kernels overlap the other
    # packed trials', and MPS's device-memory limit at gpu_memory_fraction is the hard cap (trials.devices.mps).
    mps: bool = flag(False)
    # CPUs allocated to this trial (Ray's assignment, or the spec's resources.cpus): DataLoader
    # processes never exceed it. None: the CPUs this process may run on.
    cpus: float | None = number(None, gt=0, must="must be a number > 0 or null", optional=True)
    # torch's intra-op CPU threads (torch.set_num_threads). A CPU result depends on it (a reduction
    # split over N threads sums in another order), so it is recorded with every trial and exported.
    # None: floor(cpus) (at least 1) when cpus is given, else 1 on the CPU, as a search's default
    # placement (resources.cpus: 1) runs; on a GPU, torch's own default.
    threads: int | None = integer(None, 1, MAX_THREADS, THREADS_RULE, optional=True, over=THREADS_RULE)
    # Several processes per trial (data-parallel); see DistributedConfig.
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    # Start from these model weights (a state dict: what ``archsearch export STUDY N --weights W.pt``
    # writes) instead of the initialisation: a fine-tune, the optimiser and its schedule starting
    # fresh. Loaded with weights_only=True after the model is built; every parameter and buffer must
    # match the model's by name and shape. A relative path in a YAML file is relative to that file.
    init_from: str | None = None

    def __post_init__(self) -> None:
        """The declared rules, then the model, mps's share, the weights path and the batch per worker."""
        require(isinstance(self.model, (CaiTConfig, CoAtNetConfig)), "model", "must be a model config")
        check_declared(self)
        if self.mps:
            require(
                self.gpu_memory_fraction is not None and self.gpu_memory_fraction < 1,
                "mps",
                "packs trials on a GPU: set gpu_memory_fraction to the trial's share (1/k)",
            )
        if self.init_from is not None:
            require(
                isinstance(self.init_from, str) and self.init_from.strip() != "" and "\x00" not in self.init_from,
                "init_from",
                f"must be the path of a weights file (archsearch export --weights), got {self.init_from!r}",
            )
        workers = self.distributed.workers
        if workers > 1:
            require(
                self.data.batch_size >= workers,
                "data.batch_size",
                f"the global batch ({self.data.batch_size}) must hold at least one image per worker ({workers})",
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-friendly dict; ``load_trial_config`` of it gives back an equal config."""
        out = {f.name: to_mapping(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "model"}
        if out.get("init_from") is None:  # a trial from its initialisation: as before the key existed
            out.pop("init_from", None)
        return {"model": self.model.to_dict(), **out}


def _model_from(value: Any) -> ModelConfig:
    try:
        return resolve_config(value)
    except ModelConfigError as error:
        # "CaiTConfig.embed_dim" -> "model.embed_dim": the user wrote the key under `model:`.
        field_name = error.field.split(".", 1)[1] if "." in error.field else error.field
        where = "model" if field_name in ("model", "") else f"model.{field_name}"
        raise ConfigError(where, error.message) from None


def load_trial_config(source: TrialConfig | Mapping[str, Any] | str | Path) -> TrialConfig:
    """Validate a trial config from a mapping or a YAML file; errors name the key path."""
    if isinstance(source, TrialConfig):
        return source
    if isinstance(source, (str, Path)):
        source = anchor_paths(read_yaml(source), Path(source).parent)
    if not isinstance(source, Mapping):
        raise ConfigError("", f"a trial config must be a mapping, got {type(source).__name__}")
    check_fields(TrialConfig, source, "")
    if "model" not in source:
        raise ConfigError("model", "is required (a preset name such as cait_tiny32, or a mapping with 'family')")
    values = dict(source)
    values["model"] = _model_from(values["model"])
    sections = (("data", DataConfig), ("training", TrainingConfig), ("measure", MeasureConfig))
    for key, cls in (*sections, ("distributed", DistributedConfig)):
        if key in values:
            values[key] = from_mapping(cls, values[key], key)
    data = values.get("data")
    if isinstance(data, DataConfig) and data.name == "imagefolder" and data.image_size is None:
        # Files have no native size: train at the model's image size (what it was configured and priced for).
        values["data"] = dataclasses.replace(data, image_size=values["model"].image_size)
    try:
        return TrialConfig(**values)
    except ConfigError as error:
        raise error.under("") from None


def anchor_paths(raw: Any, directory: str | Path) -> Any:
    """A trial config read from a YAML file in ``directory``, its relative ``init_from`` made relative
    to that file (an export's YAML names its weights file beside it, wherever the trial is run from).
    Anything else is returned as it is (the loader names what is wrong with it)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("init_from"), str) and raw["init_from"].strip():
        path = Path(raw["init_from"]).expanduser()
        anchored = str(path) if path.is_absolute() else os.path.abspath(Path(directory) / path)
        return {**raw, "init_from": anchored}
    return raw


MAX_CONFIG_BYTES = 1_000_000  # a spec or trial config is a page of YAML; anything larger is the wrong file


def read_yaml(path: str | Path) -> Any:
    """``yaml.safe_load`` a file, with one-line errors for a missing, oversized, binary or non-UTF-8
    file and for YAML syntax errors (line and column)."""
    path = Path(path)
    try:
        is_dir, exists, is_file = path.is_dir(), path.exists(), path.is_file()
        size = path.stat().st_size if is_file else 0
    except OSError as error:  # a name too long (ENAMETOOLONG), a loop of links, ...: the user's path
        raise ConfigError("", f"{capped(path)}: cannot look at the config file ({error.strerror or error})") from None
    if is_dir:
        raise ConfigError("", f"{capped(path)} is a directory, not a YAML config file")
    if exists and not is_file:  # a FIFO or a device would block or never end
        raise ConfigError("", f"{capped(path)} is not a regular file (a FIFO, a device?); a config is a YAML text file")
    if not is_file:
        raise ConfigError("", f"config file not found: {capped(path)}")
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            "", f"{path}: {size:,} bytes is too large for a YAML config (at most {MAX_CONFIG_BYTES:,}); wrong file?"
        )
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError("", f"{capped(path)}: cannot read the config file ({error.strerror or error})") from None
    if b"\x00" in raw:
        raise ConfigError("", f"{path}: not a text file (it contains NUL bytes); a config is a YAML text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            "", f"{path}: not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}); a config is YAML text"
        ) from None
    try:
        return safe_load_bounded(text)
    except (YamlTooLarge, YamlDuplicateKey) as error:
        raise ConfigError(error.key, f"{path}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError("", f"{path}: invalid YAML{where}: {getattr(error, 'problem', error)}") from None
    except RecursionError:
        raise ConfigError("", f"{path}: invalid YAML: nested too deeply") from None
