"""``archsearch verify``: re-measure a study's front alone, so the trade-off a user publishes is not noise.

In a search, a trial measures its throughput beside whatever else the machine runs (packed
trials, other workers): the same architecture can read 712 and 1,299 img/s in one study. Here
each front member is rebuilt from its stored config and measured on one device with nothing else
scheduled by archsearch, in ``repeats`` rounds that interleave the members (a drift of the machine
hits every member alike); each member gets the median and the spread of its rounds. It is timed as
its trial ran: compiled when the trial was (on a GPU; per-block regions or the whole model, with CUDA graphs or
without, as its record says), at the trial's measured batch size and at batch 1, channels-last on CUDA, after
``trials.measurement.measure.default_warmup`` calls (10 on a GPU), with
CUDA events there. By default the timing is a Ray task: on a whole GPU of the cluster for a study
whose trials ran on GPUs (refused, with the reason, when the cluster has none free; never a silent
fall back to the driver's CPU), on one CPU for a CPU study. The results
are stored as separate ``verified`` measurements (``Store.record_verified``), never over the
in-trial ones, and the front is recomputed among its members on the verified values, marking
those that drop off.
"""

from __future__ import annotations

import json
import logging
import socket
import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboards.pareto import study_front
from dashboards.verified import compare_fronts
from harness.search.cluster import join as cluster
from harness.store import Store, StoreError
from search_space.sampling import data_shape
from trials.configio import ConfigError
from trials.devices.torch_internals import dynamo_config
from trials.errors import RunError
from trials.lazy import lazy_import

ray = lazy_import("ray")  # the timing runs as a Ray task on the cluster
torch = lazy_import("torch")
models = lazy_import("trials.models")
measure = lazy_import("trials.measurement.measure")
timing = lazy_import("trials.measurement.timing")
gpu = lazy_import("trials.devices.gpu")
compiled_forward = lazy_import("trials.compilation.compiled_forward")
regions = lazy_import("trials.models.regions")

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class VerifyError(RunError, ValueError):
    """The front cannot be verified here (the device, a member that no longer builds): one line, exit 2."""


@dataclass(frozen=True)
class VerifySettings:
    """How the front is re-measured.

    ``device``: ``auto`` runs the timing as a Ray task (on a whole GPU of the cluster when the
    study's trials ran on GPUs); ``cpu``, ``cuda`` or ``cuda:N`` time it here, in this process, as
    the user asked. ``address``: the Ray cluster for ``auto`` (None: the Ray this process is
    connected to, else a fresh local one). ``warmup`` None: ``trials.measurement.measure.default_warmup``.
    """

    repeats: int = 5
    device: str = "auto"
    warmup: int | None = None
    address: str | None = None


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
        spec = store.study(study).get("spec")
    if not numbers:
        raise StoreError(f"study {study!r} has no completed trial on its front to verify")
    payload = {number: _payload(records[number]) for number in numbers}
    if settings.device == "auto":
        timed = _time_on_ray(payload, settings, _gpu_study(spec, records.values()), study)
    else:
        try:
            gpu.checked_device(settings.device)
        except gpu.DeviceError as error:
            raise VerifyError(f"--device {error}") from None
        timed = time_front(payload, settings.device, settings.repeats, settings.warmup)
    if "error" in timed:
        raise VerifyError(timed["error"])
    rows = []
    with Store.open(store_url) as store:
        for number in numbers:
            values = _verified_values(timed, number, settings.repeats)
            store.record_verified(study, number, values)
            rows.append({"number": number, **values})
    verified = pd.DataFrame(rows).set_index("number")
    return compare_fronts(front, verified, objectives)


def _verified_values(timed: dict[str, Any], number: int, rounds: int) -> dict[str, Any]:
    """One member's stored verification: medians and spreads of its rounds, and how they were taken."""
    rate, latency = timed["samples"][number]["throughput"], timed["samples"][number]["latency"]
    member = timed["members"][number]
    return {
        "throughput": statistics.median(rate),
        "throughput_min": min(rate),
        "throughput_max": max(rate),
        "latency_ms": statistics.median(latency),
        "latency_ms_min": min(latency),
        "latency_ms_max": max(latency),
        "rounds": rounds,
        "batch_size": member["batch_size"],
        "image_size": member["image_size"],
        "dtype": member["dtype"],
        "device": timed["device"],
        "host": timed["host"],
    }


def _payload(record: dict[str, Any]) -> dict[str, Any]:
    """What a worker needs to rebuild a member as its trial measured it (plain values: Ray ships them)."""
    final = record.get("final") or {}
    return {
        "config": record["config"],
        "measurement": record.get("measurement") or {},
        "compiled": bool(final.get("compiled")),  # the trial trained (and now measures) compiled
        # how it compiled, where its record says (regional or whole, CUDA graphs or not): timed the same way
        "compile": {key: final[key] for key in ("regional_compile", "cuda_graphs", "world_size") if key in final},
    }


