"""The search-space spec: a YAML file, validated with pydantic, with errors that name the key path.

```yaml
name: quickstart
family: coatnet
base_model: coatnet_tiny32          # the preset every sampled config starts from
data: {name: synthetic, num_classes: 10, train_size: 2000, val_size: 500, batch_size: 64}
training: {epochs: 3, lr: 2.0e-3}
params:                             # searched settings (model fields, training fields, per-stage entries)
  layout: {choice: [CCCC, CCCT, CCTT, CTTT]}
  "depths[3]": {int: [1, 3]}        # blocks of stage S3; "dims[2]" channels of S2
  lr: {float: [5.0e-4, 5.0e-3], log: true}
  drop_path_rate: 0.1               # a bare value is fixed
objectives: {top1: max, flops: min}
constraints: ["flops <= 2e8", "params <= 2e6"]
search: {sampler: nsga2, n_trials: 8, concurrency: 2, seed: 0}
```

Parameter names are stable (one name per setting, per-stage lists indexed ``depths[i]``) so
that TPE, GP, BoTorch and NSGA-II can model them jointly. Torch is never imported here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from trials.config.trial_config import MAX_EPOCHS, MAX_WORKERS, TrainingConfig
from trials.configio import MAX_INTEGER, MAX_SEED, ConfigError, is_int, searchable_fields, shown_int
from trials.models.config import CONFIG_CLASSES

OBJECTIVE_METRICS = (
    "top1",
    "top5",
    "best_top1",
    "eval_loss",
    "train_loss",
    "flops",
    "params",
    "throughput",
    "latency_ms",
)
COST_METRICS = ("flops", "params")  # known before training, from the closed-form cost model
# Training fields a search space may vary by bare name (``params: {lr: ...}``): those declared searchable.
TRAINING_FIELDS = searchable_fields(TrainingConfig)
_INDEXED = re.compile(r"^(?P<field>depths|dims)\[(?P<index>\d)\]$")
# The integer bound rule (trials.configio): every integer of a spec fits a signed 64-bit integer, a seed
# is below 2**32 (numpy's RandomState under Optuna's samplers), and every budget is at most its
# documented maximum; the free-form training/data/measure sections get the trial config's limits
# (epochs <= 100,000, steps <= 10^9, ...) when the spec's trial configs are validated.
MAX_TRIALS = 10**6  # search.n_trials (and what counts trials: initial_spread, warm_start.top, a plateau's window)
MAX_CONCURRENCY = 10_000  # search.concurrency: trials at a time
MAX_RETRIES = 100  # search.retries: of one failed trial
# The range rule for every resource number a trial asks Ray for (search.resources.cpus, .gpus; workers
# and concurrency are bounded integers): finite, and what Ray's fixed-point resources (1/10,000 units,
# int64) represent: a nonzero quantity of at least RAY_RESOURCE_UNIT (a smaller one would be scheduled
# as 0, or refused inside Ray after it started), at most MAX_CPUS_PER_PROCESS CPUs, and a GPU share
# packing at most MAX_TRIALS_PER_GPU trials. Checked when the spec is read, before Ray starts.
RAY_RESOURCE_UNIT = 1e-4
MAX_CPUS_PER_PROCESS = 1024
MAX_TRIALS_PER_GPU = 100


def ray_quantity(value: float, name: str, *, high: float) -> float:
    """``value`` if Ray can schedule it as ``name`` (see the range rule above), else ValueError saying why."""
    if not math.isfinite(value):
        raise ValueError(f"{value} is not a number Ray can schedule; give a finite {name}")
    if value != 0 and value < RAY_RESOURCE_UNIT:
        raise ValueError(f"{value:g} is below the smallest {name} Ray schedules ({RAY_RESOURCE_UNIT:g}): it would be 0")
    if value > high:
        raise ValueError(f"{value:g} {name} for one trial process is more than any node has; at most {high:g}")
    return value
_CONSTRAINT = re.compile(r"^\s*(?P<metric>[a-z_0-9]+)\s*(?P<op><=|>=|<|>)\s*(?P<bound>[-+0-9.eE_]+)\s*$")


class _Strict(BaseModel):
    # allow_inf_nan=False: the one rule that every float of a spec is finite (``.inf`` and ``.nan`` are
    # YAML floats: ``cpus: .inf`` once overflowed inside Ray, ``reduction_factor: .inf`` pruned every trial).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _integers_fit(cls, value: Any, info: ValidationInfo) -> Any:
        # The integer bound rule, for every field of the schema: a signed 64-bit integer at most
        # (a domain's bounds, a choice, a fixed value; the bounded fields say their own limit).
        stack = [value]
        while stack:
            item = stack.pop()
            if is_int(item) and not -MAX_INTEGER - 1 <= item <= MAX_INTEGER:
                raise ValueError(f"must fit a signed 64-bit integer (at most 2**63 - 1), got {shown_int(item)}")
            if isinstance(item, (list, tuple)):
                stack.extend(item)
        # the free-form sections (training, data, measure, variants) are mappings: the trial config's
        # rule names the key there (training.epochs: must be at most 100,000)
        return value


class IntDomain(_Strict):
    int: tuple[int, int]
    step: int = 1
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> IntDomain:
        low, high = self.int
        if low > high:
            raise ValueError(f"low {low} is above high {high}")
        if self.log and low < 1:
            raise ValueError("a log-scaled int range needs low >= 1")
        if self.step < 1:
            raise ValueError(f"step must be >= 1, got {self.step}")
        return self

    def candidates(self) -> list[Any]:
        return [self.int[0], self.int[1]]

    def contains(self, value: Any) -> bool:
        low, high = self.int
        is_int = isinstance(value, int) and not isinstance(value, bool)
        return is_int and low <= value <= high and (value - low) % self.step == 0


class FloatDomain(_Strict):
    float: tuple[float, float]
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> FloatDomain:
        low, high = self.float
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"bounds must be finite numbers, got [{low}, {high}]")
        if low > high:
            raise ValueError(f"low {low} is above high {high}")
        if self.log and low <= 0:
            raise ValueError("a log-scaled float range needs low > 0")
        return self

    def candidates(self) -> list[Any]:
        return [self.float[0], self.float[1]]

    def contains(self, value: Any) -> bool:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and self.float[0] <= value <= self.float[1]


class ChoiceDomain(_Strict):
    choice: list[Any] = Field(min_length=1)

    @field_validator("choice")
    @classmethod
    def _scalars(cls, value: list[Any]) -> list[Any]:
        # Optuna's categorical distributions take None, bool, int, float and str only.
        for i, item in enumerate(value):
            if item is not None and not isinstance(item, (bool, int, float, str)):
                raise ValueError(f"choice[{i}]: {item!r} is not a number, string, boolean or null")
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError(f"choice[{i}]: {item!r} is not a finite number")
        return value

    def candidates(self) -> list[Any]:
        return list(self.choice)

    def contains(self, value: Any) -> bool:
        return any(value == item and type(value) is type(item) for item in self.choice)


class FixedDomain(_Strict):
    fixed: Any

    def candidates(self) -> list[Any]:
        return [self.fixed]

    def contains(self, value: Any) -> bool:
        return value == self.fixed


def _domain_kind(value: Any) -> str | None:
    if isinstance(value, Mapping):
        return next((k for k in ("int", "float", "choice", "fixed") if k in value), None)
    return next((k for k in ("int", "float", "choice", "fixed") if hasattr(value, k)), None)


# Tagged by which key is present, so an error speaks about the domain the user wrote.
Domain = Annotated[
    Annotated[IntDomain, Tag("int")]
    | Annotated[FloatDomain, Tag("float")]
    | Annotated[ChoiceDomain, Tag("choice")]
    | Annotated[FixedDomain, Tag("fixed")],
    Discriminator(_domain_kind),
]


class EarlyStopping(_Strict):
    """Asynchronous successive halving. ``mode: pareto`` (MO-ASHA, the default with several
    objectives) ranks each rung on ``metric`` together with the objectives known before training;
    ``single`` is ASHA (Ray Tune's cutoff rule) on ``metric`` alone, which prunes the cheap end of a front;
    both judge at :meth:`rungs`."""

    metric: str = "top1"
    grace_period: int = Field(1, ge=1, le=MAX_EPOCHS)
    reduction_factor: float = Field(3.0, gt=1)
    mode: Literal["pareto", "single"] | None = None
    # A rung prunes only where this study's completed trials show that its ranking carries to the end
    # (tau's lower 95% bound >= 0.6 over >= 5 completed trials) and the rule there would stop none of the
    # completed trials' final front, and twins (the same architecture at other
    # training hyperparameters) never rank each other (harness.search.stop.rank_gate). false: plain
    # (MO-)ASHA, which on a table whose first epoch ranks at tau -0.17 pruned 60-80% of the true front.
    rank_gate: bool = True

    def rungs(self, epochs: int) -> list[int]:
        """The epochs at which a trial of ``epochs`` epochs is judged: grace, grace x rf, grace x rf^2,
        ... (rounded) below the last epoch, where every trial ends anyway. The one rung schedule: both
        modes' schedulers (harness.search.stop.early_stopping), the replay and dashboards.fidelity."""
        return rung_epochs(self.grace_period, self.reduction_factor, epochs)


def rung_epochs(grace_period: int, reduction_factor: float, max_t: int) -> list[int]:
    """:meth:`EarlyStopping.rungs` for given numbers."""
    rungs, epoch = [], float(grace_period)
    while epoch < max_t:
        rungs.append(round(epoch))
        epoch *= reduction_factor
    return sorted({rung for rung in rungs if rung < max_t})


class Resources(_Strict):
    """What one trial process asks Ray for, and how many processes a trial is.

    ``workers`` > 1: each trial runs data-parallel as that many processes (DDP), each with these
    CPUs and GPUs (``harness.search.worker.data_parallel``). ``gpus`` per process: 0 (the CPU, on any node),
    1, or 1/k to pack k trials on one GPU; a process uses one GPU, so more than one per process
    would sit idle (ask for workers instead), and a share that is not 1/k would strand the rest.
    """

    # strict: a number, never a boolean or a string (``cpus: true`` was one CPU, ``workers: "2"`` two).
    cpus: float = Field(1.0, gt=0, strict=True)
    gpus: float = Field(0.0, ge=0, strict=True)
    workers: int = Field(1, ge=1, le=MAX_WORKERS, strict=True)
    # Packed trials as clients of each GPU node's CUDA MPS daemon, so their kernels overlap instead of
    # time-slicing (trials.devices.mps); checked on every GPU node before the search starts.
    mps: bool = False

    @field_validator("cpus")
    @classmethod
    def _schedulable_cpus(cls, cpus: float) -> float:
        return ray_quantity(cpus, "cpus", high=MAX_CPUS_PER_PROCESS)

    @field_validator("gpus")
    @classmethod
    def _one_gpu_or_a_share(cls, gpus: float) -> float:
        ray_quantity(gpus, "gpus", high=math.inf)
        if 0 < gpus < 1 / MAX_TRIALS_PER_GPU:
            raise ValueError(
                f"{gpus:g} of a GPU packs more than {MAX_TRIALS_PER_GPU} trials on one; the smallest share is "
                f"{1 / MAX_TRIALS_PER_GPU:g}"
            )
        if gpus > 1:
            raise ValueError(
                f"{gpus:g} GPUs for one process, which uses one: ask for workers: {math.ceil(gpus)} "
                "with gpus: 1 (a data-parallel trial, one GPU per process)"
            )
        if 0 < gpus < 1 and abs(gpus * round(1 / gpus) - 1) > 1e-3:
            raise ValueError(
                f"{gpus:g} is not a share that packs: use 1/k of a GPU (0.5, 0.333, 0.25, ...) so that k trials fill it"
            )
        return gpus

    @model_validator(mode="after")
    def _mps_packs(self) -> Resources:
        if self.mps and not 0 < self.gpus < 1:
            raise ValueError(
                f"mps: true with gpus: {self.gpus:g}: MPS overlaps trials packed on one GPU; use gpus: 1/k "
                "(0.5, 0.25, ...), or mps: false"
            )
        return self

    @model_validator(mode="after")
    def _whole_gpus_for_ranks(self) -> Resources:
        if self.workers > 1 and 0 < self.gpus < 1:
            raise ValueError(
                f"gpus: {self.gpus:g} with workers: {self.workers}: the ranks of a data-parallel trial need a "
                "GPU each (NCCL cannot run two ranks on one GPU); use gpus: 1, or workers: 1 to pack trials"
            )
        return self


class HypervolumePlateau(_Strict):
    """End the study when the front stops moving: the hypervolume gained less than ``min_gain``
    (a fraction) over the last ``window`` completed trials (see harness.search.stop.rules)."""

    window: int = Field(50, ge=1, le=MAX_TRIALS)
    min_gain: float = Field(0.001, ge=0, allow_inf_nan=False)


class StopRules(_Strict):
    """When a search ends before ``n_trials``: a flat front, or a wall-clock budget."""

    hypervolume_plateau: HypervolumePlateau | None = None
    max_hours: float | None = Field(None, gt=0)


class WarmStart(_Strict):
    """Start from an earlier study: its Pareto front and up to ``top`` best completed trials are
    the first trials proposed (see harness.search.propose.warm_start)."""

    study: str = Field(min_length=1)
    store: str | None = None  # default: the store this search writes to
    top: int = Field(0, ge=0, le=MAX_TRIALS)
    reuse_results: bool = False  # an identical trial config (data, budget, seed): copy, do not retrain


class MlflowTracking(_Strict):
    """Where MLflow records the search: one run per trial (its params and every epoch's metrics)."""

    tracking_uri: str = Field(min_length=1)  # file:./mlruns, sqlite:///mlflow.db, https://HOST, postgresql://...
    experiment: str | None = Field(None, min_length=1)  # default: the study's name


class Track(_Strict):
    """Experiment trackers beside the store (the optional ``track`` extra), through Ray Tune's own
    logger callbacks (harness.search.record.trackers): ``mlflow`` sends each trial to an MLflow tracking store,
    ``tensorboard`` writes TensorBoard event files into each trial's directory under the results dir."""

    mlflow: MlflowTracking | None = None
    tensorboard: bool = False


class SearchSettings(_Strict):
    sampler: Literal["tpe", "gp", "botorch", "nsga2", "random", "grid"] = "tpe"
    n_trials: int = Field(8, ge=1, le=MAX_TRIALS)
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY, strict=True)
    seed: int = Field(0, ge=0, le=MAX_SEED)  # Optuna's samplers seed numpy's RandomState: 0..2**32 - 1
    resources: Resources = Resources()
    early_stopping: EarlyStopping | None = None
    retries: int = Field(1, ge=0, le=MAX_RETRIES)
    stop: StopRules = StopRules()
    warm_start: WarmStart | None = None
    # the first K trials at evenly spaced quantiles of the priced cost objective
    # (harness.search.propose.initial_design);
    # None: min(8, n_trials // 2) where there is a priced objective and neither a grid nor a warm start, else none
    initial_spread: int | None = Field(None, ge=0, le=MAX_TRIALS)
    # re-measure the front alone at the end (archsearch verify, on a whole GPU of the cluster);
    # None: on when trials are packed (0 < resources.gpus < 1: their in-trial throughput was timed
    # beside their neighbours'), off otherwise. Read it as ``verifies_front``.
    verify_front: bool | None = None
    # sampler grid only: the union of these sub-grids (param -> values) is searched instead of the
    # whole product of params, e.g. more seeds for two variants than for the rest; a param a
    # sub-grid leaves out takes every value of its domain there
    grid: list[dict[str, list[Any]]] | None = Field(None, min_length=1)
    # What stays of the trial checkpoints when the study completes: false (the default) removes them
    # all; true keeps every trial's last one; "front" keeps the final weights of the study's Pareto
    # front alone (``archsearch export STUDY N --weights W.pt`` then starts a fine-tune from them).
    # true and "front" also checkpoint each trial's last epoch (harness.search.checkpoints).
    keep_checkpoints: bool | Literal["front"] = False
    # A trial's checkpoint (model and optimiser state: ~0.5 GB for CaiT-S24) is written after an epoch
    # once at least ``checkpoint_every`` epochs and ``checkpoint_min_interval_s`` seconds have passed
    # since its last one (or its start): short epochs need not write one each. A retried trial
    # resumes from its last checkpoint. The defaults write one every epoch.
    checkpoint_every: int = Field(1, ge=1, le=MAX_EPOCHS)
    checkpoint_min_interval_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    # The store is archsearch's record; a team that follows its runs in MLflow or TensorBoard gets
    # them there too, without a second logging path: Ray Tune's MLflow and TensorBoard callbacks.
    # Off by default (each logger costs the driver time per result, and a file or a server per trial).
    track: Track = Track()

    @field_validator("keep_checkpoints", mode="before")
    @classmethod
    def _keep_checkpoints_word(cls, value: Any) -> Any:
        if value is True or value is False or value == "front":
            return value
        raise ValueError(f"must be false, true or front, got {value!r}")

    @property
    def verifies_front(self) -> bool:
        """``verify_front`` as it applies: when unset, whether the trials are packed on GPUs."""
        if self.verify_front is not None:
            return self.verify_front
        return 0 < self.resources.gpus < 1


