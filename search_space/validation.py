"""Checks a spec must pass before anything is dispatched or written: the whole spec "compiles".

A spec error that every trial would hit (``training.epochs: 0``, ``data.name: imagenet``) must be
reported once, at the key that causes it, not as a study full of failed or infeasible trials.
So :func:`check_spec` builds the trial configs of the search space's corners (every domain at its
low end, then at its high end) and validates them as a trial would, tries the space on the base
model (:mod:`search_space.buildable`: a value that never builds is refused, a part of the space that
does not build is one warning line), checks the early-stopping
settings against the budget and the metrics a trial reports, and prices a sample of the space
with the closed-form cost model to make sure the constraints leave something to search.
Standard library, pydantic and the torch-free config modules only: nothing here imports torch.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import warnings
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from trials.config.trial_config import load_trial_config, read_yaml
from trials.configio import ConfigError
from trials.errors import capped

from .buildable import Buildability, PartlyInvalidSpace, buildability, show
from .sampling import MAX_GRID_POINTS, build_error, build_trial_config, cost_violations, grid_points, grid_size
from .spec import (
    _INDEXED,
    ChoiceDomain,
    FixedDomain,
    FloatDomain,
    IntDomain,
    SearchSpec,
    _error_path,
    param_target,
    parse_constraint,
)
from .url_secrets import has_userinfo_password, secret_parts, secret_query_keys

# Metrics a trial reports after every epoch, which a scheduler (ASHA) can compare across trials.
PER_EPOCH_METRICS = ("top1", "top5", "eval_loss", "train_loss")
FEASIBILITY_SAMPLES = 200  # random configs priced (besides the corners) to find one that meets the constraints


def check_spec(spec: SearchSpec, *, check_paths: bool = True) -> None:
    """Raise :class:`ConfigError` (naming the spec key) for anything that would fail every trial.

    ``check_paths``: also require on-disk datasets' ``data_dir`` to exist here (off when the
    trials run on a cluster whose workers may see paths this machine does not).
    """
    check_base_config(spec, check_paths=check_paths)
    check_buildable(spec)
    check_early_stopping(spec)
    check_stop_rules(spec)
    check_warm_start(spec)
    check_track(spec)
    check_sampler_installed(spec.search.sampler)
    check_grid(spec)
    check_constraints_leave_something(spec)


def corner(spec: SearchSpec, end: str) -> dict[str, Any]:
    """Every searched parameter at its ``"low"`` or ``"high"`` end (first or last choice)."""
    values: dict[str, Any] = {}
    for name, domain in spec.params.items():
        if isinstance(domain, FixedDomain):
            values[name] = domain.fixed
        elif isinstance(domain, IntDomain):
            values[name] = domain.int[0] if end == "low" else domain.int[1]
        elif isinstance(domain, FloatDomain):
            values[name] = domain.float[0] if end == "low" else domain.float[1]
        elif isinstance(domain, ChoiceDomain):
            values[name] = domain.choice[0] if end == "low" else domain.choice[-1]
    return values


def _spec_key(spec: SearchSpec, field: str) -> str:
    """Where in the spec the user wrote the setting a trial-config error names."""
    section, _, rest = field.partition(".")
    if section == "seed":
        return "search.seed"
    if section == "model":
        return f"base_model.{rest}" if isinstance(spec.base_model, dict) and rest else "base_model"
    return field


BASE_CONFIG_SAMPLES = 20  # random configs validated besides the two corners


def check_base_config(spec: SearchSpec, *, check_paths: bool = True) -> None:
    """No setting makes every trial config invalid.

    The configs at the space's two corners and a few random ones are built and validated as a
    trial would validate them (torch-free). An error on a key that every one of them hits
    (``training.epochs: 0``, ``data.name: imagenet``) is reported at that key; errors that only
    some samples hit depend on the sampled values. Where only the model failed, :func:`check_buildable`
    (which tries the whole space) says which value, combination or key.
    """
    rng = random.Random(spec.search.seed)
    samples = [corner(spec, "low"), corner(spec, "high")]
    samples += [_random_params(spec, rng) for _ in range(BASE_CONFIG_SAMPLES)]
    failures: list[ConfigError] = []
    for params in samples:
        try:
            trial = load_trial_config(build_trial_config(spec, params))
        except ConfigError as error:
            failures.append(error)
            continue
        if check_paths:
            check_data_dir(trial.data)
        return  # a valid config exists: whatever else fails depends on the sampled values
    fields = {error.field for error in failures}
    if all(f.startswith("model.") or f == "model" for f in fields):
        return  # the model alone failed: check_buildable says which value, combination or key
    if len(fields) == 1:  # every sample fails on the same key: no sampled value can fix it
        error = failures[0]
        raise ConfigError(_spec_key(spec, error.field), error.message)
    # different keys, but nothing valid at all: say what the first sample hit
    error = next(e for e in failures if not e.field.startswith("model"))
    raise ConfigError(_spec_key(spec, error.field), error.message)


def check_data_dir(data: Any, *, search: bool = True) -> None:
    """An on-disk dataset's ``data_dir`` is a directory here (a file or a FIFO is named as such), and
    an image folder has its splits: checked before a search dispatches or ``archsearch trial`` runs,
    so a wrong path is the user's one-line error (exit 2), not a failed trial."""
    if data.data_dir is None or data.download:
        return
    try:
        path = Path(data.data_dir).expanduser()
        is_dir = path.is_dir()
        splits = {split: (path / split).is_dir() for split in ("train", "val")} if is_dir else {}
    except (OSError, RuntimeError) as error:  # a name too long (ENAMETOOLONG), a loop, ~nobody: the user's path
        why = getattr(error, "strerror", None) or error
        raise ConfigError("data.data_dir", f"cannot look at {capped(data.data_dir)} ({why})") from None
    if not is_dir:
        what = "does not exist" if not os.path.lexists(path) else "is not a directory (a file, a FIFO, a device?)"
        raise ConfigError(
            "data.data_dir",
            f"{capped(data.data_dir)} {what} on this machine"
            + (" (with --address, workers check it themselves)" if search else ""),
        )
    if data.name == "imagefolder":  # both splits before anything is dispatched, not after 3 failed trials
        if not splits["train"]:
            raise ConfigError("data.data_dir", f"{capped(path)} has no train/ folder (train/<class>/<image> files)")
        if data.val_fraction == 0 and not splits["val"]:
            raise ConfigError(
                "data.data_dir",
                f"{capped(path)} has no val/ folder: add val/<class>/<image> files, or set data.val_fraction "
                "(e.g. 0.1) to hold out part of train/",
            )


