"""A partly invalid search space (issue 45, item 1): the start-up check and the infeasible trials it leaves.

A spec may hold values that do not build on its base model. Before anything runs, a value that never
builds, whatever the other parameters are, is refused naming it, why and what to write instead; values
that fail only in combination are one warning line with the fraction of the space they take. Each
infeasible proposal is stored with the config it would have trained (unvalidated where its model does not
build, in a valid trial's shape) and its sampled and fixed values, so every view reads it like any other
trial. The searcher is driven without Ray (its own ``suggest``/``on_trial_complete``), the views through
the real command line; the slow test runs ``archsearch search`` end to end.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml

from dashboards import load_study
from dashboards.study import InfeasibleTrial
from harness.search.propose.samplers import make_sampler
from harness.search.propose.searcher import ArchsearchSearch
from harness.search.result_keys import STATUS_KEY, split_tune_config
from harness.store import Store
from search_space.buildable import PartlyInvalidSpace, buildability
from search_space.sampling import build_trial_config, config_mismatches
from search_space.validation import load_spec
from trials.configio import ConfigError

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")
PRESETS = Path(__file__).parents[1] / "search_space" / "presets"
CLS_TOKEN = "with ca_depth 0 the class token must join a self-attention block"

# The user's spec of the issue: CaiT on digits, ca_depth searched from 0, on a base model whose class
# token joins after the last self-attention block (cls_insert_layer unset).
USER_SPEC = {
    "name": "user",
    "family": "cait",
    "base_model": {"preset": "cait_tiny32", "depth": 2, "embed_dim": 32, "num_heads": 2},
    "data": {"name": "digits", "batch_size": 32},
    "training": {"epochs": 1, "lr": 1e-3},
    "params": {
        "depth": {"int": [1, 3]},
        "embed_dim": {"choice": [32, 48]},
        "ca_depth": {"int": [0, 3]},
        "lr": {"float": [1e-4, 1e-2], "log": True},
    },
    "objectives": {"top1": "max", "flops": "min"},
    "search": {"sampler": "tpe", "n_trials": 26, "seed": 0},
}


def _with(spec: dict, **changes) -> dict:
    spec = copy.deepcopy(spec)
    for key, value in changes.items():
        section, _, field = key.partition(".")
        if field:
            spec[section][field] = value
        else:
            spec[section] = value
    return spec


def _load(spec) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_spec(spec, check_paths=False)
    return loaded, [str(w.message) for w in caught if issubclass(w.category, PartlyInvalidSpace)]


# -- the start-up check: refuse what never builds, warn about what builds only in part -------------


def test_a_value_that_never_builds_is_refused_naming_the_value_why_and_the_fix():
    with pytest.raises(ConfigError) as refused:
        load_spec(USER_SPEC)
    assert refused.value.field == "params.ca_depth"
    message = str(refused.value)
    assert "ca_depth=0 never builds on the base model" in message and CLS_TOKEN in message
    assert "every setting of the other parameters" in message and "use {int: [1, 3]}" in message
    # The same value as a choice names its index, and the choices that build.
    with pytest.raises(ConfigError) as refused:
        load_spec(_with(USER_SPEC, **{"params.ca_depth": {"choice": [2, 0, 3]}}))
    assert refused.value.field == "params.ca_depth.choice[1]" and "use {choice: [2, 3]}" in str(refused.value)
    # Searching where the class token joins too makes ca_depth 0 buildable (with cls_insert_layer 0): a warning.
    _, warned = _load(_with(USER_SPEC, **{"params.cls_insert_layer": {"choice": [0, None]}}))
    assert len(warned) == 1 and "ca_depth=0 with cls_insert_layer=null" in warned[0]


def test_a_value_of_a_large_space_is_refused_after_sampling_and_confirming():
    """Past the enumeration bound the space is sampled; a value none of whose samples build is checked
    against the others' settings before it is refused. The shipped CIFAR-100 CaiT space searches where
    the class token joins, so its ca_depth 0 builds in part: a warning with the fraction."""
    preset = yaml.safe_load((PRESETS / "cait-cifar100.yaml").read_text())
    spec, warned = _load(preset)
    found = buildability(spec)
    assert not found.exhaustive and not found.never
    assert len(warned) == 1 and "of sampled configs do not build" in warned[0]
    assert "ca_depth=0 with cls_insert_layer=null" in warned[0]
    fraction = int(re.match(r"(\d+)%", warned[0])[1])
    assert 10 <= fraction <= 25  # a third of ca_depth's values, with one of two insertion points: 1/6
    without = copy.deepcopy(preset)
    del without["params"]["cls_insert_layer"]  # the base model's: after the last self-attention block
    with pytest.raises(ConfigError) as refused:
        load_spec(without, check_paths=False)
    assert refused.value.field == "params.ca_depth" and "the other parameters at many settings" in str(refused.value)
    assert "use {int: [1, 2]}" in str(refused.value)


@pytest.mark.parametrize(
    ("changes", "pattern", "percent"),
    [
        # ca_depth 0 builds where the class token joins before the last self-attention block: depth 2.
        (
            {"base_model.cls_insert_layer": 1, "params": {"depth": {"int": [1, 2]}, "ca_depth": {"int": [0, 3]}}},
            "depth=1 with ca_depth=0",
            "12%",
        ),
        # A depth/heads combination: 32 is not divisible by 3 heads, 48 is.
        (
            {"params": {"embed_dim": {"choice": [32, 48]}, "num_heads": {"choice": [2, 3]}}},
            "embed_dim=32 with num_heads=3",
            "25%",
        ),
        # 30 with the base model's 4 heads does not build, with 3 it does (refused before: checked at the base alone).
        (
            {"base_model.num_heads": 4, "params": {"embed_dim": {"choice": [30, 48]}, "num_heads": {"choice": [3, 4]}}},
            "embed_dim=30 with num_heads=4",
            "25%",
        ),
    ],
    ids=["ca-depth-and-depth", "embed-dim-and-heads", "built-at-other-heads"],
)
def test_values_that_fail_only_in_combination_are_one_warning_not_a_refusal(changes, pattern, percent):
    _, warned = _load(_with(USER_SPEC, **changes))
    assert len(warned) == 1, warned
    line = warned[0]
    assert "\n" not in line and line.startswith(f"{percent} of the space's configs do not build"), line
    assert f"{pattern} (model." in line and "stored infeasible, never trained" in line


def test_a_space_that_builds_everywhere_says_nothing_and_a_space_that_never_builds_is_refused():
    spec, warned = _load(_with(USER_SPEC, **{"params.ca_depth": {"int": [1, 3]}}))
    assert warned == [] and buildability(spec).failures == 0
    with pytest.raises(ConfigError) as refused:  # a fixed value that nothing else can repair: its key
        load_spec(_with(USER_SPEC, params={"depth": {"int": [1, 3]}, "num_heads": 7}))
    assert refused.value.field == "params.num_heads", refused.value
    assert "not divisible by num_heads 7" in str(refused.value)


def test_an_int_range_no_head_size_divides_is_refused_with_the_step_that_builds():
    spec = {
        "name": "widths",
        "family": "coatnet",
        "base_model": "coatnet_tiny32",
        "params": {"dims[3]": {"int": [64, 256]}, "layout": {"choice": ["CCTT", "CTTT"]}},
        "objectives": {"top1": "max", "flops": "min"},
    }
    with pytest.raises(ConfigError) as refused:
        load_spec(spec)
    assert refused.value.field == "params.dims[3]" and "is not divisible by head_size 32" in str(refused.value)
    assert "use {int: [64, 256], step: 32}" in str(refused.value)
    assert _load({**spec, "params": {**spec["params"], "dims[3]": {"int": [64, 256], "step": 32}}})[1] == []


def test_search_prints_the_warning_once_as_one_line_before_anything_runs(tmp_path):
    partly = _with(USER_SPEC, name="not a valid name!", **{"base_model.cls_insert_layer": 1})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(partly, sort_keys=False))
    store = tmp_path / "store.db"
    result = subprocess.run(
        [EXE, "search", str(path), "--store", f"sqlite:///{store}"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    warned = [line for line in lines if line.startswith("warning:")]
    assert len(warned) == 1 and "do not build on the base model" in warned[0] and "ca_depth=0" in warned[0]
    assert lines.index(warned[0]) < next(i for i, line in enumerate(lines) if line.startswith("Error:"))
    assert not store.exists()
    (tmp_path / "user.yaml").write_text(yaml.safe_dump(USER_SPEC, sort_keys=False))
    refused = subprocess.run(
        [EXE, "search", str(tmp_path / "user.yaml"), "--store", f"sqlite:///{store}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "Error: params.ca_depth: ca_depth=0 never builds" in refused.stderr and not store.exists()


# -- an infeasible proposal is stored as the trial it would have been -------------------------------


def _partly_spec(sampler: str = "grid") -> dict:
    return {
        "name": "partly",
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "cls_insert_layer": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
        "training": {"epochs": 1, "lr": 1e-3},
        "params": {"depth": {"choice": [1, 2]}, "ca_depth": {"choice": [0, 1]}, "mlp_ratio": 2.0},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": sampler, "n_trials": 4, "seed": 0},
    }


def test_an_infeasible_proposal_is_stored_with_the_config_it_would_have_trained(tmp_path):
    spec, warned = _load(_partly_spec())
    assert len(warned) == 1 and "depth=1 with ca_depth=0" in warned[0]
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store.open(url)
    store.create_study(spec.name, spec.model_dump(mode="json"), dict(spec.objectives))
    searcher = ArchsearchSearch(spec, url, spec.name, optuna.storages.RDBStorage(url), make_sampler(spec))
    trained = {}
    for i in range(10):  # as Ray Tune with one worker calls the searcher; the store writer's record of each
        config = searcher.suggest(f"t{i}")
        if not isinstance(config, dict):
            break
        number, _, params = split_tune_config(config)
        trained[number] = build_trial_config(spec, params)
        store.finish_trial(
            spec.name,
            number,
            status="completed",
            config=trained[number],
            measurement={"flops": 1e6 * (1 + number), "params": 1000},
            final={"top1": 50.0 + number},
            epochs=[{"epoch": 1, "top1": 50.0 + number, "train_loss": 1.0}],
            parameters={"sampled": {k: params[k] for k in ("depth", "ca_depth")}, "fixed": {"mlp_ratio": 2.0}},
        )
        searcher.on_trial_complete(f"t{i}", {STATUS_KEY: "completed", "top1": 50.0 + number, "flops": 1.0})
    records = store.trial_records(spec.name)
    (infeasible,) = [n for n, r in records.items() if r["status"] == "infeasible"]
    record = records[infeasible]
    model = record["config"]["model"]
    valid = next(iter(trained.values()))
    assert set(record["config"]) == set(valid) and list(model) == list(valid["model"])  # a valid trial's shape
    assert (model["depth"], model["ca_depth"], model["mlp_ratio"], model["cls_insert_layer"]) == (1, 0, 2.0, 1)
    assert record["parameters"] == {"sampled": {"depth": 1, "ca_depth": 0}, "fixed": {"mlp_ratio": 2.0}}
    assert config_mismatches(spec, record["config"]) == []
    assert CLS_TOKEN in store.trial_errors(spec.name, ("infeasible",), limit=1)[0]
    store.close()

    # Every view reads it like any other trial.
    shown = subprocess.run(
        [EXE, "trials", spec.name, "--store", url, "--format", "json"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and "do not match the study's spec" not in shown.stderr, shown.stderr
    rows = {row["number"]: row for row in json.loads(shown.stdout)}
    assert rows[infeasible]["config.model.ca_depth"] == 0 and not any(k.startswith("config.params") for k in rows[0])
    front = subprocess.run(
        [EXE, "pareto", spec.name, "--store", url, "--where", "depth=2"], capture_output=True, text=True, timeout=120
    )
    assert front.returncode == 0, front.stderr
    study = load_study(spec.name, url)
    assert study.trial_config(min(trained)).model.depth in (1, 2)
    with pytest.raises(InfeasibleTrial, match=rf"trial {infeasible} of study 'partly' was infeasible") as why:
        study.trial_config(infeasible)
    assert CLS_TOKEN in str(why.value)


def test_an_unvalidated_config_has_the_sampled_values_in_a_valid_configs_shape():
    spec, _ = _load(_partly_spec("random"))
    valid = build_trial_config(spec, {"depth": 2, "ca_depth": 0})
    with pytest.raises(ConfigError, match=r"model\.cls_insert_layer"):
        build_trial_config(spec, {"depth": 1, "ca_depth": 0})
    unvalidated = build_trial_config(spec, {"depth": 1, "ca_depth": 0}, validate=False)
    assert list(unvalidated["model"]) == list(valid["model"])
    assert {k: v for k, v in unvalidated["model"].items() if k != "depth"} == {
        k: v for k, v in valid["model"].items() if k != "depth"
    }
    assert unvalidated["model"]["depth"] == 1 and unvalidated["data"] == valid["data"]


# -- end to end: archsearch search, then every view ----------------------------------------------


def _figure(html: str, key: str) -> tuple[list, dict]:
    """The data and layout plotly draws into the report's figure ``key``."""
    found = re.search(rf'Plotly\.newPlot\(\s*"s1-{key}",\s*', html)
    assert found, f"no figure {key}"
    start = found.end()
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(html, start)
    layout, _ = decoder.raw_decode(html, html.index("{", end))
    return data, layout


