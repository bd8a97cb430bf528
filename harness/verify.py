"""``archsearch verify``: re-measure a study's front alone, so the trade-off a user publishes is not noise.

In a search, a trial measures its throughput beside whatever else the machine runs (packed
trials, other workers): the same architecture can read 712 and 1,299 img/s in one study. Here
each front member is rebuilt from its stored config and measured on one device with nothing else
scheduled by archsearch, in ``repeats`` rounds that interleave the members (a drift of the machine
hits every member alike); each member gets the median and the spread of its rounds. The results
are stored as separate ``verified`` measurements (``Store.record_verified``), never over the
in-trial ones, and the front is recomputed among its members on the verified values, marking
those that drop off.
"""

from __future__ import annotations

import socket
import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboards.pareto import study_front
from dashboards.verified import compare_fronts
from harness.store import Store, StoreError
from search_space.sampling import data_shape
from trials.configio import ConfigError
from trials.errors import RunError
from trials.lazy import lazy_import

torch = lazy_import("torch")
models = lazy_import("trials.models")
measure = lazy_import("trials.measure")
timing = lazy_import("trials.timing")
gpu = lazy_import("trials.gpu")

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class VerifyError(RunError, ValueError):
    """The front cannot be verified here (the device, a member that no longer builds): one line, exit 2."""


@dataclass(frozen=True)
class VerifySettings:
    """How the front is re-measured: rounds, device, and the warm-up before the first round."""

    repeats: int = 5
    device: str = "auto"
    warmup: int = 2


def verify_front(store_url: str, study: str, settings: VerifySettings = VerifySettings()) -> pd.DataFrame:
    """Re-measure the front of ``study``, store the verified values, return the comparison table.

    Columns: number, the objectives (as measured in the trial), ``throughput_verified`` with
    ``throughput_verified_min``/``_max`` (and the same for latency), ``on_front`` (in-trial values)
    and ``on_verified_front`` (recomputed among the members on the verified values).
    """
    if settings.repeats < 1:
        raise StoreError(f"repeats must be >= 1, got {settings.repeats}")
    with Store.open(store_url, create=False) as store:
        objectives = store.objectives(study)
        front = study_front(store, study, objectives)
        numbers = [int(n) for n in front["number"]]
        records = store.trial_records(study, numbers)
    if not numbers:
        raise StoreError(f"study {study!r} has no completed trial on its front to verify")
    try:
        device = gpu.checked_device(settings.device)
    except gpu.DeviceError as error:
        raise VerifyError(f"--device {error}") from None
    members = {}
    for number in numbers:
        try:
            members[number] = _member(records[number], device)
        except (models.ModelConfigError, ConfigError, KeyError, TypeError, ValueError) as error:
            raise VerifyError(
                f"trial {number}'s stored config no longer builds here ({type(error).__name__}: {error}); "
                "it was written by another archsearch version?"
            ) from None
    samples: dict[int, dict[str, list[float]]] = {n: {"throughput": [], "latency": []} for n in numbers}
    for round_index in range(settings.repeats):
        for number, member in members.items():  # interleaved: a drifting machine hits every member alike
            warmup = settings.warmup if round_index == 0 else 0
            seconds = timing.time_repeated(member.forward_batch, device, warmup, 1).median
            samples[number]["throughput"].append(member.batch_size / seconds)
            samples[number]["latency"].append(timing.time_repeated(member.forward_one, device, warmup, 1).median * 1e3)
    rows = []
    with Store.open(store_url) as store:
        for number in numbers:
            rate, latency = samples[number]["throughput"], samples[number]["latency"]
            values = {
                "throughput": statistics.median(rate),
                "throughput_min": min(rate),
                "throughput_max": max(rate),
                "latency_ms": statistics.median(latency),
                "latency_ms_min": min(latency),
                "latency_ms_max": max(latency),
                "rounds": settings.repeats,
                "batch_size": members[number].batch_size,
                "image_size": members[number].image_size,
                "dtype": members[number].dtype,
                "device": measure.device_name(device),
                "host": socket.gethostname(),
            }
            store.record_verified(study, number, values)
            rows.append({"number": number, **values})
    verified = pd.DataFrame(rows).set_index("number")
    return compare_fronts(front, verified, objectives)


@dataclass(frozen=True)
class _Member:
    """A front member rebuilt as its trial measured it, with its two timed calls."""

    forward_batch: Any
    forward_one: Any
    batch_size: int
    image_size: int
    dtype: str


def _member(record: dict[str, Any], device) -> _Member:
    """The trial's model with its data shape, batch size and dtype (fp32 on a CPU, where a GPU
    trial measured bf16: the stored row says which)."""
    config = record["config"]
    measurement = record["measurement"]
    model_config = models.resolve_config(config["model"])
    model_config = model_config.replace(**data_shape(config.get("data", {}), model_config.num_classes))
    image_size = int(measurement.get("image_size") or model_config.image_size)
    batch_size = int(measurement.get("batch_size") or 64)
    dtype_name = measurement.get("dtype") or "fp32"
    if device.type != "cuda" or dtype_name not in _DTYPES:
        dtype_name = "fp32"
    dtype = getattr(torch, _DTYPES[dtype_name])
    model = models.build_model(model_config).to(device).eval()

    def timed(n: int):
        inputs = torch.randn(n, model_config.in_chans, image_size, image_size, device=device)
        return measure.inference_fn(model, inputs, dtype, device)

    return _Member(timed(batch_size), timed(1), batch_size, image_size, dtype_name)


__all__ = ["VerifyError", "VerifySettings", "verify_front"]