def _gpu_study(spec: Any, records: Any) -> bool:
    """Whether the study's trials ran on GPUs: its spec asked for them, or a member was measured on one."""
    spec = json.loads(spec) if isinstance(spec, str) else spec or {}
    gpus = ((spec.get("search") or {}).get("resources") or {}).get("gpus") or 0
    devices = [str((r.get("measurement") or {}).get("device") or "cpu") for r in records]
    return float(gpus) > 0 or any(not d.lower().startswith("cpu") for d in devices)


def _time_on_ray(payload: dict[int, dict[str, Any]], settings: VerifySettings, on_gpu: bool, study: str) -> dict:
    """Run :func:`time_front` as one Ray task: a whole GPU for a GPU study (nothing else of ours on
    it), one CPU otherwise. A GPU study on a cluster with no GPU free is refused, never timed on a CPU."""
    started = _connect(settings.address)
    try:
        if on_gpu:
            _check_a_whole_gpu_is_free(study)
        task = ray.remote(time_front).options(num_gpus=1 if on_gpu else 0, num_cpus=1, max_retries=0)
        # The task holds a whole GPU slot and resolves its device as the trials did (``auto``): CUDA on a
        # GPU node; a node whose GPUs are logical (a CPU stand-in, ``ray start --num-gpus``) trained its
        # trials on its CPU, and its front is timed there too instead of failing to find a driver.
        return ray.get(task.remote(payload, "auto" if on_gpu else "cpu", settings.repeats, settings.warmup))
    finally:
        if started:
            ray.shutdown()


def _connect(address: str | None) -> bool:
    """Join ``address``, or start a local Ray when none is running; True when this call started it."""
    if ray.is_initialized():
        return False
    if address:
        cluster.join(address)
    else:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    return True


def _check_a_whole_gpu_is_free(study: str) -> None:
    """A GPU study is timed on a whole GPU: the cluster must have one, and one must be free now
    (Ray would otherwise queue the task until the cluster's trials end, or forever)."""
    total = float(ray.cluster_resources().get("GPU", 0))
    if total == 0:
        raise VerifyError(
            f"study {study}'s trials ran on GPUs, but the Ray cluster has no GPU: its front would be timed on "
            "a CPU, which says nothing about the GPU front. Pass --address of a cluster with a GPU, or "
            "--device cuda on a GPU machine (--device cpu times it on this CPU, knowingly)"
        )
    free = float(ray.available_resources().get("GPU", 0))
    if free < 1:
        raise VerifyError(
            f"no whole GPU is free on the Ray cluster ({free:g} of {total:g} free): the front must be timed alone "
            "on one; verify again when the cluster's trials have ended"
        )


def time_front(
    payload: dict[int, dict[str, Any]], device_name: str, repeats: int, warmup: int | None
) -> dict[str, Any]:
    """Time every member (on a Ray worker, or here): ``repeats`` rounds interleaving the members,
    each its throughput at its measured batch size and its batch-1 latency, compiled when its trial
    was. The first round is preceded by each member's compiling calls and its warm-up. Returns
    plain values: the samples, each member's shape and dtype, the device and host; or an error."""
    device = gpu.resolve_device(device_name)
    warmup = measure.default_warmup(device) if warmup is None else warmup
    # Every member's forward shares one code object, and Dynamo keeps 8 compiled variants of it: two
    # batch sizes per member would leave the fifth member on silently eager.
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 2 * len(payload) + 8)
    members = {}
    for number, entry in payload.items():
        try:
            members[number] = _member(entry, device)
        except (models.ModelConfigError, ConfigError, KeyError, TypeError, ValueError) as error:
            return {"error": f"trial {number}'s stored config no longer builds here ({type(error).__name__}: "
                    f"{error}); was it written by another archsearch version?"}  # fmt: skip
    samples: dict[int, dict[str, list[float]]] = {n: {"throughput": [], "latency": []} for n in members}
    for round_index in range(repeats):
        for number, member in members.items():  # interleaved: a drifting machine hits every member alike
            rounds_warmup = warmup if round_index == 0 else 0
            seconds = timing.time_repeated(member.forward_batch, device, rounds_warmup, 1).median
            samples[number]["throughput"].append(member.batch_size / seconds)
            latency = timing.time_repeated(member.forward_one, device, rounds_warmup, 1).median
            samples[number]["latency"].append(latency * 1e3)
    return {
        "samples": samples,
        "members": {n: _shape(m) for n, m in members.items()},
        "device": measure.device_name(device),
        "host": socket.gethostname(),
    }


