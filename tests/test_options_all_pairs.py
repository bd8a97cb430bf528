"""The trial options a user sets, tested in combination (issue 56, deliverable 3).

Every option was proven alone, and two of them together (regional compilation and FLOP counting)
failed every compiled trial. Testing every combination is a product of thousands of trials; the
standard way to cover interactions is *all-pairs*: every pair of values of any two options appears in
at least one row. :func:`all_pairs` builds such a table greedily from the options below (rows that
cannot exist, e.g. talking heads on CoAtNet, are left out, and the pairs only they could hold are not
required); each row is a real tiny trial on the CPU, and none may fail. Adding an option, or a value
to one, is adding it to :data:`OPTIONS` (and saying in :func:`trial_config` what it sets): the table
grows to cover its pairs.

Each row's record is checked against what ran: it completed, it compiled exactly when asked (and
timed the compiled forward when it measured), its FLOPs equal the eager model's where measured, its
stored model is the built one, and a resumed row continued from its saved epoch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from trials.measurement.flops import count_flops
from trials.models import build_model, count_parameters
from trials.runner import run_trial

# option -> its values. The first value of each is the default a user gets on a CPU.
OPTIONS: dict[str, tuple[Any, ...]] = {
    "family": ("cait", "coatnet"),
    "compile_scope": ("off", "regional", "whole"),
    # Inductor generates C++ kernels on a CPU (10-70 s per new graph); aot_eager runs the same Dynamo and
    # AOTAutograd graphs (the scoping, the forward FLOPs and timing go through) without code generation.
    # Both pair with every other option; None: not compiled.
    "compile_backend": ("aot_eager", "inductor", None),
    "measure": ("all", "flops", "none"),
    "workers": (1, 2),
    "precision": ("fp32", "bf16", "fp16"),  # fp16: the gradient scaler's path (what auto picks on a V100 or a T4)
    "cuda_graphs": ("auto", False, True),
    "talking_heads_impl": ("explicit", "fused", "auto", None),  # None: the family has no talking heads
    "init": (None, "xavier", "scaled"),
    "resume": (False, True),  # trained one epoch, then resumed from that epoch's state
    "recalibrate_batchnorm": (False, True),
    "drop_path_rate": (0.0, 0.1),  # above 0, each block draws its own masks (and compiles its own regional graph)
    "augment": ("none", "mix"),  # mix: RandAugment (the DataLoader path), MixUp and CutMix (soft targets)
}
AUGMENTS = {
    "none": {},
    "mix": {"randaugment": [2, 9], "mixup_alpha": 0.2, "cutmix_alpha": 0.2},
}


def valid(row: Mapping[str, Any]) -> bool:
    """Rows that can exist: talking heads are CaiT's (and CaiT always has an implementation of them); a
    compiled row has a backend, an eager one none. Each rule is on a pair of options and reads a partial row,
    so :func:`all_pairs` asks it of pairs (a row is valid where all its pairs are)."""
    has_heads = row.get("talking_heads_impl") is not None
    if "family" in row and "talking_heads_impl" in row and (row["family"] == "cait") != has_heads:
        return False
    if "compile_scope" in row and "compile_backend" in row:
        return (row["compile_scope"] == "off") == (row["compile_backend"] is None)
    return True


def all_pairs(options: Mapping[str, Sequence[Any]], valid: Callable[[Mapping[str, Any]], bool]) -> list[dict]:
    """A small table of rows in which every pair of values of two options that some valid row can hold
    appears at least once (greedy: each row the valid candidate covering most pairs not yet covered; among
    equals, one that needs no new Inductor compile (minutes of a CPU); then the earliest candidate).

    The candidates are every combination (some 10^5), each held as the ids of its pairs, so a round of the
    greedy choice is one array sum. ``valid`` is a rule on pairs of options (it reads a partial row), so a
    combination is valid where each of its pairs is: the table is built at collection in a second, not minutes."""
    names = list(options)
    sizes = [len(options[name]) for name in names]
    columns = list(itertools.combinations(range(len(names)), 2))
    offsets = np.cumsum([0] + [sizes[a] * sizes[b] for a, b in columns])
    index = np.indices(sizes).reshape(len(names), -1).T
    pair_ids = np.stack([offsets[k] + index[:, a] * sizes[b] + index[:, b] for k, (a, b) in enumerate(columns)], 1)
    valid_pair = np.zeros(offsets[-1], dtype=bool)
    for k, (a, b) in enumerate(columns):
        for i, j in itertools.product(range(sizes[a]), range(sizes[b])):
            valid_pair[offsets[k] + i * sizes[b] + j] = valid({names[a]: options[names[a]][i],
                                                               names[b]: options[names[b]][j]})  # fmt: skip
    keep = valid_pair[pair_ids].all(axis=1)
    index, pair_ids = index[keep], pair_ids[keep]

    def row_of(combo: np.ndarray) -> dict:
        return {name: options[name][i] for name, i in zip(names, combo.tolist(), strict=True)}

    def cost(combo: np.ndarray) -> tuple | None:
        """What an Inductor row compiles anew (its graphs are shared by rows of one family, scope, precision)."""
        row = row_of(combo)
        if row.get("compile_backend") != "inductor":
            return None
        return row["family"], row["compile_scope"], row["precision"]

    inductor = names.index("compile_backend"), options["compile_backend"].index("inductor")
    compiling = np.flatnonzero(index[:, inductor[0]] == inductor[1])
    costs: list[tuple | None] = [None] * len(index)
    for i in compiling:
        costs[i] = cost(index[i])
    uncovered = np.zeros(offsets[-1], dtype=bool)
    uncovered[pair_ids.ravel()] = True  # the pairs some valid row holds
    compiled: set = set()
    table = []
    while uncovered.any():
        gain = uncovered[pair_ids].sum(axis=1)
        new_compile = np.array([c is not None and c not in compiled for c in costs])
        best = int(np.lexsort((np.arange(len(index)), new_compile, -gain))[0])  # most pairs, no compile, earliest
        table.append(row_of(index[best]))
        uncovered[pair_ids[best]] = False
        compiled.add(costs[best])
    return table


TABLE = all_pairs(OPTIONS, valid)
MODELS = {
    "cait": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
    "coatnet": {"preset": "coatnet_tiny32", "depths": [1, 1, 1, 1, 1], "dims": [16, 16, 32, 32, 64]},
}
MEASURES = {
    "all": {"flops": True, "throughput": True, "latency": True},
    "flops": {"flops": True, "throughput": False, "latency": False},
    "none": {"flops": False, "throughput": False, "latency": False},
}


def trial_config(row: Mapping[str, Any]) -> dict:
    """The tiny trial a row runs. Every rank trains on batches of 16 and evaluates 32 (a data-parallel
    row's global batch is 32), and measurement uses 16 and 1: the compiled graphs are shared by rows of
    one family, precision and scope, so Inductor's cache compiles each once."""
    model = {**MODELS[row["family"]], "drop_path_rate": row["drop_path_rate"]}
    if row["talking_heads_impl"] is not None:
        model["talking_heads_impl"] = row["talking_heads_impl"]
    if row["init"] is not None:
        model["init"] = row["init"]
    workers = row["workers"]
    compiled = row["compile_scope"] != "off"
    return {
        "model": model,
        "data": {
            "name": "synthetic",
            "num_classes": 4,
            "train_size": 64,
            "val_size": 32,
            "batch_size": 16 * workers,
            "eval_batch_size": 32,
            "augment": AUGMENTS[row["augment"]],
        },
        "training": {
            "epochs": 2 if row["resume"] else 1,
            "lr": 1e-3,
            "compile": compiled,
            **({"compile_scope": row["compile_scope"], "compile_backend": row["compile_backend"]} if compiled else {}),
            "cuda_graphs": row["cuda_graphs"],
            "recalibrate_batchnorm": row["recalibrate_batchnorm"],
        },
        "measure": {**MEASURES[row["measure"]], "batch_size": 16, "repeats": 1, "warmup": 0},
        "precision": row["precision"],
        "distributed": {"workers": workers},
        "device": "cpu",
        "cpus": 1,
        "seed": 5,
    }


def test_the_table_holds_every_pair_a_valid_row_can_hold():
    """The generator itself: every coverable pair is in the table, and the table is far smaller than
    the product (which a test of every combination would run)."""
    names = list(OPTIONS)
    in_table = {(a, repr(r[a]), b, repr(r[b])) for r in TABLE for a, b in itertools.combinations(names, 2)}
    for a, b in itertools.combinations(names, 2):
        for x, y in itertools.product(OPTIONS[a], OPTIONS[b]):
            if any(valid({**row, a: x, b: y}) for row in TABLE):  # some valid row can hold it
                assert (a, repr(x), b, repr(y)) in in_table, (a, x, b, y)
    assert all(valid(row) for row in TABLE)
    assert len(TABLE) < 25 < len(list(itertools.product(*OPTIONS.values())))
    assert ("family", "'coatnet'", "talking_heads_impl", "'fused'") not in in_table  # not a row that exists


def _run(row: Mapping[str, Any]):
    config = trial_config(row)
    if not row["resume"]:
        return run_trial(config), None
    saved: list[dict] = []

    def stop_after_the_first_epoch(metrics, trainer) -> bool:
        saved.append(trainer.state_dict())
        return True  # stopped early after epoch 1, as an interrupted trial is

    first = run_trial(config, callback=stop_after_the_first_epoch)
    assert first.status == "completed" and first.stopped_early and len(saved) == 1, first.error
    return run_trial(config, resume_state=saved.pop), first


@pytest.mark.slow
@pytest.mark.parametrize("row", TABLE, ids=[f"row{i}" for i in range(len(TABLE))])
def test_every_row_of_the_all_pairs_table_is_a_trial_that_completes_as_recorded(row):
    torch.compiler.reset()
    result, first = _run(row)
    assert result.status == "completed", f"{row}: {result.error}"
    final = result.final
    # It compiled exactly when asked; what it measured, it measured through the forward it trained with.
    compiled = row["compile_scope"] != "off"
    assert final["compiled"] == float(compiled), row
    if compiled:
        assert final["regional_compile"] == float(row["compile_scope"] == "regional") and final["recompiles"] == 0
    # The record is the model that ran: the stored model rebuilds to the trained parameters and FLOPs.
    assert result.built_model == result.config["model"]
    model = build_model(result.config["model"])
    cost = result.cost
    assert cost is not None and cost.params == count_parameters(model)
    measures = MEASURES[row["measure"]]
    if measures["flops"]:
        assert cost.flops == count_flops(model, torch.randn(1, 3, 32, 32)).total
    else:
        assert cost.flops is None
    assert (cost.throughput is not None) == measures["throughput"]
    assert (cost.latency_ms is not None) == measures["latency"]
    if measures["throughput"] or measures["latency"]:
        assert cost.compiled == compiled, row
    assert result.runtime["world_size"] == row["workers"]
    if row["family"] == "coatnet" and row["workers"] == 2:
        assert result.runtime["synced_batchnorms"] > 0  # BatchNorm over the global batch
    if row["resume"]:  # continued from the saved epoch: epoch 1 restored as it was, epoch 2 trained
        assert [m.epoch for m in first.epochs] == [1] and [m.epoch for m in result.epochs] == [1, 2]
        assert result.epochs[0] == first.epochs[0] and result.final["steps"] == 2 * first.final["steps"]
    else:
        assert [m.epoch for m in result.epochs] == [1]
