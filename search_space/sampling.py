"""From a spec to configs: the Optuna define-by-run function, trial configs, and constraint checks.

Lives in an importable module (not ``__main__``) because Ray Tune pickles the searcher, and the
searcher holds :class:`SpaceFunction`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any

from trials.config.data_config import (
    DATA_CHANNELS,
    MIRROR_SYMMETRIC,
    NATIVE_IMAGE_SIZE,
    NUM_CLASSES,
    DataConfig,
    folder_classes,
    step_batch,
)
from trials.configio import ConfigError
from trials.devices.cpus import usable_cpus
from trials.models.build import resolve_config
from trials.models.config import CONFIG_CLASSES, ModelConfig, ModelConfigError, normalize_layout
from trials.models.presets import PRESETS

from .cost_model import estimate_cost
from .memory import MemoryBudget, host_memory, model_values, refuse_if_over, trial_memory
from .spec import ChoiceDomain, FixedDomain, FloatDomain, IntDomain, SearchSpec, param_target, parse_constraint


def _base_model(spec: SearchSpec) -> dict[str, Any]:
    if spec.base_model is None:
        return {"family": spec.family}
    if isinstance(spec.base_model, str):
        return {"preset": spec.base_model}
    return dict(spec.base_model)


def fixed_params(spec: SearchSpec) -> dict[str, Any]:
    """The spec's fixed parameters (``{fixed: v}`` and bare values), by name, in the spec's order."""
    return {name: domain.fixed for name, domain in spec.params.items() if isinstance(domain, FixedDomain)}


def with_fixed_params(spec: SearchSpec, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every fixed parameter of the spec applied.

    The one place a fixed value joins the sampled ones: the feasibility check, the searcher's
    duplicate key, the worker and the store all build the trial config through
    :func:`build_trial_config`, which calls this, so a fixed value cannot be priced on one side
    and dropped on the other. A value given for a fixed parameter must be the fixed value: a
    different one (an enqueued or resumed trial of another spec) is an error naming the key, never
    silently replaced.
    """
    merged = dict(params)
    for name, value in fixed_params(spec).items():
        if name in merged and not _same_value(merged[name], value):
            given = merged[name]
            raise ConfigError(f"params.{name}", f"is fixed at {value!r} by the spec, but the trial has {given!r}")
        merged[name] = value
    return merged