def _shape(member: _Member) -> dict[str, Any]:
    """How a member was timed, as plain values for the driver."""
    return {"batch_size": member.batch_size, "image_size": member.image_size, "dtype": member.dtype}


@dataclass(frozen=True)
class _Member:
    """A front member rebuilt as its trial measured it, with its two timed calls."""

    forward_batch: Any
    forward_one: Any
    batch_size: int
    image_size: int
    dtype: str
    compiled: bool


def _member(entry: dict[str, Any], device) -> _Member:
    """The trial's model with its data shape, batch size and dtype (fp32 on a CPU, where a GPU
    trial measured bf16: the stored row says which), compiled as the trial was (torch.compile's
    default backend) on a GPU, in the layout a trial runs in there (channels-last)."""
    config, measurement = entry["config"], entry["measurement"]
    model_config = models.resolve_config(config["model"])
    model_config = model_config.replace(**data_shape(config.get("data", {}), model_config.num_classes))
    image_size = int(measurement.get("image_size") or model_config.image_size)
    batch_size = int(measurement.get("batch_size") or 64)
    dtype_name = measurement.get("dtype") or "fp32"
    if device.type != "cuda" or dtype_name not in _DTYPES:
        dtype_name = "fp32"
    dtype = getattr(torch, _DTYPES[dtype_name])
    model = models.build_model(model_config).to(device, memory_format=measure.inference_layout(device)).eval()

    def calls(forward: Any) -> tuple[Any, Any]:
        batches = (measure.random_images(n, image_size, device, model_config.in_chans) for n in (batch_size, 1))
        return tuple(measure.inference_fn(forward, inputs, dtype, device) for inputs in batches)

    compiled = bool(entry.get("compiled")) and device.type == "cuda"
    training = config.get("training") or {}
    backend = training.get("compile_backend", "inductor")
    forward_batch, forward_one = calls(model)
    if compiled:
        recorded = entry.get("compile") or {}
        ranks = int(recorded.get("world_size") or 1)
        target = compiled_forward.CompileTarget(model, device, dtype, True, image_size, batch_size, ranks, backend)
        choice = trial_compile_choice(recorded, training, target)
        try:
            compiled_calls = calls(compile_as_trial(model, choice, backend))
            for call in compiled_calls:  # compiles each batch size now, untimed
                measure.first_call_seconds(call, device)
            forward_batch, forward_one = compiled_calls
        except Exception as error:  # as a trial does: a compile error means eager, anything else is raised
            if not gpu.is_compile_error(error):
                raise
            regions.uncompile_regions(model)
            forward_batch, forward_one = calls(model)
            compiled = False
    return _Member(forward_batch, forward_one, batch_size, image_size, dtype_name, compiled)


def trial_compile_choice(recorded: dict[str, Any], training: dict[str, Any], target: Any) -> Any:
    """How the trial compiled (a :class:`trials.compilation.compiled_forward.CompileChoice`): what its record says
    (``regional_compile``, ``cuda_graphs``), else the trial's own rule (``choose_compile``) applied to its
    ``training.compile_scope`` and ``training.cuda_graphs``. Verify timed a whole-model default-mode compile while
    the trial ran per-block regions, or whole-model CUDA graphs at 64 px and below: another program."""
    module = compiled_forward
    if "regional_compile" in recorded:
        graphs = bool(recorded.get("cuda_graphs"))
        return module.CompileChoice("regional" if recorded["regional_compile"] else "whole",
                                    module.REDUCE_OVERHEAD if graphs else None)  # fmt: skip
    plan = module.CompilePlan(True, None, 0, 0.0, scope=training.get("compile_scope", "regional"),
                              cuda_graphs=training.get("cuda_graphs", "auto"))  # fmt: skip
    return module.choose_compile(target, plan)


def compile_as_trial(model: Any, choice: Any, backend: str) -> Any:
    """``model``'s forward compiled as ``choice`` says, as the trial's ``CompiledForward`` compiles it: its blocks
    in place (regional), or the whole model; under CUDA graphs each call starts a new step, as the trial's do."""
    mode = choice.mode
    if choice.scope == "regional" and regions.compile_regions(model, backend=backend, mode=mode):
        forward = model
    else:
        forward = torch.compile(model, backend=backend, mode=mode, dynamic=False)
    if not choice.cuda_graphs:
        return forward

    def step(images: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()  # the previous replay's outputs may be overwritten
        return forward(images)

    return step


__all__ = ["VerifyError", "VerifySettings", "compile_as_trial", "time_front", "trial_compile_choice", "verify_front"]
