"""Which values and combinations of a search space build: the start-up check of a partly invalid space.

A sampled configuration *builds* when the searcher would dispatch it: its trial config and its
model validate (:func:`search_space.sampling.build_error`, the check :class:`SpaceFunction` makes of
every proposal); one that does not is stored ``infeasible`` and never trained. Before anything runs,
:func:`buildability` tries the space on the base model and says

* which value of a ``choice``/``int`` domain never builds, whatever the other parameters are
  (``ca_depth: 0`` on a base model whose class token joins after the last self-attention block):
  the spec is refused naming that value;
* what fraction of the space does not build, and the values or pairs of values that explain it
  (``ca_depth=0 with cls_insert_layer=None``): one warning line, the search goes on.

What is sound and what is cheap. Only the parameters that can change whether a config builds take
part: the model's, the variant and ``data.*``; training fields and the replicate seed never reach
the model's validation, so they are left out. Each of those parameters is tried at its *settings*:
every choice, every value of an int range (evenly spaced ones past :data:`INT_SETTINGS`), a float
range's ends and middle. Where the product of the settings is at most :data:`ENUMERATE_AT_MOST`
configs, all of them are validated: a value "never builds" exactly when every config holding it
fails. Past that, each value gets :data:`PER_VALUE_SAMPLES` random configs (the other parameters
drawn uniformly from their settings; pooled, a uniform sample of the space, which estimates the
fraction); a value none of whose samples build is then checked against every setting of the others
(at most :data:`CONFIRM_AT_MOST`, else that many random ones) before it is refused. Each config
costs about 0.1 ms to validate (torch-free), so the check stays well under a second.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from trials.configio import ConfigError

from .sampling import build_error, grid_points, grid_size
from .spec import ChoiceDomain, FixedDomain, FloatDomain, IntDomain, SearchSpec, param_target

ENUMERATE_AT_MOST = 512  # configs: every setting combination validated up to this many
UNIFORM_SAMPLES = 256  # past that, random configs (each parameter uniform over its settings): the fraction
PER_VALUE_SAMPLES = 16  # and at least this many random configs per value of a discrete parameter
CONFIRM_AT_MOST = 4096  # a value whose samples all fail: checked against this many settings of the others
INT_SETTINGS = 33  # values of an int range tried (all of them when it has fewer)
MAX_REASONS = 3  # errors named in the warning line, and values or pairs of values named for each
SUGGESTION_CHECKS = 2048  # values an int range's suggested replacement may check


class PartlyInvalidSpace(UserWarning):
    """Part of the search space does not build on the base model: those proposals will be stored
    ``infeasible`` (never trained). The message is one line: the fraction and what explains it."""


def _int_values(domain: IntDomain) -> list[int]:
    low, high = domain.int
    count = (high - low) // domain.step + 1
    if count <= INT_SETTINGS:
        return list(range(low, high + 1, domain.step))
    picks = {low + round(i * (count - 1) / (INT_SETTINGS - 1)) * domain.step for i in range(INT_SETTINGS)}
    return sorted(picks)


def settings(domain: Any) -> list[Any]:
    """The values of a domain the check tries (see the module docstring)."""
    if isinstance(domain, ChoiceDomain):
        return list(domain.choice)
    if isinstance(domain, IntDomain):
        return _int_values(domain)
    if isinstance(domain, FloatDomain):
        low, high = domain.float
        middle = math.sqrt(low * high) if domain.log else (low + high) / 2
        return list(dict.fromkeys([low, middle, high]))
    return [domain.fixed]


def _discrete(domain: Any) -> bool:
    return isinstance(domain, (ChoiceDomain, IntDomain))


def _key(value: Any) -> str:
    """A value as a dictionary key that tells 1, 1.0 and True apart."""
    return f"{type(value).__name__}:{value!r}"


def show(value: Any) -> str:
    """A value as a spec writes it (YAML flow style: null, true, strings as they are)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


