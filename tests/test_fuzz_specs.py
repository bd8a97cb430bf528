"""Fuzzing the front door: mutated presets and trial configs either validate or fail with one clean error.

Hundreds of mutations of the shipped specs (``search_space/presets``) and trial configs
(``examples/``): deleted keys, wrong types, out-of-range numbers, unknown names, garbage. Each
must end as a valid config or a :class:`ConfigError` naming a key; any other exception is a
traceback a user would see, and fails the test. Validation runs in process (no torch, fast); a
handful go through ``archsearch search`` to check exit code 2, one line, and an untouched store.
"""

from __future__ import annotations

import copy
import random
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from harness.cli import main
from search_space.validation import load_spec
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError

ROOT = Path(__file__).parents[1]
SPECS = sorted((ROOT / "search_space" / "presets").glob("*.yaml"))
TRIAL_CONFIGS = sorted((ROOT / "examples").glob("*.yaml"))

# Values of the wrong type or out of range, as YAML could produce them.
BAD_VALUES: list[Any] = [
    None, "", "x", "nonexistent_name", -1, 0, 1, -1e30, 1e30, 2**70, float("nan"), float("inf"), True, False,
    [], [1, "a"], {}, {"a": 1}, 3.5, "1e-3", [[[]]],
]  # fmt: skip


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path (tuples of dict keys / list indices) in a YAML document."""
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((*prefix, key))
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.append((*prefix, i))
            out += _paths(value, (*prefix, i))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


def mutate(doc: dict, rng: random.Random) -> tuple[dict, str]:
    """One mutation of ``doc`` (a copy) and a description of it."""
    doc = copy.deepcopy(doc)
    paths = _paths(doc)
    path = rng.choice(paths)
    parent, last = _parent(doc, path), path[-1]
    kind = rng.choice(["delete", "wrong", "wrong", "number", "rename", "unknown_value", "wrap"])
    if kind == "delete":
        del parent[last]
    elif kind == "wrong":
        parent[last] = copy.deepcopy(rng.choice(BAD_VALUES))
    elif kind == "number":
        value = parent[last]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            parent[last] = rng.choice([-value, value * 1e9, 0, -1, value + 0.5])
        else:
            parent[last] = rng.choice([-5, 0, 10**9])
    elif kind == "rename" and isinstance(parent, dict):
        parent[f"{last}_typo"] = parent.pop(last)
    elif kind == "unknown_value":
        parent[last] = "no_such_thing"
    else:
        parent[last] = [parent[last]] if rng.random() < 0.5 else {"value": parent[last]}
    return doc, f"{kind} at {'.'.join(map(str, path))}"


def _classify(validate, doc: Any) -> str:
    try:
        validate(doc)
    except ConfigError as error:
        assert str(error).strip() and "\n" not in str(error), f"not a one-line error: {error!r}"
        return "clean error"
    except Exception:  # anything else would reach the user as a traceback
        return "traceback:\n" + traceback.format_exc()
    return "valid"


def _fuzz(documents: list[Path], validate, cases: int, seed: int) -> Counter:
    rng = random.Random(seed)
    bases = [yaml.safe_load(p.read_text()) for p in documents]
    outcomes: Counter = Counter()
    failures = []
    for i in range(cases):
        doc, what = mutate(rng.choice(bases), rng)
        for _ in range(rng.choice([0, 0, 1, 2])):  # sometimes several mutations at once
            doc, more = mutate(doc, rng)
            what += f"; {more}"
        outcome = _classify(validate, doc)
        outcomes[outcome.split(":")[0]] += 1
        if outcome.startswith("traceback"):
            failures.append(f"case {i} ({what}):\n{outcome}")
    assert not failures, f"{len(failures)} tracebacks, first:\n{failures[0]}"
    return outcomes


def test_mutated_specs_validate_or_fail_cleanly():
    outcomes = _fuzz(SPECS, lambda doc: load_spec(doc, check_paths=False), cases=300, seed=0)
    print(f"\nspecs: {sum(outcomes.values())} cases, {dict(outcomes)}")
    assert outcomes["clean error"] >= 150  # most mutations break something, and are told so
    assert outcomes["traceback"] == 0


def test_mutated_trial_configs_validate_or_fail_cleanly():
    outcomes = _fuzz(TRIAL_CONFIGS, load_trial_config, cases=200, seed=1)
    print(f"\ntrial configs: {sum(outcomes.values())} cases, {dict(outcomes)}")
    assert outcomes["clean error"] >= 100
    assert outcomes["traceback"] == 0


def test_garbage_files_are_clean_errors(tmp_path):
    rng = random.Random(2)
    contents = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4000))) for _ in range(30)] + [
        b"",
        b"\xff\xfe\x00\x01",
        b"- a\n- b\n",
        b"42\n",
        b"key: [unclosed\n",
        b"a: &x [*x]\n",
        b"[" * 5000,
    ]
    outcomes: Counter = Counter()
    for i, data in enumerate(contents):
        path = tmp_path / f"garbage-{i}.yaml"
        path.write_bytes(data)
        for validate in (load_spec, load_trial_config):
            outcome = _classify(validate, path)
            assert not outcome.startswith("traceback"), f"{data[:60]!r}: {outcome}"
            outcomes[outcome] += 1
    assert outcomes["clean error"] == 2 * len(contents)


# -- a handful through the command line: exit 2, one line, nothing written -----------------------------


def _quickstart() -> dict:
    return yaml.safe_load((ROOT / "search_space" / "presets" / "quickstart.yaml").read_text())


def _with(changes: dict) -> dict:
    spec = _quickstart()
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = spec
        for part in parents:
            node = node[part]
        node[leaf] = value
    return spec


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (_with({"training.epochs": 0}), "training.epochs: must be a positive integer, got 0"),
        (_with({"data.name": "imagenet"}), "data.name: unknown dataset 'imagenet'"),
        (b"\x80\x81binary\xfe", "not UTF-8 text"),
        (b"\x00\x01\x02", "not a text file"),
        (_with({"constraints": ["flops <= 10"]}), "constraints[0]: 'flops <= 10' leaves nothing of the search space"),
        (_with({"training.warmup_epochs": 12}), "training.warmup_epochs: 12 is longer than the budget of 10 epochs"),
        (
            _with({"search.early_stopping": {"metric": "top1", "grace_period": 12}}),
            "search.early_stopping.grace_period: 12 is longer than the budget of 10 epochs",
        ),
        (
            _with({"search.early_stopping": {"metric": "flops"}}),
            "search.early_stopping.metric: 'flops' is not reported every epoch",
        ),
        (_with({"data.batch_size": -3}), "data.batch_size: must be an integer >= 1, got -3"),
        (
            _with({"data.name": "cifar10", "data.data_dir": "/no/such/dir"}),
            "data.data_dir: /no/such/dir does not exist",
        ),
        (_with({"measure.repeats": 0}), "measure.repeats: must be a positive integer, got 0"),
    ],
    ids=[
        "epochs-0", "unknown-dataset", "binary", "nul-bytes", "infeasible", "warmup", "grace", "asha-metric",
        "batch-size", "data-dir", "measure",
    ],
)  # fmt: skip
def test_bad_specs_exit_2_with_one_line_and_write_nothing(tmp_path, content, fragment):
    spec_path = tmp_path / "spec.yaml"
    if isinstance(content, bytes):
        spec_path.write_bytes(content)
    else:
        spec_path.write_text(yaml.safe_dump(content))
    store = tmp_path / "store.db"
    result = CliRunner().invoke(main, ["search", str(spec_path), "--store", f"sqlite:///{store}"])
    assert result.exit_code == 2, result.output
    assert fragment in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not store.exists()  # nothing written: not even an empty store
    assert not (tmp_path / "ray_results").exists()


def test_an_oversized_file_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 1_100_000)
    with pytest.raises(ConfigError, match="too large for a YAML config"):
        load_spec(path)