def check_early_stopping(spec: SearchSpec) -> None:
    """ASHA's metric is reported every epoch, and its grace period fits in the budget."""
    es = spec.search.early_stopping
    if es is None:
        return
    if es.metric not in PER_EPOCH_METRICS:
        raise ConfigError(
            "search.early_stopping.metric",
            f"{es.metric!r} is not reported every epoch; early stopping compares trials on one of "
            f"{', '.join(PER_EPOCH_METRICS)}",
        )
    epochs = spec.training.get("epochs", 10)
    if "steps" not in spec.training and isinstance(epochs, int) and es.grace_period > epochs:
        raise ConfigError(
            "search.early_stopping.grace_period",
            f"{es.grace_period} is longer than the budget of {epochs} epochs: no trial could ever be stopped",
        )


def check_stop_rules(spec: SearchSpec) -> None:
    """A plateau rule needs 1 to 3 objectives (exact hypervolume) and a window the budget can fill."""
    plateau = spec.search.stop.hypervolume_plateau
    if plateau is None:
        return
    if len(spec.objectives) > 3:
        raise ConfigError(
            "search.stop.hypervolume_plateau",
            f"needs 1 to 3 objectives (the hypervolume is computed exactly); the spec has {len(spec.objectives)}",
        )
    if plateau.window >= spec.search.n_trials:
        raise ConfigError(
            "search.stop.hypervolume_plateau.window",
            f"{plateau.window} is not below n_trials {spec.search.n_trials}: the plateau could never be seen",
        )


