"""The trial config's rules are declared beside its fields (trials.configio.Rule), not kept by hand.

A new field must come with a declared rule or be named below as validated by code; the search
space's bare training names are the fields TrainingConfig declares searchable; and a few declared
rules refuse bad values with the exact lines users read, while accepting their edge values.
"""

from __future__ import annotations

import dataclasses

import pytest

from search_space.spec import TRAINING_FIELDS
from trials.config.data_config import AugmentConfig, DataConfig
from trials.config.trial_config import (
    MAX_EPOCHS,
    DistributedConfig,
    MeasureConfig,
    TrainingConfig,
    TrialConfig,
    load_trial_config,
)
from trials.configio import ConfigError, rule_of, searchable_fields

# Fields validated by code in __post_init__ (a rule the declarations cannot say), or nested configs
# that validate themselves. Anything else needs a declared rule.
VALIDATED_BY_CODE = {
    TrainingConfig: {"betas", "compile_artifacts_dir"},  # a pair in [0, 1); an absolute path
    MeasureConfig: set(),
    DistributedConfig: set(),
    TrialConfig: {"model", "data", "training", "measure", "distributed", "init_from"},  # model/sections; a path
    AugmentConfig: {"randaugment"},  # a [num_ops, magnitude] pair
    DataConfig: {"data_dir", "num_classes", "augment"},  # required per dataset; synthetic only; nested
}


@pytest.mark.parametrize("cls", list(VALIDATED_BY_CODE), ids=lambda cls: cls.__name__)
def test_every_field_has_a_declared_rule_or_is_named_as_checked_by_code(cls):
    undeclared = {f.name for f in dataclasses.fields(cls) if rule_of(f) is None}
    assert undeclared == VALIDATED_BY_CODE[cls], "declare a rule for a new field (configio.integer, number, ...)"


def test_the_search_spaces_training_names_are_the_searchable_declared_fields():
    assert searchable_fields(TrainingConfig) == TRAINING_FIELDS
    assert TRAINING_FIELDS == (
        "epochs", "steps", "lr", "min_lr", "weight_decay", "warmup_epochs", "grad_clip", "label_smoothing",
    )  # fmt: skip


def _built(cls: type, values: dict) -> object:
    """``cls`` from ``values``; a trial config through its loader (it needs a model)."""
    return load_trial_config({"model": "cait_tiny32", **values}) if cls is TrialConfig else cls(**values)


@pytest.mark.parametrize(
    ("cls", "values", "line"),
    [
        (TrainingConfig, {"lr": -1}, "lr: must be > 0, got -1"),
        (TrainingConfig, {"lr": 0}, "lr: must be > 0, got 0"),
        (TrainingConfig, {"label_smoothing": 1.0}, "label_smoothing: must be in [0, 1), got 1.0"),
        (TrainingConfig, {"label_smoothing": 1}, "label_smoothing: must be in [0, 1), got 1"),
        (TrainingConfig, {"epochs": 0}, "epochs: must be a positive integer, got 0"),
        (TrainingConfig, {"epochs": MAX_EPOCHS + 1}, "epochs: must be at most 100,000, got 100001"),
        (TrainingConfig, {"epochs": 2.0}, "epochs: must be a positive integer, got 2.0"),
        (TrainingConfig, {"compile_budget_share": 0}, "compile_budget_share: must be a number in (0, 1], got 0"),
        (TrainingConfig, {"compile": 1}, "compile: must be true, false or auto, got 1"),  # 1 is no bool
        (TrainingConfig, {"recalibrate_batchnorm": "yes"}, "recalibrate_batchnorm: must be true or false, got 'yes'"),
        (TrainingConfig, {"grad_clip": 0}, "grad_clip: must be > 0, got 0"),
        (MeasureConfig, {"warmup": -1}, "warmup: must be >= 0, got -1"),
        (DistributedConfig, {"backend": "mpi"}, "backend: must be auto, nccl or gloo; got 'mpi'"),
        (TrialConfig, {"seed": -1}, "seed: must be an integer in 0..4,294,967,295 (2**32 - 1), got -1"),
        (TrialConfig, {"threads": 2000}, "threads: must be an integer in 1..1024 or null, got 2000"),
        (TrialConfig, {"precision": "fp8"}, "precision: must be one of auto, fp32, bf16, fp16; got 'fp8'"),
        (AugmentConfig, {"mixup_alpha": -0.5}, "mixup_alpha: must be a number >= 0 (0 disables), got -0.5"),
        (DataConfig, {"eval_batch_size": 0}, "eval_batch_size: must be an integer >= 1 or null, got 0"),
    ],
)
def test_a_declared_rule_refuses_a_bad_value_with_its_line(cls, values, line):
    with pytest.raises(ConfigError) as raised:
        _built(cls, values)
    assert str(raised.value) == line


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (TrainingConfig, {"label_smoothing": 0}),
        (TrainingConfig, {"compile_budget_share": 1}),
        (TrainingConfig, {"epochs": MAX_EPOCHS}),
        (TrainingConfig, {"steps": None, "grad_clip": None, "divergence_check_every": None}),
        (TrainingConfig, {"min_lr": 0, "weight_decay": 0, "warmup_epochs": 0}),
        (TrainingConfig, {"compile": False, "cuda_graphs": True}),
        (MeasureConfig, {"warmup": 0, "batch_size": None}),
        (TrialConfig, {"seed": 2**32 - 1, "threads": 1024, "gpu_memory_fraction": 1}),
        (DataConfig, {"num_workers": 0, "val_fraction": 0}),
    ],
)
def test_a_declared_rule_accepts_its_edge_values(cls, values):
    config = _built(cls, values)
    assert all(getattr(config, name) == value for name, value in values.items())


def test_a_rule_error_from_a_file_names_the_section():
    with pytest.raises(ConfigError, match=r"^training\.label_smoothing: must be in \[0, 1\), got 1$"):
        load_trial_config({"model": "cait_tiny32", "training": {"label_smoothing": 1}})
