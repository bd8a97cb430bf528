"""Data: the synthetic dataset, configuration errors, CIFAR/ImageFolder loaders on tiny files, batching."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from trials.config.data_config import AugmentConfig, DataConfig
from trials.configio import ConfigError, from_mapping, to_mapping
from trials.data import (
    CIFAR10_STATS,
    LoaderBatches,
    Normalizer,
    TensorBatches,
    build_data,
    crop_flip_batch,
    split_indices,
)
from trials.data.synthetic import class_grid, describe_class, make_synthetic


def epoch_batches(source, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    source.set_epoch(epoch)
    return list(source)


def same_batches(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b, strict=True)
    )


# --- synthetic -------------------------------------------------------------------------------


def test_synthetic_shape_dtype_balance_and_determinism():
    images, labels = make_synthetic(200, 10, seed=3)
    assert images.shape == (200, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.shape == (200,) and labels.dtype == torch.int64
    assert torch.bincount(labels, minlength=10).tolist() == [20] * 10
    again = make_synthetic(200, 10, seed=3)
    assert torch.equal(images, again[0]) and torch.equal(labels, again[1])
    other = make_synthetic(200, 10, seed=4)
    assert not torch.equal(images, other[0])
    counts = torch.bincount(make_synthetic(205, 10, seed=0)[1], minlength=10)
    assert counts.max() - counts.min() <= 1
    assert images.float().std() > 30  # not blank


def test_synthetic_other_sizes_and_class_counts():
    images, labels = make_synthetic(100, 100, seed=0, image_size=48)
    assert images.shape == (100, 3, 48, 48) and labels.max() == 99
    assert make_synthetic(4, 2, seed=0)[0].shape == (4, 3, 32, 32)
    shapes, textures = class_grid(10)
    assert shapes >= 2 and textures >= 2  # both cues carry information at 10 classes
    assert describe_class(0, 10) != describe_class(1, 10) != describe_class(shapes, 10)
    with pytest.raises(ValueError, match="num_classes"):
        make_synthetic(10, 101, seed=0)


def nearest_mean_accuracy(train_x, train_y, val_x, val_y, num_classes: int) -> float:
    means = torch.stack([train_x[train_y == c].mean(0) for c in range(num_classes)])
    return (torch.cdist(val_x, means).argmin(1) == val_y).float().mean().item()


def test_synthetic_is_not_solvable_from_raw_pixels_or_color():
    train_x, train_y = make_synthetic(2000, 10, seed=0)
    val_x, val_y = make_synthetic(500, 10, seed=1)
    pixels = nearest_mean_accuracy(train_x.flatten(1).float(), train_y, val_x.flatten(1).float(), val_y, 10)
    assert pixels < 0.3  # chance is 0.1; measured about 0.1
    color = nearest_mean_accuracy(train_x.float().mean((2, 3)), train_y, val_x.float().mean((2, 3)), val_y, 10)
    assert color < 0.2


# --- configuration errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "imagenet"}, "name"),
        ({"name": "cifar10"}, "data_dir"),
        ({"name": "imagefolder"}, "data_dir"),
        ({"download": True}, "download"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"val_fraction": -0.1}, "val_fraction"),
        ({"batch_size": 0}, "batch_size"),
        ({"num_classes": 101}, "num_classes"),
        ({"image_size": 4}, "image_size"),
        ({"num_workers": -1}, "num_workers"),
        ({"device_resident": "yes"}, "device_resident"),
    ],
)
def test_config_errors_name_the_field(changes, field):
    with pytest.raises(ConfigError) as info:
        DataConfig(**changes)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("augment", "field"),
    [
        ({"mixup_alpha": -0.5}, "data.augment.mixup_alpha"),
        ({"cutmix_alpha": "1"}, "data.augment.cutmix_alpha"),
        ({"randaugment": [2, 31]}, "data.augment.randaugment"),
        ({"randaugment": [2]}, "data.augment.randaugment"),
        ({"hflip": 1}, "data.augment.hflip"),
    ],
)
def test_augment_errors_from_yaml_mapping_name_the_path(augment, field):
    with pytest.raises(ConfigError) as info:
        from_mapping(DataConfig, {"augment": augment}, "data")
    assert info.value.field == field


def test_config_from_mapping():
    config = from_mapping(DataConfig, {"batch_size": 32, "augment": {"randaugment": [2, 9]}}, "data")
    assert config.augment.randaugment == (2, 9) and config.uses_loader()
    assert config.resolved_eval_batch_size == 64 and config.resolved_image_size == 32
    assert not DataConfig().uses_loader()


# --- batching on the synthetic dataset -----------------------------------------------------------


def small_config(**changes) -> DataConfig:
    return DataConfig(**{"train_size": 200, "val_size": 70, "batch_size": 32, "eval_batch_size": 32, **changes})


def test_synthetic_bundle_batches():
    bundle = build_data(small_config())
    assert isinstance(bundle.train, TensorBatches) and isinstance(bundle.val, TensorBatches)
    assert (bundle.num_classes, bundle.image_size, bundle.train_size, bundle.val_size) == (10, 32, 200, 70)
    assert bundle.mix is None
    train = list(bundle.train)
    assert len(train) == len(bundle.train) == 200 // 32  # incomplete last batch dropped
    x, y = train[0]
    assert x.shape == (32, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert abs(x.mean().item()) < 0.5 and 0.5 < x.std().item() < 1.5  # normalised
    val = list(bundle.val)
    assert [len(v[1]) for v in val] == [32, 32, 6]  # nothing dropped
    assert torch.equal(torch.cat([v[1] for v in val]), bundle.val.labels)  # fixed order
    assert same_batches(val, list(bundle.val))


def test_same_seed_same_batches_epoch_by_epoch():
    a, b = build_data(small_config(seed=5)), build_data(small_config(seed=5))
    epoch0, epoch1 = list(a.train), list(a.train)  # each pass advances the epoch
    assert same_batches(epoch0, epoch_batches(b.train, 0))
    assert same_batches(epoch1, epoch_batches(b.train, 1))
    assert not torch.equal(epoch0[0][1], epoch1[0][1])  # reshuffled
    b.set_epoch(0)
    assert same_batches(epoch0, list(b.train))
    c = build_data(small_config(seed=6))
    assert not torch.equal(epoch0[0][0], next(iter(c.train))[0])


def test_per_sample_crop_and_flip_differ_within_a_batch():
    image, _ = make_synthetic(1, 10, seed=0)
    copies = image.expand(16, -1, -1, -1).contiguous()
    source = TensorBatches(
        copies,
        torch.zeros(16, dtype=torch.int64),
        batch_size=16,
        normalize=Normalizer(((0.5,) * 3, (0.25,) * 3), 32, torch.device("cpu")),
        device=torch.device("cpu"),
        train=True,
        augment=AugmentConfig(),
        padding=4,
        seed=0,
    )
    ((x, _),) = list(source)
    distinct = {x[i].numpy().tobytes() for i in range(16)}
    assert len(distinct) > 8


def test_crop_flip_batch_matches_torchvision_per_sample():
    from torchvision.transforms.v2 import functional as TF

    images = torch.randint(0, 256, (6, 3, 10, 12), dtype=torch.uint8)
    offsets = torch.tensor([[0, 0], [4, 4], [8, 8], [1, 7], [6, 2], [3, 5]])
    flips = torch.tensor([False, True, False, True, True, False])
    out = crop_flip_batch(images, offsets, flips, padding=4)
    for i in range(6):
        expected = TF.crop(TF.pad(images[i], [4]), int(offsets[i, 0]), int(offsets[i, 1]), 10, 12)
        if flips[i]:
            expected = TF.horizontal_flip(expected)
        assert torch.equal(out[i], expected)


def test_val_fraction_split_is_disjoint_and_fixed_by_seed():
    train, held = split_indices(100, 0.2, seed=1)
    assert len(held) == 20 and len(train) == 80
    assert set(train.tolist()).isdisjoint(held.tolist()) and len(set(train.tolist()) | set(held.tolist())) == 100
    assert torch.equal(held, split_indices(100, 0.2, seed=1)[1])
    assert not torch.equal(held, split_indices(100, 0.2, seed=2)[1])

    bundle = build_data(small_config(val_fraction=0.25))
    assert (bundle.train_size, bundle.val_size) == (150, 50)
    train_rows = {row.numpy().tobytes() for row in bundle.train.images}
    val_rows = {row.numpy().tobytes() for row in bundle.val.images}
    assert train_rows.isdisjoint(val_rows)
    assert torch.equal(bundle.val.images, build_data(small_config(val_fraction=0.25)).val.images)


@pytest.mark.parametrize(("mixup", "cutmix"), [(0.8, 0.0), (0.0, 1.0), (0.8, 1.0)])
def test_mix_gives_soft_targets(mixup, cutmix):
    bundle = build_data(small_config(augment=AugmentConfig(mixup_alpha=mixup, cutmix_alpha=cutmix)))
    x, y = next(iter(bundle.train))
    mixed, targets = bundle.mix(x, y)
    assert mixed.shape == x.shape and targets.shape == (32, 10)
    assert torch.allclose(targets.sum(1), torch.ones(32))
    assert (targets >= 0).all()


def test_randaugment_uses_a_deterministic_loader():
    config = small_config(augment=AugmentConfig(randaugment=(2, 9)), num_workers=0)
    a, b = build_data(config), build_data(config)
    assert isinstance(a.train, LoaderBatches) and isinstance(a.val, TensorBatches)
    epoch = list(a.train)
    assert len(epoch) == 200 // 32 and epoch[0][0].shape == (32, 3, 32, 32) and epoch[0][0].dtype == torch.float32
    assert same_batches(epoch, epoch_batches(b.train, 0))


def test_image_size_resizes_in_memory_data():
    bundle = build_data(small_config(name="synthetic", image_size=40))
    assert next(iter(bundle.train))[0].shape == (32, 3, 40, 40)


# --- CIFAR on tiny files in the real on-disk format ------------------------------------------------


def write_pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def cifar_arrays(rng: np.random.Generator, n: int, num_classes: int) -> tuple[np.ndarray, list[int]]:
    return rng.integers(0, 256, (n, 3072), dtype=np.uint8), rng.integers(0, num_classes, n).tolist()


def write_cifar10(root: Path) -> dict[str, tuple[np.ndarray, list[int]]]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    written = {}
    for name, n in [*((f"data_batch_{i}", 4) for i in range(1, 6)), ("test_batch", 6)]:
        data, labels = written[name] = cifar_arrays(rng, n, 10)
        write_pickle(folder / name, {"batch_label": name, "data": data, "labels": labels, "filenames": [""] * n})
    write_pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)], "num_vis": 3072})
    return written


def write_cifar100(root: Path) -> dict[str, tuple[np.ndarray, list[int]]]:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    written = {}
    for name, n in [("train", 12), ("test", 5)]:
        data, labels = written[name] = cifar_arrays(rng, n, 100)
        entry = {"data": data, "fine_labels": labels, "coarse_labels": [label // 5 for label in labels]}
        write_pickle(folder / name, {**entry, "batch_label": name, "filenames": [""] * n})
    meta = {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": [f"k{i}" for i in range(20)]}
    write_pickle(folder / "meta", meta)
    return written


def test_cifar10_from_disk(tmp_path):
    written = write_cifar10(tmp_path)
    config = DataConfig(name="cifar10", data_dir=str(tmp_path), verify=False, batch_size=8, eval_batch_size=4)
    bundle = build_data(config)
    assert (bundle.num_classes, bundle.image_size, bundle.train_size, bundle.val_size) == (10, 32, 20, 6)
    val = list(bundle.val)
    x = torch.cat([b[0] for b in val])
    assert x.shape == (6, 3, 32, 32)
    assert torch.cat([b[1] for b in val]).tolist() == written["test_batch"][1]
    raw = torch.from_numpy(written["test_batch"][0]).view(6, 3, 32, 32).float() / 255
    mean, std = (torch.tensor(s).view(1, 3, 1, 1) for s in CIFAR10_STATS)
    assert torch.allclose(x, (raw - mean) / std, atol=1e-5)
    train = list(bundle.train)
    assert len(train) == 2 and train[0][0].shape == (8, 3, 32, 32)
    all_train_labels = [label for i in range(1, 6) for label in written[f"data_batch_{i}"][1]]
    assert sorted(bundle.train.labels.tolist()) == sorted(all_train_labels)


def test_cifar100_from_disk_with_loader_path(tmp_path):
    written = write_cifar100(tmp_path)
    config = DataConfig(
        name="cifar100",
        data_dir=str(tmp_path),
        verify=False,
        batch_size=4,
        num_workers=0,
        augment=AugmentConfig(randaugment=(1, 5)),
    )
    bundle = build_data(config)
    assert (bundle.num_classes, bundle.train_size, bundle.val_size) == (100, 12, 5)
    assert torch.cat([b[1] for b in bundle.val]).tolist() == written["test"][1]
    train = list(bundle.train)
    assert len(train) == 3 and train[0][0].shape == (4, 3, 32, 32)
    assert sorted(torch.cat([b[1] for b in train]).tolist()) == sorted(written["train"][1])


def test_cifar_errors(tmp_path):
    with pytest.raises(ConfigError, match="download: true") as info:
        build_data(DataConfig(name="cifar10", data_dir=str(tmp_path / "nowhere")))
    assert info.value.field == "data_dir"
    write_cifar10(tmp_path)
    with pytest.raises(ConfigError, match="verify: false") as info:  # tiny files cannot match the md5s
        build_data(DataConfig(name="cifar10", data_dir=str(tmp_path)))
    assert info.value.field == "data_dir"


# --- ImageFolder ------------------------------------------------------------------------------------


def write_image_folder(root: Path, splits: dict[str, int], classes=("ant", "bee", "cat")) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, per_class in splits.items():
        for name in classes:
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (36 + i, 40, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")


@pytest.mark.parametrize("loader_processes", [0, 1])
def test_image_folder(tmp_path, loader_processes):
    write_image_folder(tmp_path, {"train": 3, "val": 2})
    config = DataConfig(
        name="imagefolder", data_dir=str(tmp_path), image_size=32, batch_size=4, eval_batch_size=4,
        num_workers=loader_processes,
    )  # fmt: skip
    bundle = build_data(config)
    assert isinstance(bundle.train, LoaderBatches) and bundle.train.loader_processes == loader_processes
    assert (bundle.num_classes, bundle.image_size, bundle.train_size, bundle.val_size) == (3, 32, 9, 6)
    train = list(bundle.train)
    assert len(train) == 2 and all(x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 for x, _ in train)
    val = list(bundle.val)
    assert [len(y) for _, y in val] == [4, 2]
    assert torch.cat([y for _, y in val]).tolist() == [0, 0, 1, 1, 2, 2]
    # The per-sample seeds travel with the indices: the loader process count does not change the batches.
    reference = build_data(dataclasses.replace(config, num_workers=0))
    assert same_batches(train, epoch_batches(reference.train, 0))


def test_image_folder_val_fraction_and_missing_folders(tmp_path):
    write_image_folder(tmp_path, {"train": 4})
    with pytest.raises(ConfigError, match="val") as info:
        build_data(DataConfig(name="imagefolder", data_dir=str(tmp_path), image_size=32))
    assert info.value.field == "data_dir"
    config = DataConfig(name="imagefolder", data_dir=str(tmp_path), image_size=32, val_fraction=0.25, num_workers=0)
    bundle = build_data(config)
    assert (bundle.train_size, bundle.val_size) == (9, 3)
    train_paths, val_paths = set(bundle.train.loader.dataset.load.paths), set(bundle.val.loader.dataset.load.paths)
    assert train_paths.isdisjoint(val_paths) and len(train_paths | val_paths) == 12
    with pytest.raises(ConfigError, match="train") as info:
        build_data(DataConfig(name="imagefolder", data_dir=str(tmp_path / "missing")))
    assert info.value.field == "data_dir"


def test_digits_is_real_bundled_data_split_by_seed():
    pytest.importorskip("sklearn")
    bundle = build_data(DataConfig(name="digits", batch_size=64))
    assert bundle.num_classes == 10 and bundle.image_size == 32
    assert bundle.train_size + bundle.val_size == 1797
    assert bundle.val_size == round(1797 * 0.2)
    images, labels = next(iter(bundle.val))
    assert images.shape == (128, 3, 32, 32) and labels.max() <= 9  # eval batches: 2 x batch_size
    again = build_data(DataConfig(name="digits", batch_size=64))
    assert torch.equal(next(iter(again.val))[1], labels)  # the split is fixed by the seed


@pytest.mark.slow
def test_a_small_coatnet_learns_digits():
    pytest.importorskip("sklearn")
    from trials.runner import run_trial

    result = run_trial(
        {
            "model": "coatnet_tiny32",
            "data": {"name": "digits", "batch_size": 64},
            "training": {"epochs": 3, "lr": 2e-3},
            "measure": {"flops": False, "throughput": False, "latency": False},
        }
    )
    assert result.status == "completed", result.error
    assert result.final["top1"] > 60.0, result.final  # chance is 10%


def test_an_image_folder_trains_prices_and_records_one_image_size(tmp_path):
    """No data.image_size: the model's size is trained, priced by the cost model and recorded (not 224)."""
    from search_space.sampling import build_trial_config, cost_violations
    from search_space.validation import load_spec
    from trials.config.trial_config import load_trial_config

    write_image_folder(tmp_path, {"train": 2, "val": 1})
    spec = load_spec(
        {
            "name": "folder",
            "family": "coatnet",
            "base_model": "coatnet_tiny32",
            "data": {"name": "imagefolder", "data_dir": str(tmp_path), "batch_size": 2},
            "objectives": {"top1": "max", "flops": "min"},
            "constraints": ["flops <= 1e12"],
            "params": {"layout": {"choice": ["CCTT", "CTTT"]}},
        }
    )
    config = build_trial_config(spec, {"layout": "CCTT"})
    assert config["data"]["image_size"] == config["model"]["image_size"] == 32
    trial = load_trial_config({**config, "data": {k: v for k, v in config["data"].items() if k != "image_size"}})
    assert trial.data.resolved_image_size == trial.model.image_size == 32
    priced, _ = cost_violations(spec, config)
    from search_space.cost_model import estimate_cost
    from trials.models import resolve_config

    assert priced["flops"] == estimate_cost(resolve_config(config["model"])).flops  # priced at 32, not 224


