"""One trial end to end: config validation, training that learns, divergence, failure, resume."""

from __future__ import annotations

import math

import pytest

from trials.config.trial_config import TrialConfig, load_trial_config
from trials.configio import ConfigError
from trials.runner import run_trial

FAST_MEASURE = {"batch_size": 8, "repeats": 2, "warmup": 1}
TINY_MODEL = {"preset": "cait_tiny32", "depth": 2, "embed_dim": 48, "num_heads": 2}


def tiny_trial(**changes) -> dict:
    """A trial that runs in a couple of seconds on a CPU. ``data``/``training``/``measure`` changes
    are merged into the defaults; other keys (``model`` included) replace them."""
    config = {
        "model": TINY_MODEL,
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 256, "val_size": 128, "batch_size": 32},
        "training": {"epochs": 2, "lr": 1e-3, "warmup_epochs": 0.5},
        "measure": FAST_MEASURE,
        "seed": 3,
    }
    for key, value in changes.items():
        if key in ("data", "training", "measure"):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"training": {"lr": -1}}, "training.lr", "must be > 0"),
        ({"training": {"epochs": 0}}, "training.epochs", "positive integer"),
        ({"training": {"lerning_rate": 1}}, "training.lerning_rate", "unknown key"),
        (
            {"model": {"family": "cait", "embed_dim": 100, "num_heads": 8}},
            "model.embed_dim",
            "not divisible by num_heads 8",
        ),
        ({"model": {"preset": "coatnet_tiny32", "layout": "CTCT"}}, "model.layout", "convolution stage after"),
        ({"model": "cait_gigantic"}, "model", "unknown preset"),
        ({"precision": "fp8"}, "precision", "must be one of auto, fp32, bf16"),
        ({"colour": "red"}, "colour", "unknown key"),
        ({"measure": {"batch_size": 0}}, "measure.batch_size", "positive integer"),
    ],
)
def test_invalid_trial_configs_name_the_key(changes, path, fragment):
    with pytest.raises(ConfigError) as excinfo:
        load_trial_config(tiny_trial(**changes))
    assert excinfo.value.field == path
    assert fragment in str(excinfo.value)


def test_trial_config_round_trips():
    config = load_trial_config(tiny_trial())
    assert isinstance(config, TrialConfig)
    assert load_trial_config(config.to_dict()) == config


# -- running -----------------------------------------------------------------------------------