def check_grid(spec: SearchSpec) -> None:
    """A grid search's size is counted before any point is built and bounded
    (:data:`search_space.sampling.MAX_GRID_POINTS`); ``search.grid`` (a union of sub-grids) is the grid
    sampler's, and names only searched parameters and values inside their domains."""
    if spec.search.sampler == "grid":
        size = grid_size(spec)
        if size > MAX_GRID_POINTS:
            raise ConfigError(
                "search.sampler",
                f"grid: {size:,} points is more than {MAX_GRID_POINTS:,} (every point is enumerated up front); "
                "narrow the params, list the points under search.grid, or use tpe",
            )
    if spec.search.grid is None:
        return
    if spec.search.sampler != "grid":
        raise ConfigError("search.grid", f"lists grid points, but search.sampler is {spec.search.sampler!r}: use grid")
    grid_points(spec)


def check_warm_start(spec: SearchSpec) -> None:
    """The spec is stored with the study: a warm start's store URL must carry no password."""
    warm = spec.search.warm_start
    if warm is None:
        return
    if warm.store is None and warm.study == spec.name:
        raise ConfigError("search.warm_start.study", f"{warm.study!r} is this study; name an earlier one")
    hidden = secret_parts(warm.store) if warm.store is not None else []
    if hidden:
        raise ConfigError(
            "search.warm_start.store",
            f"carries {hidden[0]}, which would be stored with the spec (every part of a URL may hold a "
            "secret); give a password through PGPASSWORD or ~/.pgpass",
        )


TRACK_EXTRA = "needs the 'track' extra: pip install 'archsearch[track]'"
# What a sampler from an optional extra needs installed, and the line that names the extra
SAMPLER_EXTRAS = {"botorch": (("optuna_integration", "botorch", "gpytorch"), "pip install 'archsearch[botorch]'")}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # imported already, by a loader that leaves its __spec__ unset (optuna_integration's)
        return True


def check_sampler_installed(sampler: str) -> None:
    """A sampler of an optional extra (``botorch``) is installed: else one line naming the extra."""
    modules, install = SAMPLER_EXTRAS.get(sampler, ((), ""))
    missing = [module for module in modules if not _installed(module)]
    if missing:
        raise ConfigError(
            "search.sampler", f"{sampler!r} needs the {sampler!r} extra ({missing[0]} is not installed): {install}"
        )


def tracking_secret_route(uri: str) -> str | None:
    """How the password of an MLflow tracking URI reaches MLflow without being stored with the spec.

    ``"mlflow"``: a tracking server (http, https), user and password through MLflow's
    ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``; ``"libpq"``: a PostgreSQL database
    (any driver), the password through ``PGPASSWORD`` as the store's; ``None``: no password.
    A password elsewhere (another database, a query string of a server URL) has no such route:
    :func:`check_track` refuses it. harness.search.record.trackers does the handing over.
    """
    try:
        parts = urlsplit(uri)
        password = parts.password
    except ValueError as error:  # e.g. an unclosed IPv6 bracket
        raise ConfigError("search.track.mlflow.tracking_uri", f"is not a URL: {error}") from None
    scheme = parts.scheme.lower()
    others = [key for key in secret_query_keys(uri) if key.lower() != "password"]
    if others:  # every part of a URL may hold a secret: only a password has a route around the spec
        raise ConfigError(
            "search.track.mlflow.tracking_uri",
            f"carries query parameter {others[0]!r}, which may hold a secret and would be stored with the spec",
        )
    queried = any(key.lower() == "password" for key in secret_query_keys(uri))  # a reading past '#' too
    if password is None and has_userinfo_password(uri):
        password = ""  # a password only SQLAlchemy sees (``u:p/x@h``): refused or routed, never left in
    if scheme.split("+")[0] == "postgresql" and (password is not None or queried):
        return "libpq"
    if scheme in ("http", "https") and password is not None and not queried:
        return "mlflow"
    if password is not None or queried:
        raise ConfigError(
            "search.track.mlflow.tracking_uri",
            "carries a password, which would be stored with the spec; archsearch hands one over only for "
            "http(s) servers (MLFLOW_TRACKING_PASSWORD) and PostgreSQL (PGPASSWORD): give it through the "
            "database driver's own settings",
        )
    return None