def test_an_image_folder_is_priced_and_constrained_at_its_own_class_count(tmp_path):
    """The head follows the folder's classes (3 here), and so do params and FLOPs: a search on a 1000-class preset
    priced every configuration with a 1000-way head, refusing a spec whose 64-wide model builds at 150k params
    under a 200k limit, and showing ``num_classes: 1000`` for what trained with 3."""
    from search_space.sampling import build_trial_config, cost_violations, priced_model
    from search_space.validation import load_spec
    from trials.models import build_model

    write_image_folder(tmp_path, {"train": 1, "val": 1})
    spec = load_spec({
        "name": "folder", "family": "cait",
        "base_model": {"preset": "cait_xxs24", "patch_size": 16, "depth": 1, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "imagefolder", "data_dir": str(tmp_path), "image_size": 32, "batch_size": 2},
        "objectives": {"top1": "max", "flops": "min"}, "constraints": ["params <= 200000"],
        "params": {"embed_dim": {"choice": [64, 128]}},
    })  # fmt: skip
    config = build_trial_config(spec, {"embed_dim": 64})
    model = priced_model(config)
    assert model.num_classes == 3
    priced, violations = cost_violations(spec, config)
    built = build_model(config["model"], num_classes=3, image_size=32, in_chans=3)
    assert priced["params"] == sum(p.numel() for p in built.parameters()) < 200_000 and violations[0] <= 0


