"""One range rule for every resource number a trial asks Ray for (issue 57, item 9): finite, what Ray's
fixed-point resources represent, bounded; refused when the spec is read, naming the key, before Ray
starts (a CPU share Ray rounds to 0 once passed validation and failed inside Ray after it started)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import yaml

from search_space.validation import load_spec
from tests.conftest import tiny_search_spec
from trials.configio import ConfigError

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")

REFUSED = [
    ("resources.cpus", 1e-9),
    ("resources.cpus", 0.00005),
    ("resources.cpus", 1e20),
    ("resources.cpus", math.inf),
    ("resources.cpus", math.nan),
    ("resources.cpus", 0),
    ("resources.cpus", -1),
    ("resources.gpus", 1e-300),
    ("resources.gpus", 0.001),
    ("resources.gpus", math.inf),
    ("resources.gpus", math.nan),
    ("resources.gpus", -0.5),
    ("resources.gpus", 2),
    ("resources.workers", 0),
    ("resources.workers", 10**9),
    ("concurrency", 0),
    ("concurrency", 10**12),
    ("concurrency", True),
    ("resources.cpus", True),
    ("resources.cpus", "1"),
    ("resources.gpus", True),
    ("resources.workers", "2"),
    ("resources.workers", 2.5),
]
ACCEPTED = [("resources.cpus", 0.5), ("resources.cpus", 0.0001), ("resources.cpus", 64), ("resources.gpus", 0.25),
            ("resources.gpus", 0.01), ("resources.gpus", 1), ("resources.workers", 2)]  # fmt: skip


def _with(key: str, value) -> dict:
    spec = tiny_search_spec("ranges")
    node = spec["search"]
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return spec


@pytest.mark.parametrize(("key", "value"), REFUSED, ids=[f"{k}={v}" for k, v in REFUSED])
def test_a_resource_number_ray_cannot_represent_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError) as refused:
        load_spec(_with(key, value), check_paths=False)
    assert refused.value.field.startswith(f"search.{key}"), refused.value


@pytest.mark.parametrize(("key", "value"), ACCEPTED, ids=[f"{k}={v}" for k, v in ACCEPTED])
def test_resource_numbers_ray_schedules_pass(key, value):
    load_spec(_with(key, value), check_paths=False)


def test_a_search_asking_for_a_cpu_share_ray_rounds_to_zero_is_refused_before_ray_starts(tmp_path):
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(_with("resources.cpus", 1e-9)))
    done = subprocess.run(
        [EXE, "search", str(tmp_path / "spec.yaml"), "--store", f"sqlite:///{tmp_path / 'store.db'}",
         "--results-dir", str(tmp_path / "results")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "search.resources.cpus" in done.stderr and "Ray" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