def check_track(spec: SearchSpec) -> None:
    """The trackers the spec asks for are installed, and a tracking URI's password has a way to MLflow
    that keeps it off the stored spec (checked before anything is written)."""
    track = spec.search.track
    if track.mlflow is not None:
        if importlib.util.find_spec("mlflow") is None:
            raise ConfigError("search.track.mlflow", TRACK_EXTRA)
        tracking_secret_route(track.mlflow.tracking_uri)
    if track.tensorboard and importlib.util.find_spec("tensorboardX") is None:
        raise ConfigError("search.track.tensorboard", TRACK_EXTRA)


def _random_params(spec: SearchSpec, rng: random.Random) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, domain in spec.params.items():
        if isinstance(domain, FixedDomain):
            values[name] = domain.fixed
        elif isinstance(domain, IntDomain):
            low, high = domain.int
            if domain.log:
                value = round(math.exp(rng.uniform(math.log(low), math.log(high))))
                values[name] = min(high, max(low, low + (value - low) // domain.step * domain.step))
            else:
                values[name] = rng.randrange(low, high + 1, domain.step)
        elif isinstance(domain, FloatDomain):
            low, high = domain.float
            if domain.log:
                values[name] = math.exp(rng.uniform(math.log(low), math.log(high)))
            else:
                values[name] = rng.uniform(low, high)
        elif isinstance(domain, ChoiceDomain):
            values[name] = rng.choice(domain.choice)
    return values


def check_constraints_leave_something(spec: SearchSpec) -> None:
    """At least one config of the space meets every constraint (closed-form cost, no model built).

    The corners and :data:`FEASIBILITY_SAMPLES` random configs are priced; if none is feasible,
    the error names the constraint that excluded the most of them and the best value the space
    reached for its metric.
    """
    if not spec.constraints:
        return
    constraints = [parse_constraint(text, f"constraints[{i}]") for i, text in enumerate(spec.constraints)]
    rng = random.Random(spec.search.seed)
    candidates = [corner(spec, "low"), corner(spec, "high")]
    candidates += [_random_params(spec, rng) for _ in range(FEASIBILITY_SAMPLES)]
    priced = 0
    best: dict[int, float] = {}
    excluded = [0] * len(constraints)
    for params in candidates:
        try:
            costs, violations = cost_violations(spec, build_trial_config(spec, params))
        except (ConfigError, ValueError):
            continue  # an invalid combination: infeasible at sampling time, not a verdict on the constraints
        priced += 1
        if all(v <= 0 for v in violations):
            return
        for i, (constraint, violation) in enumerate(zip(constraints, violations, strict=True)):
            value = costs[constraint.metric]
            better = min if constraint.op in ("<=", "<") else max
            best[i] = better(best.get(i, value), value)
            excluded[i] += violation > 0
    if priced == 0:
        return  # nothing could be built: check_params and sampling report why
    worst = max(range(len(constraints)), key=lambda i: excluded[i])
    constraint = constraints[worst]
    extreme = "smallest" if constraint.op in ("<=", "<") else "largest"
    raise ConfigError(
        f"constraints[{worst}]",
        f"{spec.constraints[worst]!r} leaves nothing of the search space: the {extreme} {constraint.metric} it "
        f"reaches is {best[worst]:.4g} (cost model, over {priced} configs: the space's corners and a random sample); "
        "relax the constraint or shrink the space",
    )


def load_spec(source: str | Path | Mapping[str, Any], *, check_paths: bool = True) -> SearchSpec:
    """Validate a spec from a YAML path or a mapping; a ConfigError names the offending key path.

    Beyond the schema, the spec must compile (:func:`search_space.validation.check_spec`): the
    trial configs it generates are valid wherever the searched parameters do not reach, early
    stopping fits the budget, and the constraints leave something to search. ``check_paths``
    also requires an on-disk dataset's ``data_dir`` to exist on this machine.
    """
    if isinstance(source, (str, Path)):
        source = read_yaml(source)
    if not isinstance(source, Mapping):
        raise ConfigError("", f"a search spec must be a mapping, got {type(source).__name__}")
    require_finite_numbers(source)
    try:
        spec = SearchSpec.model_validate(dict(source))
    except ValidationError as error:
        first = error.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(_error_path(first["loc"]), message) from None
    for i, text in enumerate(spec.constraints):
        parse_constraint(text, f"constraints[{i}]")
    check_params(spec)
    check_spec(spec, check_paths=check_paths)
    return spec


def require_finite_numbers(value: Any, path: str = "") -> None:
    """The one rule for numbers in a spec, wherever they sit (the schema's fields, the free-form
    ``training``/``data``/``measure`` sections, a parameter's choices): every float is finite. A value
    overridden by a searched parameter is refused too: a spec says what it means or is refused.
    Walked without recursion: a deeply nested spec is refused by the schema, not by the stack."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(where, f"must be a finite number, got {item!r}")
        if isinstance(item, Mapping):
            stack.extend((child, f"{where}.{key}" if where else str(key)) for key, child in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))


def check_params(spec: SearchSpec) -> None:
    """Every parameter names a setting of the family (a model field, a training field, a stage, ``data.KEY``)."""
    for name in spec.params:
        param_target(name, spec.family)


SHOWN_VALUES = 4  # of a parameter's values that never build, named in the error


def check_buildable(spec: SearchSpec) -> None:
    """The space builds on the base model (:mod:`search_space.buildable`): a value of a ``choice``/``int``
    domain that never builds, whatever the other parameters are (``embed_dim: 100`` with ``num_heads``
    fixed at 8; ``ca_depth: 0`` where the class token joins after the last self-attention block), or a
    space of which nothing builds, is a spec error naming the key. Values that fail only in some
    combinations are a :class:`~search_space.buildable.PartlyInvalidSpace` warning (one line: the
    fraction of the space and what explains it); those proposals are stored infeasible at sampling time.
    """
    found = buildability(spec)
    if found.nothing_builds:
        raise _nothing_builds(spec, found)
    for name, bad in found.never.items():
        domain = spec.params[name]
        value, error = bad[0]
        values = ", ".join(show(v) for v, _ in bad[:SHOWN_VALUES])
        more = f" and {len(bad) - SHOWN_VALUES} more of the {len(found.values[name])} values tried" * (
            len(bad) > SHOWN_VALUES
        )
        never = f"{name}={values}{more} never build{'s' if len(bad) == 1 else ''} on the base model"
        why = f"{error.message}: {never}" if _concerns(error.field, name) else f"{never} ({error})"
        tried = "every setting of the other parameters" if found.exhaustive else "the other parameters at many settings"
        message = f"{why}, with {tried}; {found.suggestion(spec, name)}"
        if isinstance(domain, ChoiceDomain):
            index = next(i for i, v in enumerate(domain.choice) if v == value and type(v) is type(value))
            raise ConfigError(f"params.{name}.choice[{index}]", message)
        raise ConfigError(f"params.{name}", message)
    line = found.warning(spec)
    if line is not None:
        warnings.warn(PartlyInvalidSpace(line), stacklevel=4)


def _nothing_builds(spec: SearchSpec, found: Buildability) -> ConfigError:
    """The error for a space of which no config builds, at the key that causes it: a parameter (fixed or
    searched) the commonest error is about, else the base model's setting."""
    errors = [error for error in found.errors if error is not None]
    field, _ = Counter(error.field for error in errors).most_common(1)[0]
    error = next(e for e in errors if e.field == field)
    for name in spec.params:
        if _concerns(field, name):
            return ConfigError(f"params.{name}", error.message)
    example = found.tried[found.errors.index(error)]
    for name, domain in spec.params.items():  # a fixed value without which the base model builds: that value
        if isinstance(domain, FixedDomain):
            others = {key: value for key, value in spec.params.items() if key != name}
            if build_error(spec.model_copy(update={"params": others}), example) is None:
                return ConfigError(f"params.{name}", error.message)
    if len({e.field for e in errors}) == 1:
        return ConfigError(_spec_key(spec, field), error.message)
    count = f"all {len(errors)}" if found.exhaustive else f"none of {len(errors)} sampled"
    return ConfigError("params", f"no config of the space builds on the base model ({count} tried), e.g. {error}")


def _concerns(field: str, param: str) -> bool:
    """Whether a config error on ``field`` (e.g. model.embed_dim) is about parameter ``param``."""
    leaf = field.rsplit(".", 1)[-1]
    base = _INDEXED.match(param)
    if base and "[" in leaf:  # one stage's error is that stage's parameter's: dims[9]'s is not dims[3]'s
        return leaf == param
    name = base["field"] if base else param.rsplit(".", 1)[-1]
    return leaf.split("[")[0] == name