def test_a_trial_reports_cost_and_per_epoch_metrics():
    seen = []
    result = run_trial(tiny_trial(), callback=lambda metrics, trainer: seen.append(metrics.epoch))
    assert result.status == "completed", result.error
    assert seen == [1, 2]
    assert [m.epoch for m in result.epochs] == [1, 2]
    for m in result.epochs:
        for value in (m.train_loss, m.eval_loss, m.top1, m.top5, m.lr, m.epoch_time, m.train_images_per_s):
            assert math.isfinite(value)
        assert 0 <= m.top1 <= m.top5 <= 100
        assert 0 <= m.data_wait_fraction <= 1
    assert result.epochs[-1].step == 2 * (256 // 32)
    cost = result.cost
    assert cost.params > 0 and cost.flops > 0 and cost.flops_source == "fvcore"
    assert cost.throughput_min <= cost.throughput <= cost.throughput_max
    assert cost.latency_ms_min <= cost.latency_ms <= cost.latency_ms_max
    assert cost.batch_size == 8 and cost.dtype == "fp32" and cost.device.startswith("cpu")
    assert cost.torch_version
    # The head follows the dataset.
    assert result.config["model"]["num_classes"] == 4
    assert set(result.final) >= {"top1", "top5", "eval_loss", "train_loss", "best_top1", "epochs", "steps"}


def test_on_epoch_gets_each_epochs_record_and_its_errors_are_one_warning_not_a_failed_trial():
    records = []
    result = run_trial(tiny_trial(training={"epochs": 3}), on_epoch=records.append)
    assert result.status == "completed", result.error
    assert [(r.trial, r.epoch, r.epochs) for r in records] == [(None, 1, 3), (None, 2, 3), (None, 3, 3)]
    assert [(r.train_loss, r.top1, r.epoch_s) for r in records] == [
        (m.train_loss, m.top1, m.epoch_time) for m in result.epochs
    ]
    assert 0 < records[0].elapsed_s < records[1].elapsed_s < records[2].elapsed_s <= result.wall_time_s
    calls = []

    def broken(record) -> None:
        calls.append(record.epoch)
        raise KeyError("top5")

    # With the trainer's callback too (it stops the trial after epoch 2): both run, the trial stops as told.
    said = r"on_epoch callback .*broken raised KeyError: 'top5' \(at epoch 1\)"
    with pytest.warns(RuntimeWarning, match=said) as caught:
        stopped = run_trial(tiny_trial(training={"epochs": 3}), on_epoch=broken,
                            callback=lambda metrics, trainer: metrics.epoch == 2)  # fmt: skip
    assert stopped.status == "completed" and stopped.stopped_early and calls == [1, 2]
    assert len([w for w in caught if "on_epoch" in str(w.message)]) == 1  # said once, called every epoch
    assert [m.train_loss for m in stopped.epochs] == [m.train_loss for m in result.epochs[:2]]  # the same run
    with pytest.raises(TypeError, match="run_trial: on_epoch must be a callable taking an EpochProgress, not str"):
        run_trial(tiny_trial(), on_epoch="print")


def test_same_seed_same_metrics():
    first, second = run_trial(tiny_trial()), run_trial(tiny_trial())
    assert first.status == second.status == "completed"
    assert [m.train_loss for m in first.epochs] == [m.train_loss for m in second.epochs]
    assert [m.top1 for m in first.epochs] == [m.top1 for m in second.epochs]
    other = run_trial(tiny_trial(seed=4))
    assert [m.train_loss for m in other.epochs] != [m.train_loss for m in first.epochs]


def test_step_budget_and_early_stop():
    result = run_trial(tiny_trial(training={"steps": 5, "epochs": 1}))
    assert result.status == "completed"
    assert [m.step for m in result.epochs] == [5]
    stopped = run_trial(tiny_trial(training={"epochs": 3}), callback=lambda metrics, trainer: True)
    assert stopped.stopped_early and len(stopped.epochs) == 1


def test_an_absurd_learning_rate_diverges_without_raising():
    result = run_trial(tiny_trial(training={"lr": 1e6, "grad_clip": None, "warmup_epochs": 0}))
    assert result.status == "diverged"
    assert result.diverged_at_step is not None and result.diverged_at_step >= 1
    assert "at step" in result.error
    for m in result.epochs:
        assert math.isfinite(m.train_loss) and math.isfinite(m.top1)


def test_a_config_that_fails_to_build_is_failed_with_the_message():
    result = run_trial(tiny_trial(model={"family": "cait", "embed_dim": 100, "num_heads": 8}))
    assert result.status == "failed"
    assert "model.embed_dim: 100 is not divisible by num_heads 8" in result.error
    missing = run_trial(tiny_trial(data={"name": "cifar10", "data_dir": "/nonexistent/cifar"}))
    assert missing.status == "failed"
    assert "/nonexistent/cifar" in missing.error


def test_resume_from_a_checkpoint_equals_an_uninterrupted_run():
    config = tiny_trial(training={"epochs": 3}, model={**TINY_MODEL, "drop_path_rate": 0.1})
    full = run_trial(config)
    saved = {}

    def stop_after_first(metrics, trainer):
        saved["state"] = trainer.state_dict()
        return True

    partial = run_trial(config, callback=stop_after_first)
    assert len(partial.epochs) == 1
    resumed = run_trial(config, resume_state=saved["state"])
    assert [m.epoch for m in resumed.epochs] == [1, 2, 3]
    assert [m.train_loss for m in resumed.epochs] == pytest.approx([m.train_loss for m in full.epochs], abs=1e-6)
    assert resumed.final["top1"] == pytest.approx(full.final["top1"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "epochs", "lr", "image_size", "threshold"),
    [
        # A ViT needs more epochs than a conv stem to get going on a small dataset (as in the papers); at
        # 16 px (16 patches) it reaches ~68% in 12 epochs at lr 3e-3 in under half a CPU minute.
        ({"preset": "cait_tiny32", "depth": 4, "embed_dim": 64, "num_heads": 2, "ca_depth": 1}, 12, 3e-3, 16, 30.0),
        ("coatnet_tiny32", 3, 1e-3, 32, 40.0),
    ],
)
def test_small_models_learn_synthetic_far_above_chance(model, epochs, lr, image_size, threshold):
    """Under a CPU minute each: 10 classes, chance is 10%."""
    config = tiny_trial(
        model=model,
        data={"num_classes": 10, "train_size": 5000, "val_size": 500, "batch_size": 64, "image_size": image_size},
        training={"epochs": epochs, "lr": lr, "label_smoothing": 0.0},
    )
    result = run_trial(config)
    assert result.status == "completed", result.error
    assert result.final["top1"] > threshold, [m.top1 for m in result.epochs]
    assert result.epochs[-1].train_loss < result.epochs[0].train_loss


def test_an_epochs_learning_rate_is_the_mean_over_its_steps():
    """Warmup moves the rate within an epoch: the rate at the epoch's start would understate it 40x."""
    from trials.training.optimiser import WarmupCosine

    config = tiny_trial(training={"epochs": 2, "lr": 2e-3, "warmup_epochs": 1, "min_lr": 1e-5})
    result = run_trial(config)
    steps = result.epochs[0].step
    schedule = WarmupCosine(steps, 2 * steps, 1e-5 / 2e-3)
    expected = [2e-3 * sum(schedule(i) for i in range(s, s + steps)) / steps for s in (0, steps)]
    assert [m.lr for m in result.epochs] == pytest.approx(expected, rel=1e-9)
