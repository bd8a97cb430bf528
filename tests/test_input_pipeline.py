"""The input pipeline at 224 px (issue 35): uint8 from the workers, the device normalises, JPEGs
decoded on the GPU, worker counts from the trial's CPUs, and data-starved epochs flagged.

The GPU decode is proved on a CPU as the other CUDA contracts are (``tests/test_cuda_contracts.py``):
CUDA's initialisation is stubbed, moves to ``cuda`` stay on the CPU, and
``torchvision.io.decode_jpeg`` is replaced by a recording CPU decoder, so the test checks which
bytes reach it and that it is asked for the CUDA device.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torchvision.io
from PIL import Image

from dashboards.report import write_report
from harness.search.record.progress import ProgressCallback
from harness.search.result_keys import NUMBER_KEY
from harness.search.session import SearchSession
from harness.store import Store
from trials.config.data_config import DATA_STARVED_FRACTION, AugmentConfig, DataConfig
from trials.config.trial_config import TrainingConfig
from trials.configio import ConfigError
from trials.data import build_data, bundle
from trials.data.augmentation import eval_transform, normalize_transform, train_transform
from trials.data.loading import IMAGENET_STATS
from trials.data.sources import EncodedDataset, SampleDataset, is_jpeg
from trials.training.train import EpochMetrics, Trainer

ROOT = Path(__file__).parents[1]
JPEG_MAGIC = bytes((0xFF, 0xD8, 0xFF))


def write_folder(root: Path, per_class: int = 3, png: bool = True) -> None:
    """train/ and val/ with three classes of JPEGs of different sizes; one PNG in each split (the CPU path)."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(3):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (40 + 3 * i, 48 + c, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)
        if png:
            pixels = rng.integers(0, 256, (44, 50, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / split / "class0" / "extra.png")


def folder_config(root: Path, **overrides) -> DataConfig:
    settings = {"image_size": 32, "batch_size": 4, "eval_batch_size": 5, "num_workers": 0, **overrides}
    return DataConfig(name="imagefolder", data_dir=str(root), **settings)


def old_batch(dataset: SampleDataset, keys: list[tuple[int, int | None]]) -> torch.Tensor:
    """The batch as workers made it before: the same uint8 transform, then float32 normalised per sample."""
    normalize = normalize_transform(IMAGENET_STATS)
    return torch.stack([normalize(dataset[key][0]) for key in keys])


# -- uint8 from the workers, normalised on the device ----------------------------------------------


def test_image_folder_workers_ship_uint8_and_the_device_normalises_as_the_workers_did(tmp_path):
    write_folder(tmp_path)
    data = build_data(folder_config(tmp_path), "cpu")
    assert data.decode == "cpu"
    dataset = data.train.loader.dataset
    image, _ = dataset[(0, 12345)]
    assert image.dtype == torch.uint8 and image.shape == (3, 32, 32)  # what crosses the process boundary
    raw = next(iter(data.train.loader))[0]
    assert raw.dtype == torch.uint8  # the collated batch, before the device's pass
    keys = next(iter(data.train.sampler))
    images, _ = next(iter(data.train))
    assert images.dtype == torch.float32
    torch.testing.assert_close(images, old_batch(dataset, keys), atol=1e-5, rtol=1e-5)
    val_keys = next(iter(data.val.sampler))
    val_images, _ = next(iter(data.val))
    torch.testing.assert_close(val_images, old_batch(data.val.loader.dataset, val_keys), atol=1e-5, rtol=1e-5)


def test_the_in_memory_randaugment_path_ships_uint8_and_normalises_with_the_datasets_statistics():
    config = DataConfig(
        name="synthetic", num_classes=4, train_size=24, val_size=8, batch_size=8, num_workers=0,
        augment=AugmentConfig(randaugment=(2, 9)),
    )  # fmt: skip
    data = build_data(config, "cpu")
    dataset = data.train.loader.dataset
    assert dataset[(3, 7)][0].dtype == torch.uint8
    keys = next(iter(data.train.sampler))
    images, _ = next(iter(data.train))
    normalize = normalize_transform((data.mean, data.std))
    expected = torch.stack([normalize(dataset[key][0]) for key in keys])
    torch.testing.assert_close(images, expected, atol=1e-5, rtol=1e-5)


def test_the_uint8_transforms_end_in_uint8_at_the_training_size():
    image = torch.randint(0, 256, (3, 50, 70), dtype=torch.uint8)
    for transform in (train_transform(AugmentConfig(randaugment=(2, 9)), 32, None), eval_transform(32)):
        out = transform(image)
        assert out.dtype == torch.uint8 and tuple(out.shape) == (3, 32, 32)


# -- worker counts ----------------------------------------------------------------------------------


def test_workers_follow_the_trials_cpus_one_core_left_to_the_training_process(monkeypatch):
    monkeypatch.setattr(bundle, "usable_cpus", lambda: 64)
    assert bundle.auto_loader_processes(cpus=16) == 15
    assert bundle.auto_loader_processes(cpus=10) == 9  # the ImageFolder presets' old allocation was capped at 8
    assert bundle.auto_loader_processes(cpus=64) == 63  # an allocation is the bound: no fixed cap
    assert bundle.auto_loader_processes(cpus=100) == 63  # never more than the cores this process may use
    # no allocation: a shared machine
    assert bundle.auto_loader_processes(cpus=None) == bundle.UNALLOCATED_MAX_LOADER_PROCESSES
    assert bundle.auto_loader_processes(cpus=1) == 0  # a CPU trial needs its one core to train
    assert bundle.auto_loader_processes(cpus=1, accelerator=True) == 1  # a GPU trial overlaps decoding with the step
    assert bundle.auto_loader_processes(cpus=0.5, accelerator=True) == 1
    assert bundle.loader_processes_for(DataConfig(num_workers=8), cpus=2) == 2  # an explicit count stays within cpus
    assert bundle.loader_processes_for(DataConfig(), cpus=4, accelerator=True) == 3


# -- JPEGs decoded on the GPU (CUDA stubbed) --------------------------------------------------------


@pytest.fixture
def fake_cuda(monkeypatch):
    """CUDA as a CPU can fake it for the data path: initialisation stubbed, a move to cuda stays on the CPU."""
    moves: list[str] = []
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    tensor_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if (isinstance(target, torch.device) and target.type == "cuda") or str(target).startswith("cuda"):
            moves.append(str(target))
            return self
        return tensor_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    return moves


@pytest.fixture
def recorded_decodes(monkeypatch):
    """torchvision.io.decode_jpeg replaced by the CPU decoder, recording each call's device and inputs."""
    calls: list[tuple[torch.device, list[torch.Tensor]]] = []
    real = torchvision.io.decode_jpeg

    def decode_jpeg(input, mode=torchvision.io.ImageReadMode.UNCHANGED, device="cpu", apply_exif_orientation=False):
        calls.append((torch.device(device), list(input) if isinstance(input, list) else [input]))
        return real(input, mode=mode)

    monkeypatch.setattr(torchvision.io, "decode_jpeg", decode_jpeg)
    return calls


@pytest.mark.parametrize("loader_processes", [0, 1])
def test_on_cuda_workers_read_bytes_and_the_batch_is_decoded_on_the_gpu(
    tmp_path, fake_cuda, recorded_decodes, loader_processes
):
    write_folder(tmp_path)
    config = folder_config(tmp_path, num_workers=loader_processes)
    data = build_data(config, "cuda")
    assert data.decode == "cuda" and isinstance(data.train.loader.dataset, EncodedDataset)
    payload, _, seed = data.train.loader.dataset[(0, 99)]
    assert payload.ndim == 1 and is_jpeg(payload) and seed == 99  # the file's bytes: nothing decoded on the worker
    train = list(data.train)
    val = list(data.val)
    assert recorded_decodes, "no JPEG reached decode_jpeg"
    assert all(device == torch.device("cuda") for device, _ in recorded_decodes)
    decoded = [bytes(item[:3].tolist()) for _, items in recorded_decodes for item in items]
    assert all(head == JPEG_MAGIC for head in decoded)  # the PNGs took the CPU path on the worker
    visited = [
        source.loader.dataset.paths[index]
        for source in (data.train, data.val)
        for keys in source.sampler
        for index, _ in keys
    ]  # the epoch-0 keys again: the sampler is fixed by (seed, epoch)
    assert len(decoded) == sum(path.endswith(".jpg") for path in visited) and len(visited) > len(decoded)
    assert all(x.dtype == torch.float32 and x.shape[1:] == (3, 32, 32) for x, _ in train + val)
    assert all(x.is_contiguous(memory_format=torch.channels_last) for x, _ in train)  # CUDA's layout
    assert "cuda" in fake_cuda  # labels and the non-JPEG images moved to the device
    # The same draws as the CPU path: the per-sample transform runs under the same sample seeds.
    reference = build_data(config, "cpu", channels_last=True)
    for (x, y), (x_cpu, y_cpu) in zip(train + val, list(reference.train) + list(reference.val), strict=True):
        assert torch.equal(y, y_cpu)
        torch.testing.assert_close(x, x_cpu, atol=1e-5, rtol=1e-5)


def test_gpu_decode_is_automatic_on_cuda_only_and_refused_on_a_cpu(tmp_path, fake_cuda):
    write_folder(tmp_path, png=False)
    assert build_data(folder_config(tmp_path), "cpu").decode == "cpu"
    assert build_data(folder_config(tmp_path, gpu_decode=False), "cuda").decode == "cpu"
    with pytest.raises(ConfigError) as info:
        build_data(folder_config(tmp_path, gpu_decode=True), "cpu")
    assert info.value.field == "gpu_decode"
    with pytest.raises(ConfigError):
        DataConfig(name="imagefolder", data_dir=str(tmp_path), gpu_decode="yes")


# -- data-starved epochs ----------------------------------------------------------------------------


class SlowTransform:
    """A transform that takes its time: the loader cannot keep up with the model."""

    def __init__(self, transform, seconds: float):
        self.transform, self.seconds = transform, seconds

    def __call__(self, image):
        time.sleep(self.seconds)
        return self.transform(image)


def linear_trainer(data) -> Trainer:
    """A model whose step costs next to nothing: the epoch's time is the loader's."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * data.image_size**2, data.num_classes))
    return Trainer(model, data, TrainingConfig(epochs=1, compile=False), torch.device("cpu"))


def test_an_epoch_that_waits_for_its_data_is_flagged_in_the_record_with_one_note():
    config = DataConfig(
        name="synthetic", num_classes=4, train_size=32, val_size=8, batch_size=8, num_workers=0,
        augment=AugmentConfig(randaugment=(1, 5)),
    )  # fmt: skip
    data = build_data(config, "cpu")
    dataset = data.train.loader.dataset
    dataset.transform = SlowTransform(dataset.transform, 0.1)  # 0.8 s of loading per 8-image batch
    trainer = linear_trainer(data)
    with pytest.warns(RuntimeWarning, match="data-starved"):
        trainer.fit(progress=False)
    epoch = trainer.history[0]
    assert epoch.data_wait_fraction > DATA_STARVED_FRACTION and epoch.data_starved
    assert epoch.to_dict()["data_starved"] is True
    assert len(trainer.notes) == 1 and "search.resources.cpus" in trainer.notes[0]
    # An epoch read back from an older checkpoint (no flag stored) gets it from its wait fraction.
    stored = {k: v for k, v in epoch.to_dict().items() if k != "data_starved"}
    assert EpochMetrics(**stored).data_starved


def test_the_flag_is_a_wait_above_a_fifth_of_the_epoch_and_derived_not_passed():
    base = {"epoch": 1, "step": 4, "train_loss": 1.0, "eval_loss": 1.0, "top1": 50.0, "top5": 90.0, "lr": 1e-3,
            "epoch_time": 10.0, "train_images_per_s": 100.0}  # fmt: skip
    assert not EpochMetrics(**base, data_wait_fraction=0.05).data_starved
    assert not EpochMetrics(**base, data_wait_fraction=DATA_STARVED_FRACTION).data_starved
    assert EpochMetrics(**base, data_wait_fraction=0.21).data_starved
    assert not EpochMetrics(**base, data_wait_fraction=0.05, data_starved=True).data_starved


def test_the_progress_line_names_a_trial_with_starved_epochs(store_url):
    stream = io.StringIO()
    with Store.open(store_url) as store:
        store.create_study("feed", {}, {"top1": "max", "flops": "min"})
        progress = ProgressCallback(
            store_url, "feed", {"top1": "max", "flops": "min"}, stream=stream, session=SearchSession("progress")
        )
        starved, fed = SimpleNamespace(trial_id="a"), SimpleNamespace(trial_id="b")
        for epoch, wait in enumerate([0.45, 0.1, 0.3], start=1):
            progress.on_trial_result(0, [], starved, {"epoch": epoch, "data_wait_fraction": wait, NUMBER_KEY: 7})
        progress.on_trial_result(0, [], fed, {"epoch": 1, "data_wait_fraction": 0.05, NUMBER_KEY: 8})
        progress.on_trial_complete(0, [], starved)
        progress.on_trial_complete(0, [], fed)
        first, second = stream.getvalue().splitlines()
        assert "data-starved: trial 7 2/3 epochs waited over 20% for data (worst 45%)" in first
        assert "data-starved" not in second
        progress._store.close()


def _epoch(epoch: int, wait: float) -> dict:
    return {"epoch": epoch, "top1": 10.0 * epoch, "data_wait_fraction": wait, "images_per_s": 100.0}


def test_the_report_names_the_trials_and_epochs_that_starved(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("feed", {}, {"top1": "max", "flops": "min"})
        for number, waits in ((0, [0.05, 0.1]), (1, [0.5, 0.15, 0.35]), (2, [0.01])):
            store.start_trial("feed", number, {"lr": 0.1 * (number + 1)})
            for epoch, wait in enumerate(waits, start=1):
                store.record_epoch("feed", number, _epoch(epoch, wait))
        store.create_study("fed", {}, {"top1": "max", "flops": "min"})
        store.start_trial("fed", 0, {"lr": 0.1})
        store.record_epoch("fed", 0, _epoch(1, 0.02))
        html = write_report(store, ["feed", "fed"], None, tmp_path / "report.html").read_text()
    starved = html.split("Data-starved epochs")[1].split("Pareto front")[0]
    assert "2 of 6 epochs in 1 trials spent more than 20%" in starved
    assert '<td>1</td><td class="text">running</td><td>2</td><td class="text">1, 3</td><td>50%</td>' in starved
    fed = html.split("Study fed")[1]
    assert "No epoch of the 1 recorded waited more than 20% of its time for data." in fed


# -- the benchmark ----------------------------------------------------------------------------------


def test_the_dataloader_benchmark_runs_in_its_quick_mode_and_writes_its_results(tmp_path):
    out = tmp_path / "dataloader.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.dataloader", "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "float32 on worker (before)" in done.stdout and "uint8 on worker (now)" in done.stdout
    result = json.loads(out.read_text())
    rows = {row["path"]: row for row in result["rows"]}
    assert set(rows) == {
        "float32 on worker (before)", "uint8 on worker (now)", "uint8, normalised on this CPU",
        "file bytes only (GPU decode)",
    }  # fmt: skip
    assert all(row["median img/s"] > 0 for row in rows.values())
    shipped = rows["float32 on worker (before)"]["KB/batch shipped"] / rows["uint8 on worker (now)"]["KB/batch shipped"]
    assert shipped == pytest.approx(4.0)