class SearchSpec(_Strict):
    name: str = Field(min_length=1)
    family: Literal["cait", "coatnet"]
    base_model: str | dict[str, Any] | None = None
    # `dataset` is accepted as another name for `data` (the trial config's key).
    data: dict[str, Any] = Field(
        default_factory=lambda: {"name": "synthetic"}, validation_alias=AliasChoices("data", "dataset")
    )
    training: dict[str, Any] = Field(default_factory=dict)
    measure: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Domain] = Field(default_factory=dict)
    # Named bundles of model overrides, searched with `variant: {choice: [...]}` (e.g. matched-size
    # layouts whose block counts and widths differ per layout).
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    objectives: dict[str, Literal["max", "min"]]
    constraints: list[str] = Field(default_factory=list)
    search: SearchSettings = SearchSettings()

    @field_validator("params", mode="before")
    @classmethod
    def _bare_values_are_fixed(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                k: v if isinstance(v, Mapping) and set(v) & {"int", "float", "choice", "fixed"} else {"fixed": v}
                for k, v in value.items()
            }
        return value

    @field_validator("params")
    @classmethod
    def _seeds_are_seeds(cls, params: dict[str, Any]) -> dict[str, Any]:
        # a searched or fixed ``seed`` is the trial's seed: 0..2**32 - 1, as search.seed
        domain = params.get("seed")
        values = domain.int if isinstance(domain, IntDomain) else domain.candidates() if domain is not None else ()
        for value in values:
            if not (is_int(value) and 0 <= value <= MAX_SEED):
                raise ValueError(f"seed: a trial's seed is an integer in 0..{MAX_SEED:,} (2**32 - 1), got {value!r}")
        return params

    @field_validator("objectives")
    @classmethod
    def _known_objectives(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("at least one objective is needed, e.g. {top1: max}")
        for metric in value:
            if metric not in OBJECTIVE_METRICS:
                raise ValueError(f"unknown metric {metric!r}; use one of {', '.join(OBJECTIVE_METRICS)}")
        return value

    @property
    def directions(self) -> list[str]:
        return ["maximize" if d == "max" else "minimize" for d in self.objectives.values()]


class Constraint(BaseModel):
    metric: str
    op: str
    bound: float

    def violation(self, value: float) -> float:
        """<= 0 when satisfied (Optuna's convention for ``constraints_func``)."""
        return value - self.bound if self.op in ("<=", "<") else self.bound - value


def parse_constraint(text: str, where: str = "constraints") -> Constraint:
    """``"flops <= 2e9"`` -> Constraint; a ConfigError at ``where`` otherwise."""
    match = _CONSTRAINT.match(str(text))
    if not match:
        raise ConfigError(where, f"{text!r} is not a constraint like 'flops <= 2e9'")
    metric = match["metric"]
    if metric not in COST_METRICS:
        raise ConfigError(
            where, f"{metric!r} cannot be checked before training; constraints use {', '.join(COST_METRICS)}"
        )
    try:
        bound = float(match["bound"])
    except ValueError:
        raise ConfigError(where, f"{match['bound']!r} is not a number") from None
    return Constraint(metric=metric, op=match["op"], bound=bound)


def _error_path(location: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in location:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        elif item in ("int", "float", "choice", "fixed") and parts and parts[0] == "params" and len(parts) == 2:
            continue  # the union tag: the field below it names the key the user wrote
        elif "function-" in str(item):
            continue
        else:
            parts.append(str(item))
    return ".".join(parts)


def param_target(name: str, family: str) -> tuple[str, str, int | None]:
    """Where a searched parameter goes: ("model" | "training" | "data", field, stage index or None);
    ``variant`` selects a bundle of model overrides and ``seed`` the trial's seed (replicates)."""
    if name in ("variant", "seed"):
        return name, name, None
    if "." in name:
        section, _, field = name.partition(".")
        if section in ("model", "training", "data"):
            return section, field, None
    indexed = _INDEXED.match(name)
    if indexed and family == "coatnet":
        return "model", indexed["field"], int(indexed["index"])
    model_fields = {f.name for f in dataclasses.fields(CONFIG_CLASSES[family])}
    if name in model_fields:
        return "model", name, None
    if name in TRAINING_FIELDS:
        return "training", name, None
    raise ConfigError(
        f"params.{name}",
        f"unknown parameter for family {family}: use a model field ({', '.join(sorted(model_fields))}), "
        f"a training field ({', '.join(TRAINING_FIELDS)}), 'depths[i]'/'dims[i]' (coatnet) or 'data.KEY'",
    )
