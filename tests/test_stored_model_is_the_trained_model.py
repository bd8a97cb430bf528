"""What the store says is what ran (issue 56, deliverable 4): for both families and every data source,
the model config a search stores rebuilds the trained model, with its exact parameters and FLOPs.

A CoAtNet searched on ``mnist5k`` at 32 px was stored with the preset's ``image_size: 224`` and
``num_classes: 1000``: only its FLOPs showed what trained. The driver now applies the data's shape to
the config it records, and the worker reports the model it built (an image folder's classes are known
only where it is read). Here each (family, data source) pair goes the whole way without training: the
spec's trial config as the driver builds it, the worker's own build (data, then model), the outcome
recorded in a real store with the worker's report, and the stored config rebuilt.
"""

from __future__ import annotations

import json

import pytest
import torch
from test_data import write_cifar10, write_cifar100, write_image_folder

from harness.search.record.trial_end import record_outcome
from harness.search.result_keys import BUILT_MODEL_KEY, NUMBER_KEY, STATUS_KEY
from harness.store import Store
from search_space.sampling import build_trial_config
from search_space.validation import load_spec
from trials import runner
from trials.config.trial_config import load_trial_config
from trials.measurement.flops import count_flops
from trials.models import build_model, count_parameters

BASES = {  # the papers' presets at 224 px and 1000 classes: every data source reshapes them
    "cait": {"preset": "cait_xxs24", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
    "coatnet": {"preset": "coatnet_0", "depths": [1, 1, 1, 1, 1], "dims": [16, 16, 32, 32, 64]},
}
# Every data source, with what the data gives the model (image size, classes) and the flip it trains with.
SOURCES = {
    "synthetic": ({"num_classes": 7, "train_size": 16, "val_size": 8}, (32, 7), True),
    "digits": ({}, (32, 10), False),
    "mnist5k": ({"train_size": 64}, (32, 10), False),
    "cifar10": ({"verify": False}, (32, 10), True),
    "cifar100": ({"verify": False}, (32, 100), True),
    "imagefolder": ({"image_size": 64}, (64, 3), True),  # three class folders, counted where they are read
}


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_cifar10(root / "cifar10")
    write_cifar100(root / "cifar100")
    write_image_folder(root / "imagefolder", {"train": 2, "val": 1})
    return root


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("family", list(BASES))
def test_the_stored_model_config_rebuilds_the_trained_model(family, source, data_dirs, tmp_path):
    extra, (image_size, classes), hflip = SOURCES[source]
    data = {"name": source, "batch_size": 4, **extra}
    if source in ("cifar10", "cifar100", "imagefolder"):
        data["data_dir"] = str(data_dirs / source)
    spec = load_spec({
        "name": "shape", "family": family, "base_model": BASES[family], "data": data,
        "training": {"epochs": 1, "compile": False}, "params": {"lr": {"float": [1e-4, 1e-2]}},
        "objectives": {"top1": "max", "flops": "min"},
    })  # fmt: skip
    params = {"lr": 1e-3}
    driver_config = build_trial_config(spec, params)
    trainer = runner._build(load_trial_config(driver_config), {})  # the worker's build: data, then model
    built = trainer.model.config.to_dict()
    assert (built["image_size"], built["num_classes"], built["in_chans"]) == (image_size, classes, 3)
    if source != "imagefolder":  # the driver knows the shape of every dataset but a folder's class count
        assert driver_config["model"] == built
    assert driver_config["data"]["augment"]["hflip"] is hflip  # the flip it trains with, recorded

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("shape", spec.model_dump(mode="json"), dict(spec.objectives))
        result = {STATUS_KEY: "completed", NUMBER_KEY: 0, BUILT_MODEL_KEY: json.dumps(built), "final_top1": 50.0}
        record_outcome(store, "shape", spec.model_dump(mode="json"), {NUMBER_KEY: 0, **params}, result)
        stored = store.trials("shape", flatten_config=False).set_index("number").loc[0, "config"]
    assert stored["model"] == built
    rebuilt = build_model(stored["model"])
    assert count_parameters(rebuilt) == count_parameters(trainer.model)
    images = torch.randn(1, 3, image_size, image_size)
    assert count_flops(rebuilt, images).total == count_flops(trainer.model, images).total
    assert stored["data"]["augment"]["hflip"] is hflip