def test_tiny_files_trained_far_larger_warn_once(tmp_path):
    write_image_folder(tmp_path, {"train": 1, "val": 1})  # 36x40 files
    with pytest.warns(UserWarning, match=r"upscaled 6x"):
        build_data(DataConfig(name="imagefolder", data_dir=str(tmp_path), image_size=224, num_workers=0))


def test_an_image_folder_without_val_is_refused_before_dispatch(tmp_path):
    from search_space.validation import check_spec, load_spec
    from trials.configio import ConfigError

    write_image_folder(tmp_path, {"train": 2})
    spec = {
        "name": "noval",
        "family": "coatnet",
        "base_model": "coatnet_tiny32",
        "data": {"name": "imagefolder", "data_dir": str(tmp_path)},
        "objectives": {"top1": "max"},
        "params": {"layout": {"choice": ["CCTT", "CTTT"]}},
    }
    with pytest.raises(ConfigError, match=r"no val/ folder.*val_fraction"):
        check_spec(load_spec(spec))
    check_spec(load_spec({**spec, "data": {**spec["data"], "val_fraction": 0.5}}))


# -- mnist5k: real digits with a test split kept apart ------------------------------------------


def test_mnist5k_has_a_test_split_fixed_for_every_seed_and_a_validation_split_per_seed():
    from trials.data.loading import _mnist5k_splits

    splits = {seed: _mnist5k_splits(DataConfig(name="mnist5k", seed=seed)) for seed in (0, 1)}
    (train0, val0, test0), (_, val1, test1) = splits[0], splits[1]
    assert (len(train0.labels), len(val0.labels), len(test0.labels)) == (3000, 1000, 1000)
    assert torch.equal(test0.images, test1.images) and torch.equal(test0.labels, test1.labels)
    assert not torch.equal(val0.labels, val1.labels)  # validation is drawn per seed
    assert train0.images.shape[1:] == (3, 32, 32) and train0.images.dtype == torch.uint8
    assert set(test0.labels.tolist()) == set(range(10))
    # no image is in two splits (rows compared as bytes)
    def keys(split):
        return {bytes(x.numpy().tobytes()) for x in split.images[:, 0]}

    assert not keys(test0) & keys(val0) and not keys(test0) & keys(train0) and not keys(val0) & keys(train0)
    capped = _mnist5k_splits(DataConfig(name="mnist5k", seed=0, train_size=1000))[0]
    assert len(capped.labels) == 1000