@dataclass
class Buildability:
    """What :func:`buildability` found (see the module docstring)."""

    names: list[str]  # the parameters that took part, in the spec's order
    tried: list[dict[str, Any]] = field(default_factory=list)  # the configs' parameter values (a sample, or all)
    errors: list[ConfigError | None] = field(default_factory=list)  # why each did not build (None: it builds)
    exhaustive: bool = False  # every setting combination tried
    uniform: int | None = None  # sampled: the first ``uniform`` configs are a uniform sample (the fraction's)
    never: dict[str, list[tuple[Any, ConfigError]]] = field(default_factory=dict)  # param -> values never built
    values: dict[str, list[Any]] = field(default_factory=dict, repr=False)  # each parameter's settings
    check: Callable[[dict[str, Any]], ConfigError | None] | None = field(default=None, repr=False)
    seed: int = 0

    @property
    def failures(self) -> int:
        return sum(error is not None for error in self.errors)

    @property
    def fraction(self) -> float:
        """Of the space (exhaustive) or of a uniform sample of it, the share that does not build."""
        counted = self.errors[: self.uniform] if self.uniform is not None else self.errors
        return sum(error is not None for error in counted) / len(counted) if counted else 0.0

    @property
    def nothing_builds(self) -> bool:
        return bool(self.errors) and self.failures == len(self.errors)

    def failure_groups(self) -> list[tuple[str, set[int]]]:
        """The configs that do not build, grouped by the key their error names: ``(key, rows of
        tried)``, the commonest first (ties: the one met first). :meth:`reasons` explains the first
        :data:`MAX_REASONS` of them in this order; ``archsearch check`` counts and shows each."""
        by_key: dict[str, set[int]] = {}
        for i, error in enumerate(self.errors):
            if error is not None:
                by_key.setdefault(error.field, set()).add(i)
        return sorted(by_key.items(), key=lambda item: (-len(item[1]), min(item[1])))

    def reasons(self, spec: SearchSpec) -> list[str]:
        """Why configs do not build: up to :data:`MAX_REASONS` errors (by the key they name, commonest
        first), each with the values or pairs of values of discrete parameters whose every tried config
        fails that way (``ca_depth=0 with depth=1``), or an example where none such explains it all."""
        discrete = [name for name in self.names if _discrete(spec.params[name])]
        candidates: dict[tuple, list[int]] = {}
        for i, values in enumerate(self.tried):
            keys = [(name, _key(values[name])) for name in discrete]
            for single in keys:
                candidates.setdefault((single,), []).append(i)
            for pair in itertools.combinations(keys, 2):
                candidates.setdefault(pair, []).append(i)
        minimum = 1 if self.exhaustive else 3  # a sampled pattern needs a few configs behind it
        failing = {
            pattern: set(rows)
            for pattern, rows in candidates.items()
            if len(rows) >= minimum and all(self.errors[i] is not None for i in rows)
        }
        found = []
        for _, rows in self.failure_groups()[:MAX_REASONS]:
            error = self.errors[min(rows)]
            uncovered, texts = set(rows), []
            while uncovered and len(texts) < MAX_REASONS:
                # Most failures explained first; of equals, a single value before a pair.
                pattern = max(failing, key=lambda p: (len(uncovered & failing[p]), -len(p)), default=None)
                if pattern is None or not uncovered & failing[pattern]:
                    break
                example = self.tried[min(uncovered & failing[pattern])]
                texts.append(" with ".join(f"{name}={show(example[name])}" for name, _ in pattern))
                uncovered -= failing[pattern]
            if texts and not uncovered:
                found.append(f"{' or '.join(texts)} ({error})")
            else:
                example = self.tried[min(rows)]
                values = texts[0] if texts else ", ".join(f"{name}={show(example[name])}" for name in self.names)
                found.append(f"{error} (e.g. {values})")
        return found

    def builds(self, name: str, value: Any) -> bool:
        """Whether ``name=value`` builds with some setting of the other parameters: every setting where
        they are at most :data:`CONFIRM_AT_MOST` combinations, else that many random ones."""
        assert self.check is not None
        others = {other: tried for other, tried in self.values.items() if other != name}
        if math.prod(len(v) for v in others.values()) <= CONFIRM_AT_MOST:
            combinations: Iterable[tuple] = itertools.product(*others.values())
        else:
            rng = random.Random(self.seed)
            combinations = (tuple(rng.choice(v) for v in others.values()) for _ in range(CONFIRM_AT_MOST))
        return any(self.check({**dict(zip(others, combination, strict=True)), name: value}) is None
                   for combination in combinations)  # fmt: skip

    def suggestion(self, spec: SearchSpec, name: str) -> str:
        """What to write instead of ``name``'s domain, whose values :attr:`never` lists."""
        domain = spec.params[name]
        bad = {_key(v) for v, _ in self.never[name]}
        if isinstance(domain, ChoiceDomain):
            return f"use {{choice: [{', '.join(show(v) for v in domain.choice if _key(v) not in bad)}]}}"
        kept = [v for v in self.values[name] if _key(v) not in bad]
        if not isinstance(domain, IntDomain) or not kept:
            return "narrow the range"
        low, high = domain.int
        every = list(range(low, high + 1, domain.step))
        if every == self.values[name]:  # every value was tried: the exact answer
            if kept == every[every.index(kept[0]) : every.index(kept[-1]) + 1]:
                return _int_range(kept[0], kept[-1], domain.step, domain.log)
            if len(kept) <= 12:
                return f"use {{choice: [{', '.join(show(v) for v in kept)}]}}"
        # Evenly spaced values were tried: the widest progression through them whose every value builds.
        spacing = math.gcd(*(v - kept[0] for v in kept[1:])) if len(kept) > 1 else 0
        checks = SUGGESTION_CHECKS
        for step in sorted(d for d in range(domain.step, spacing + 1, domain.step) if spacing % d == 0):
            candidates = range(kept[0], kept[-1] + 1, step)
            if len(candidates) > checks:
                continue
            checks -= len(candidates)
            if all(self.builds(name, v) for v in candidates):
                start, end = kept[0], kept[-1]
                while start - step >= low and checks > 0 and self.builds(name, start - step):
                    start, checks = start - step, checks - 1
                while end + step <= high and checks > 0 and self.builds(name, end + step):
                    end, checks = end + step, checks - 1
                return _int_range(start, end, step, domain.log and step == 1)
        return "narrow the range"

    def warning(self, spec: SearchSpec) -> str | None:
        """The one warning line, or None when everything tried builds."""
        if not self.failures:
            return None
        percent = 100 * self.fraction
        amount = f"{percent:.0f}%" if percent >= 1 else "under 1%"
        what = "of the space's configs" if self.exhaustive else "of sampled configs"
        reasons = "; ".join(self.reasons(spec))
        return (
            f"{amount} {what} do not build on the base model and will be stored infeasible, never trained: {reasons}"
        )