def _same_value(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def split_params(spec: SearchSpec, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A trial's parameter values as the store keeps them: ``{"sampled": ..., "fixed": ...}``.

    ``sampled`` holds the searched parameters' values (what Optuna proposed), ``fixed`` the spec's
    fixed ones applied beside them; keys of neither (the searcher's own) are left out.
    """
    fixed = fixed_params(spec)
    sampled = {name: params[name] for name in spec.params if name in params and name not in fixed}
    return {"sampled": sampled, "fixed": fixed}


_MISSING = object()


def config_value(spec: SearchSpec, config: dict[str, Any], name: str) -> Any:
    """The value a trial config holds at parameter ``name``'s target (``_MISSING`` where it holds none):
    a model field, one stage of a CoAtNet list (``depths[3]``), ``training.*``, ``data.*``, the seed,
    or the variant (the config's name)."""
    section, field, index = param_target(name, spec.family)
    if section == "variant":
        return config.get("name", _MISSING)
    if section == "seed":
        return config.get("seed", _MISSING)
    value = (config.get(section) or {}).get(field, _MISSING)
    if index is not None:
        return value[index] if isinstance(value, list) and index < len(value) else _MISSING
    return value


def params_of_config(spec: SearchSpec, config: dict[str, Any], names: Any = None) -> dict[str, Any]:
    """The values of the spec's parameters (or of ``names``) that a trial config holds."""
    found = {name: config_value(spec, config, name) for name in (spec.params if names is None else names)}
    return {name: value for name, value in found.items() if value is not _MISSING}


def config_mismatches(spec: SearchSpec, config: dict[str, Any]) -> list[str]:
    """Where a stored trial config disagrees with its study's spec: a fixed parameter with another
    value, or a searched one outside its domain. Empty for every trial this version writes; a study
    written by an archsearch that dropped fixed values (before issue 37) shows them here."""
    problems = []
    for name, domain in spec.params.items():
        if name == "variant":  # a bundle of overrides: its name is checked, its fields are the variant's
            continue
        value = config_value(spec, config, name)
        if value is _MISSING:
            problems.append(f"{name}: not in the trial config")
        elif isinstance(domain, FixedDomain) and not _same_value(value, domain.fixed):
            problems.append(f"{name}: {value!r}, the spec fixes {domain.fixed!r}")
        elif not isinstance(domain, FixedDomain) and not domain.contains(value):
            problems.append(f"{name}: {value!r} is outside the spec's domain")
    return problems


def build_trial_config(spec: SearchSpec, params: dict[str, Any], *, validate: bool = True) -> dict[str, Any]:
    """The trial config (a plain dict, as :func:`trials.config.trial_config.load_trial_config` takes) for
    sampled ``params`` with the spec's fixed parameters applied (see :func:`with_fixed_params`);
    the model part is validated here, so an invalid combination raises ConfigError naming
    ``model.<field>``.

    ``validate=False``: the same config without validating the model (nothing raises for the sampled
    values), for a proposal that does not build: it is stored ``infeasible`` with the config it would
    have trained, in the shape of a valid trial's (``model: {family, every field}`` with the sampled
    values applied), so every view reads it like any other trial. A value given for a fixed parameter
    is kept as given there (the stored config then shows the mismatch)."""
    params = with_fixed_params(spec, params) if validate else {**fixed_params(spec), **params}
    overrides: dict[str, Any] = {}  # model fields the variant and the sampled values set, in order
    training = dict(spec.training)
    data = dict(spec.data)
    staged: dict[str, dict[int, Any]] = {}
    seed = spec.search.seed
    for name, value in params.items():
        section, field, index = param_target(name, spec.family)
        if section == "variant":
            if value in spec.variants:
                overrides.update(spec.variants[value])
            elif validate:
                raise ConfigError("params.variant", f"unknown variant {value!r}; define it under variants:")
        elif section == "seed":
            seed = int(value) if validate else value
        elif index is not None:
            staged.setdefault(field, {})[index] = value
        elif section == "model":
            overrides[field] = value
        elif section == "training":
            training[field] = value
        else:
            data[field] = value
    if validate:
        resolved = _validated_model(spec, overrides, staged)
        image_size = resolved.image_size
    else:
        model = _unvalidated_model(spec, overrides, staged)
        image_size = model.get("image_size")
    if "seed" in params and "seed" not in spec.data:
        # A replicate seed also fixes the data (split, order, augmentation draws): every variant run
        # with the same seed sees the same data, so variants can be compared per seed (paired).
        data["seed"] = seed
    if data.get("name") == "imagefolder" and data.get("image_size") is None:
        # Files have no native size: the model's image size is the one size trained, priced and recorded.
        data["image_size"] = image_size
    _record_augmentation(data)
    if validate:  # the model the trial builds: its image size, channels and classes are the data's
        model = _shaped_by_data(resolved, data).to_dict()
    elif _readable_shape(data) and _plain_int(model.get("num_classes")):
        model.update(data_shape(data, model["num_classes"]))  # the same shape as a valid config's
    config = {"model": model, "data": data, "training": training, "seed": seed}
    if "variant" in params:
        config["name"] = str(params["variant"])
    if spec.measure:
        config["measure"] = dict(spec.measure)
    return config


def _record_augmentation(data: dict[str, Any]) -> None:
    """Write the dataset's default horizontal flip into ``data`` where the spec leaves it unset, so that
    every trial's record says which augmentation it trained with (:data:`MIRROR_SYMMETRIC`)."""
    augment = data.get("augment")
    if augment is not None and not isinstance(augment, dict):
        return  # not a mapping: the trial config's validation names it
    name = data.get("name", "synthetic")
    mirror = MIRROR_SYMMETRIC.get(name) if isinstance(name, str) else None
    if mirror is not None and (augment or {}).get("hflip") is None:
        data["augment"] = {**(augment or {}), "hflip": mirror}


def _plain_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _readable_shape(data: dict[str, Any]) -> bool:
    """Whether ``data`` names its shape with values of the right types; where it does not, the trial
    config's own validation names the bad data key (the model is left as the spec gives it)."""
    name = data.get("name", "synthetic")
    size = data.get("image_size")
    classes = data.get("num_classes", 10)
    return isinstance(name, str) and (size is None or _plain_int(size)) and (name != "synthetic" or _plain_int(classes))


def _shaped_by_data(model: ModelConfig, data: dict[str, Any]) -> ModelConfig:
    """``model`` at the image size, channels and classes ``data`` gives it (as the runner builds it)."""
    if not _readable_shape(data):
        return model
    try:
        return model.replace(**data_shape(data, model.num_classes))
    except ModelConfigError as error:
        field = error.field.split(".", 1)[1] if "." in error.field else error.field
        raise ConfigError(f"model.{field}", f"{error.message} (at the data's shape)") from None


def _validated_model(spec: SearchSpec, overrides: dict[str, Any], staged: dict[str, dict[int, Any]]) -> ModelConfig:
    model = {**_base_model(spec), **overrides}
    try:
        base = resolve_config(model)
        for field, entries in staged.items():
            values = list(getattr(base, field))
            for index, value in entries.items():
                if index >= len(values):
                    raise ModelConfigError(f"x.{field}[{index}]", f"stage index {index} out of range")
                values[index] = value
            model[field] = values
        resolved = resolve_config(model)
    except ModelConfigError as error:
        field = error.field.split(".", 1)[1] if "." in error.field else error.field
        raise ConfigError(f"model.{field}", error.message) from None
    if resolved.family != spec.family:
        raise ConfigError("base_model", f"is a {resolved.family} model but the spec's family is {spec.family}")
    return resolved


def _unvalidated_model(spec: SearchSpec, overrides: dict[str, Any], staged: dict[str, dict[int, Any]]) -> dict:
    """The model part of a config that does not build, as a valid one is stored: the base model's
    fields (validated, as every trial of the spec starts from them) with the overrides applied as given."""
    base = _base_model(spec)
    try:
        fields = resolve_config(base).to_dict()
    except ModelConfigError:  # the base alone does not build: its preset's or family's defaults, then its own keys
        fields = _default_fields(base)
        fields.update({key: value for key, value in base.items() if key != "preset"})
    for key, value in overrides.items():
        fields[key] = list(value) if isinstance(value, tuple) else value
    if isinstance(fields.get("layout"), str):
        with contextlib.suppress(ModelConfigError):
            fields["layout"] = normalize_layout(fields["layout"])  # "C-C-T-T" stored as a valid config has it
    for field, entries in staged.items():
        values = list(fields.get(field) or [])
        for index, value in entries.items():
            if index < len(values):
                values[index] = value
        fields[field] = values
    return fields


def _default_fields(base: dict[str, Any]) -> dict[str, Any]:
    preset = base.get("preset")
    if isinstance(preset, str) and preset in PRESETS:
        return PRESETS[preset].to_dict()
    family = base.get("family")
    cls = CONFIG_CLASSES.get(family) if isinstance(family, str) else None
    if cls is None:
        return {}
    fields: dict[str, Any] = {"family": family}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            fields[f.name] = list(f.default) if isinstance(f.default, tuple) else f.default
    return fields


def sampled_trial_config(spec: SearchSpec, params: dict[str, Any]) -> dict[str, Any]:
    """The config a proposal would train: validated where it builds, else :func:`build_trial_config`'s
    unvalidated form (what the searcher stores for an infeasible proposal)."""
    try:
        return build_trial_config(spec, params)
    except ConfigError:
        return build_trial_config(spec, params, validate=False)


def build_error(spec: SearchSpec, params: dict[str, Any]) -> ConfigError | None:
    """Why ``params``' config does not build, or None: the check :class:`SpaceFunction` makes of every
    proposal before pricing it (the trial config, and its model at the dataset's image size and classes)."""
    try:
        config = build_trial_config(spec, params)
        priced_model(config)
        check_memory(spec, config)
    except ConfigError as error:
        return error
    return None


def priced_model(trial_config: dict[str, Any]) -> ModelConfig:
    """The model a trial config builds, at its dataset's image size and classes (as the runner sets them)."""
    model = resolve_config(trial_config["model"])
    return model.replace(**data_shape(trial_config.get("data", {}), model.num_classes))


def check_memory(spec: SearchSpec, trial_config: dict[str, Any]) -> None:
    """:class:`ConfigError` where a CPU trial of this config cannot fit in its share of this machine's memory
    (:mod:`search_space.memory`, :func:`trials_at_once`): made infeasible before anything is built or
    dispatched. A GPU trial's limit is its device's, known where it runs: the worker checks it before building."""
    resources = spec.search.resources
    if resources.gpus > 0:
        return
    model = priced_model(trial_config)
    data = trial_config.get("data", {})
    batch = step_batch(
        data.get("name", DataConfig.name),
        int(data.get("batch_size", DataConfig.batch_size)),
        int(data.get("train_size", DataConfig.train_size)),
    )
    need = trial_memory(model, batch, resources.workers, "cpu", half_precision=False)
    refuse_if_over(need, trial_share(host_memory(), trials_at_once(spec)), model_values(model))


def trials_at_once(spec: SearchSpec) -> int:
    """How many CPU trials of the search run side by side on this machine: ``search.concurrency``, or fewer where
    its CPUs hold fewer (each trial takes ``search.resources.cpus`` of them)."""
    resources = spec.search.resources
    fit = math.floor(usable_cpus() / max(resources.cpus * resources.workers, 1e-9))
    return max(1, min(spec.search.concurrency, fit))


def trial_share(budget: MemoryBudget | None, at_once: int) -> MemoryBudget | None:
    """A trial's share of ``budget`` when ``at_once`` trials share it: eight trials of 9 GB each passed a 25 GB
    machine one at a time and needed 74 GB together."""
    if budget is None or at_once <= 1:
        return budget
    where = f"its 1/{at_once} share of {budget.where} ({at_once} trials at a time)"
    return MemoryBudget(budget.bytes // at_once, where)


def cost_violations(spec: SearchSpec, trial_config: dict[str, Any]) -> tuple[dict[str, int], list[float]]:
    """Closed-form cost of the config (at the dataset's image size and classes) and one violation
    per constraint (<= 0: satisfied), computed before anything is dispatched."""
    cost = estimate_cost(priced_model(trial_config))
    values = {"flops": cost.flops, "params": cost.params}
    violations = [parse_constraint(text).violation(values[parse_constraint(text).metric]) for text in spec.constraints]
    return values, violations


def data_shape(data: dict[str, Any], default_classes: int) -> dict[str, int]:
    """Image size, channels and class count a dataset gives a model (as the trial runner sets them),
    without loading the data: the cost model prices, and the store records, the model the trial will
    really build. An image folder's classes are its ``train/`` subfolders where this machine sees them (the model's
    head, so its params and FLOPs, depend on them), else ``default_classes``: the worker counts them as it reads."""
    name = data.get("name", "synthetic")
    classes = data.get("num_classes", 10) if name == "synthetic" else NUM_CLASSES.get(name, default_classes)
    if name == "imagefolder":
        classes = folder_classes(data.get("data_dir")) or default_classes
    size = data.get("image_size") or NATIVE_IMAGE_SIZE.get(name, 224)
    return {"image_size": size, "num_classes": classes, "in_chans": DATA_CHANNELS}


@dataclass(frozen=True)
class Feasibility:
    """What :class:`SpaceFunction` found of one sampled configuration, before anything runs."""

    cost: dict[str, Any] | None  # the closed-form cost model's estimate (None when it did not build)
    violations: list[float]  # one per spec constraint, <= 0 where met ([1.0] when it did not build)
    build_error: str | None = None

    @property
    def feasible(self) -> bool:
        return self.build_error is None and all(v <= 0 for v in self.violations)


class SpaceFunction:
    """Optuna define-by-run function compiled from a spec: suggests every searched parameter.

    It also prices the config with the closed-form cost model and hands the searcher the result in
    memory (``checked``, by trial number). Optuna's storage gets only what its sampler reads: the
    constraint values (``Trial.set_constraint``; the ``constraints`` user attribute that
    :func:`constraints_from_trial` reads on Optuna < 5), and for an infeasible trial why
    (``constraints``, ``estimated_cost``, ``build_error`` user attributes, for optuna-dashboard).
    Each of those is a write to the RDB storage, and a feasible trial of a spec without
    constraints needs none: the define-by-run step costs nothing beyond the sampled values.
    """

    def __init__(self, spec: SearchSpec):
        self.spec = spec
        self.checked: dict[int, Feasibility] = {}  # trial number -> its check, until the searcher takes it

    def suggest(self, trial) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for name, domain in self.spec.params.items():
            if isinstance(domain, IntDomain):
                low, high = domain.int
                params[name] = trial.suggest_int(name, low, high, step=domain.step, log=domain.log)
            elif isinstance(domain, FloatDomain):
                params[name] = trial.suggest_float(name, *domain.float, log=domain.log)
            elif isinstance(domain, ChoiceDomain):
                params[name] = trial.suggest_categorical(name, domain.choice)
            elif isinstance(domain, FixedDomain):
                params[name] = domain.fixed
        return params

    def check(self, params: dict[str, Any]) -> tuple[Feasibility, dict[str, float]]:
        """The config's feasibility, and its constraint values by name (as the sampler gets them)."""
        try:
            config = build_trial_config(self.spec, params)
            cost, violations = cost_violations(self.spec, config)
            check_memory(self.spec, config)
        except ConfigError as error:
            return Feasibility(None, [1.0], str(error)), {"buildable": 1.0}
        return Feasibility(cost, violations), dict(zip(self.spec.constraints, violations, strict=True))

    def __call__(self, trial) -> dict[str, Any]:
        """Suggest, check, and record the check (see the class docstring).

        Returns the fixed parameters: Ray Tune's OptunaSearch adds what a define-by-run function
        returns to the suggested values, so the config it dispatches names every parameter of the
        spec, the fixed ones included (the worker applies them again, and checks they agree).
        """
        feasibility, named = self.check(self.suggest(trial))
        self.__dict__.setdefault("checked", {})[trial.number] = feasibility  # (pickled by an older archsearch)
        legacy = not hasattr(trial, "set_constraint")  # Optuna < 5: constraints_func reads the user attribute
        for key, value in ({} if legacy else named).items():  # Optuna >= 5: the sampler reads these itself
            trial.set_constraint(key, value)
        if not feasibility.feasible or (legacy and self.spec.constraints):
            trial.set_user_attr("constraints", feasibility.violations)
        if not feasibility.feasible:
            if feasibility.cost is not None:
                trial.set_user_attr("estimated_cost", feasibility.cost)
            if feasibility.build_error is not None:
                trial.set_user_attr("build_error", feasibility.build_error)
        return fixed_params(self.spec)


def constraints_from_trial(frozen_trial) -> list[float]:
    """Optuna ``constraints_func``: the violations :class:`SpaceFunction` recorded (<= 0 feasible)."""
    return list(frozen_trial.user_attrs.get("constraints", [0.0]))


def discrete_space_size(spec: SearchSpec) -> int | None:
    """How many parameter combinations the space has (None when a float range makes it continuous);
    with ``search.grid``, how many distinct points its sub-grids hold together."""
    if spec.search.grid is not None:
        return len(grid_points(spec))
    size = 1
    for domain in spec.params.values():
        if isinstance(domain, FloatDomain):
            return None
        if isinstance(domain, ChoiceDomain):
            size *= len(domain.choice)
        elif isinstance(domain, IntDomain):
            size *= (domain.int[1] - domain.int[0]) // domain.step + 1
    return size


MAX_GRID_POINTS = 1_000_000  # a grid search's points are enumerated up front: bounded before they are built


def _candidate_count(name: str, domain: Any) -> int:
    if isinstance(domain, ChoiceDomain):
        return len(domain.choice)
    if isinstance(domain, FixedDomain):
        return 1
    if isinstance(domain, IntDomain):
        return (domain.int[1] - domain.int[0]) // domain.step + 1
    raise ConfigError(f"params.{name}", "a grid search needs choices or int ranges, not a float range")


def grid_size(spec: SearchSpec) -> int:
    """How many points a grid search of ``spec`` enumerates (with ``search.grid``: an upper bound, the
    sum of its sub-grids' sizes), computed without building any of them."""
    counts = {name: _candidate_count(name, domain) for name, domain in spec.params.items()}
    subgrids = spec.search.grid if spec.search.grid is not None else [{}]
    total = 0
    for subgrid in subgrids:
        size = 1
        for name, count in counts.items():
            chosen = subgrid.get(name)
            size *= len(chosen) if isinstance(chosen, (list, tuple)) else 1 if chosen is not None else count
        total += size
    return total


def grid_space(spec: SearchSpec) -> dict[str, list[Any]]:
    """The grid for Optuna's GridSampler: choices as given, int ranges enumerated by step."""
    grid: dict[str, list[Any]] = {}
    for name, domain in spec.params.items():
        if isinstance(domain, ChoiceDomain):
            grid[name] = list(domain.choice)
        elif isinstance(domain, FixedDomain):
            grid[name] = [domain.fixed]
        elif isinstance(domain, IntDomain):
            grid[name] = list(range(domain.int[0], domain.int[1] + 1, domain.step))
        else:
            raise ConfigError(f"params.{name}", "a grid search needs choices or int ranges, not a float range")
    return grid


def grid_points(spec: SearchSpec) -> list[dict[str, Any]]:
    """Every point a grid search visits, each once: the product of :func:`grid_space`, or with
    ``search.grid`` the union of its sub-grids (each one's values checked against the domain: a
    ConfigError naming ``search.grid[i].NAME`` otherwise)."""
    space = grid_space(spec)
    names = sorted(space)
    subgrids = spec.search.grid if spec.search.grid is not None else [{}]
    points: dict[tuple, dict[str, Any]] = {}
    for index, subgrid in enumerate(subgrids):
        for unknown in sorted(set(subgrid) - set(names)):
            raise ConfigError(f"search.grid[{index}].{unknown}", "is not a searched parameter under params:")
        values = {}
        for name in names:
            chosen = subgrid.get(name, space[name])
            where = f"search.grid[{index}].{name}"
            if not isinstance(chosen, list) or not chosen:
                raise ConfigError(where, "needs a non-empty list of values")
            for value in chosen:
                if not any(_same_value(value, allowed) for allowed in space[name]):
                    raise ConfigError(where, f"{value!r} is not in params.{name}'s domain")
            values[name] = chosen
        for combination in itertools.product(*(values[name] for name in names)):
            points.setdefault(tuple(map(repr, combination)), dict(zip(names, combination, strict=True)))
    return list(points.values())