def test_a_completed_mnist5k_trial_reports_test_metrics_once_at_the_end():
    from trials.runner import run_trial

    result = run_trial(
        {
            "model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2},
            "data": {"name": "mnist5k", "train_size": 256, "batch_size": 64, "image_size": 32},
            "training": {"epochs": 1, "lr": 1e-3, "warmup_epochs": 0},
            "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        }
    )
    assert result.status == "completed", result.error
    assert 0 <= result.final["test_top1"] <= 100 and result.final["test_loss"] > 0
    assert all("test" not in k for m in result.epochs for k in m.to_dict())  # never per epoch


def test_batchnorm_recalibration_recomputes_the_statistics_from_the_training_split_alone():
    """The recalibrated statistics depend on the weights and the training split only (not on what
    the running averages held before), the momentum comes back, and the eval-mode loss is recorded."""
    from trials.config.trial_config import TrainingConfig
    from trials.models import build_model
    from trials.runner import run_trial
    from trials.training.train import Trainer

    config = {
        "model": {"preset": "coatnet_tiny32", "depths": [1, 1, 1, 1, 1], "dims": [8, 8, 16, 32, 32]},
        "data": {"name": "synthetic", "train_size": 256, "val_size": 128, "batch_size": 64},
        "training": {"epochs": 1, "lr": 2e-3, "warmup_epochs": 0, "recalibrate_batchnorm": True},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
    }
    result = run_trial(config)
    assert result.status == "completed", result.error
    assert result.epochs[-1].train_eval_loss is not None and result.final["train_eval_loss"] > 0
    plain = run_trial({**config, "training": {**config["training"], "recalibrate_batchnorm": False}})
    assert plain.epochs[-1].train_eval_loss is None and "train_eval_loss" not in plain.final

    torch.manual_seed(0)
    data = build_data(DataConfig(train_size=256, val_size=64, batch_size=64), "cpu", train_eval=True)
    model = build_model(config["model"] | {"preset": "coatnet_tiny32"}, num_classes=10)
    trainer = Trainer(model, data, TrainingConfig(epochs=1, recalibrate_batchnorm=True), torch.device("cpu"))
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in norms:  # arbitrary running statistics before
        m.running_mean.fill_(3.0)
    trainer.recalibrate_batchnorm()
    first = [m.running_mean.clone() for m in norms]
    for m in norms:
        m.running_mean.fill_(-7.0)
    trainer.recalibrate_batchnorm()
    assert all(torch.allclose(a, m.running_mean) for a, m in zip(first, norms, strict=True))
    assert not torch.allclose(first[0], torch.full_like(first[0], 3.0))
    assert all(m.momentum == 0.1 for m in norms)


@pytest.mark.parametrize(
    ("name", "mirrored"),
    [("synthetic", True), ("digits", False), ("mnist5k", False), ("cifar10", True), ("imagefolder", True)],
)
def test_the_horizontal_flip_follows_the_dataset_unless_set(name, mirrored):
    """Issue 56: handwritten digits were flipped by default (a mirrored 2 is no digit). Unset, the flip
    is the dataset's (on where classes survive a mirror); set, it is the user's; either way the config
    holds the decision, which is what a trial records."""
    where = {"data_dir": "/nowhere"} if name in ("cifar10", "imagefolder") else {}
    assert DataConfig(name=name, **where).augment.hflip is mirrored
    from_yaml = from_mapping(DataConfig, {"name": name, **where, "augment": {"random_crop": False}})
    assert from_yaml.augment.hflip is mirrored
    for chosen in (True, False):
        assert DataConfig(name=name, augment=AugmentConfig(hflip=chosen), **where).augment.hflip is chosen
    assert to_mapping(DataConfig(name=name, **where))["augment"]["hflip"] is mirrored  # as a trial records it