def buildability(spec: SearchSpec) -> Buildability:
    """Try the spec's space on its base model (see the module docstring)."""
    names = [
        name
        for name, domain in spec.params.items()
        if not isinstance(domain, FixedDomain) and param_target(name, spec.family)[0] in ("model", "variant", "data")
    ]
    values = {name: settings(spec.params[name]) for name in names}
    cache: dict[tuple, ConfigError | None] = {}

    def check(assignment: dict[str, Any]) -> ConfigError | None:
        key = tuple(_key(assignment[name]) for name in names)
        if key not in cache:
            cache[key] = build_error(spec, assignment)
        return cache[key]

    found = Buildability(names, values=values, check=check, seed=spec.search.seed)

    def record(assignments: Iterable[dict[str, Any]]) -> None:
        for assignment in assignments:
            found.tried.append(assignment)
            found.errors.append(check(assignment))

    size = math.prod(len(v) for v in values.values())
    if spec.search.sampler == "grid" and spec.search.grid is not None and grid_size(spec) <= CONFIRM_AT_MOST:
        # A grid of listed sub-grids visits exactly its points: those are the space.
        found.exhaustive = True
        record({name: point[name] for name in names} for point in grid_points(spec))
    elif size <= ENUMERATE_AT_MOST:
        found.exhaustive = True
        record(dict(zip(names, combination, strict=True)) for combination in itertools.product(*values.values()))
    else:
        rng = random.Random(spec.search.seed)

        def draw() -> dict[str, Any]:
            return {name: rng.choice(values[name]) for name in names}

        record(draw() for _ in range(UNIFORM_SAMPLES))
        found.uniform = UNIFORM_SAMPLES
        for name in names:  # every value of a discrete parameter tried at least PER_VALUE_SAMPLES times
            if not _discrete(spec.params[name]):
                continue
            seen = Counter(_key(tried[name]) for tried in found.tried)
            for value in values[name]:
                record({**draw(), name: value} for _ in range(PER_VALUE_SAMPLES - seen[_key(value)]))
    if found.nothing_builds:
        return found
    for name in names:
        if not _discrete(spec.params[name]):
            continue
        for value in values[name]:
            rows = [i for i, tried in enumerate(found.tried) if _key(tried[name]) == _key(value)]
            if not rows or any(found.errors[i] is None for i in rows):
                continue
            if not found.exhaustive and found.builds(name, value):
                continue
            found.never.setdefault(name, []).append((value, found.errors[rows[0]]))
    return found


def _int_range(low: int, high: int, step: int, log: bool) -> str:
    extra = (f", step: {step}" if step != 1 else "") + (", log: true" if log else "")
    return f"use {{int: [{low}, {high}]{extra}}}"