def _points(values) -> int:
    """How many values a plotly trace holds: a list, or a typed array (base64 ``bdata`` of ``dtype``)."""
    if isinstance(values, dict):
        return len(base64.b64decode(values["bdata"])) // np.dtype(values["dtype"]).itemsize
    return len(values)


@pytest.mark.slow
def test_a_partly_invalid_search_runs_and_every_view_reads_its_infeasible_trials(tmp_path):
    spec = _with(
        USER_SPEC,
        name="partly",
        data={"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
        measure={"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        search={"sampler": "random", "n_trials": 8, "seed": 3, "initial_spread": 0},  # the sampler alone
        **{
            "base_model.cls_insert_layer": 1,
            "params": {
                "depth": {"int": [1, 2]},
                "embed_dim": {"choice": [32, 48]},
                "ca_depth": {"int": [0, 3]},
                "lr": {"float": [1e-4, 1e-2], "log": True},
            },
        },
    )
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    url = f"sqlite:///{tmp_path / 'store.db'}"

    def archsearch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [EXE, *args, "--store", url], capture_output=True, text=True, timeout=600, cwd=tmp_path
        )

    ran = archsearch("search", str(path), "--results-dir", str(tmp_path / "ray"))
    assert ran.returncode == 0, ran.stderr
    warned = [line for line in ran.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "12% of the space's configs do not build" in warned[0]
    assert "depth=1 with ca_depth=0" in warned[0]

    shown = archsearch("trials", "partly", "--format", "json")
    assert shown.returncode == 0 and "do not match the study's spec" not in shown.stderr, shown.stderr
    rows = json.loads(shown.stdout)
    infeasible = [row for row in rows if row["status"] == "infeasible"]
    completed = [row for row in rows if row["status"] == "completed"]
    assert infeasible and len(completed) == 8  # seed 3 proposes depth 1 with ca_depth 0 on the way
    for row in infeasible:
        assert (row["config.model.depth"], row["config.model.ca_depth"]) == (1, 0) and CLS_TOKEN in row["error"]
    assert not any(key.startswith("config.params") for row in rows for key in row)

    for where in ("embed_dim=32", "ca_depth=0", "depth=1"):
        front = archsearch("pareto", "partly", "--where", where)
        assert front.returncode == 0 and "ambiguous" not in front.stderr, (where, front.stderr)

    report = archsearch("report", "partly", "-o", str(tmp_path / "report.html"))
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report.html").read_text()
    data, layout = _figure(html, "params")
    panels = [a["text"] for a in layout["annotations"]]
    searched = {"model.depth", "model.embed_dim", "model.ca_depth", "training.lr"}
    assert sorted(panels) == sorted(searched)  # a panel per searched parameter, nothing constant, no params.*
    assert [_points(trace["x"]) for trace in data] == [len(completed)] * 4  # every completed trial in each panel
    assert "No parameter importance" not in html
    assert f"over {len(completed)} completed trials" in html
    _, importance = _figure(html, "importance")
    assert importance["annotations"]  # one panel per evaluator and objective
    scatter, _ = _figure(html, "pareto")
    hover = next(t["hovertemplate"] for t in scatter if t.get("hovertemplate"))
    shown_fields = re.findall(r"<br>([\w.\[\]]+): %\{customdata", hover)
    assert sorted(shown_fields) == sorted(searched), hover

    study = load_study("partly", url)
    number = int(infeasible[0]["number"])
    with pytest.raises(InfeasibleTrial, match=rf"trial {number} of study 'partly' was infeasible"):
        study.trial_config(number)
    assert study.trial_config(int(completed[0]["number"])).model.family == "cait"
