"""What a trial needs to run correctly on a CUDA GPU, kept in one place and checkable on a CPU.

Every call into ``torch.cuda`` that a trial makes goes through here, so the contracts are few and
each one has a CPU test with CUDA's initialisation stubbed (``tests/test_cuda_contracts.py``):

* :func:`resolve_device` gives CUDA devices an index: ``torch.device("cuda")`` is not accepted by
  ``set_per_process_memory_fraction`` (it wants an index or an int).
* :func:`memory_cap_fraction` is the one formula for a packed trial's memory cap, shared by the
  search (``search.resources.gpus: 0.25``) and ``benchmarks/gpu.py``: the trial's share of the
  GPU minus what a process needs outside PyTorch's caching allocator (CUDA context, cuBLAS
  workspace, compiled kernels: about :data:`PROCESS_OVERHEAD_BYTES`), because the cap only
  bounds the allocator.
* :func:`prepare_allocator` turns on the caching allocator's expandable segments for a CUDA trial
  before CUDA initialises (a capped, packed trial fragments without them), unless the user set
  ``PYTORCH_CUDA_ALLOC_CONF`` themselves.
* :func:`configure_backends` sets cuDNN autotuning and TF32 matmuls the same way for trials and
  for the benchmark, and returns what it set so the trial records it.
* The error classifiers decide what a failure *is*: an out-of-memory (the trial failed, the
  process is fine), a compile error (run eagerly instead), or a sticky CUDA error (the CUDA
  context is broken: the worker process must end, or it poisons the next trial it is reused for).

torch is bound lazily (``trials.lazy``): the memory formula is used where torch is not loaded.
"""

from __future__ import annotations

import gc
import math
import os
import re
import traceback
from collections.abc import Mapping
from typing import Any

from trials.devices.torch_internals import COMPILER_MODULES, COMPILER_PATHS
from trials.errors import RunError
from trials.lazy import lazy_import

torch = lazy_import("torch")  # search_space and the harness use the formulas without torch

GIB = 2**30
# Memory a CUDA process uses outside the caching allocator, which the allocator's cap does not
# see: the CUDA context (~300-600 MiB on Hopper), cuBLAS/cuDNN workspaces and the kernels that
# torch.compile loads. 1 GiB is the round figure the packing formula leaves per process.
PROCESS_OVERHEAD_BYTES = 1 * GIB

# Dense bf16 tensor-core peaks from the vendors' datasheets (TFLOP/s, 2 FLOPs per multiply-add),
# for MFU against the datasheet next to MFU against the matmul rate measured on the machine.
# Matched against torch.cuda.get_device_name(); the first matching key wins, so a name that contains
# another (GH200 contains H200) comes before it.
DATASHEET_BF16_DENSE_TFLOPS: tuple[tuple[str, str, float], ...] = (
    ("GH200", "GH200 bf16 dense", 989.0),
    ("H200", "H200 SXM bf16 dense", 989.0),
    ("H100 PCIe", "H100 PCIe bf16 dense", 756.0),
    ("H100 NVL", "H100 NVL bf16 dense", 835.0),
    ("H100", "H100 SXM bf16 dense", 989.0),
    ("H800", "H800 SXM bf16 dense", 989.0),
    ("A100", "A100 bf16 dense", 312.0),
    ("L40S", "L40S bf16 dense", 362.0),
    ("A10G", "A10G bf16 dense", 70.0),
)


class GpuShareError(ValueError):
    """A packed trial's share of the GPU is too small to hold even one process."""


def datasheet_peak(device_name: str) -> tuple[str, float] | None:
    """``(which figure, FLOP/s)`` of the datasheet's bf16 dense peak for a GPU name, or None if unknown."""
    for key, label, tflops in DATASHEET_BF16_DENSE_TFLOPS:
        if key.lower() in device_name.lower():
            return label, tflops * 1e12
    return None


def memory_cap_fraction(share: float | None, total_bytes: int, overhead_bytes: int = PROCESS_OVERHEAD_BYTES) -> float:
    """The caching allocator's cap (a fraction of the GPU) for a trial that owns ``share`` of it.

    ``share`` None or >= 1: the whole GPU (1.0; it also undoes a smaller cap set by an earlier trial
    of the same process). A packed trial gets its share minus the memory its process needs outside
    the allocator, so N packed trials at 1/N each still fit: N x (share - overhead) + N x overhead.
    """
    if share is None or share >= 1:
        return 1.0
    if not 0 < share < 1:
        raise GpuShareError(f"gpu_memory_fraction: must be a number in (0, 1], got {share!r}")
    if total_bytes <= 0:
        raise GpuShareError(f"the GPU reports {total_bytes} bytes of memory")
    fraction = float(share) - overhead_bytes / total_bytes
    if fraction <= 0:
        raise GpuShareError(
            f"gpu_memory_fraction: a share of {share:g} of a {total_bytes / GIB:.1f} GiB GPU is "
            f"{share * total_bytes / GIB:.2f} GiB, which leaves nothing after the "
            f"{overhead_bytes / GIB:.1f} GiB a CUDA process needs outside PyTorch's allocator; "
            "pack fewer trials per GPU"
        )
    return fraction


DEVICE_PATTERN = r"auto|cpu|cuda(:[0-9]{1,3})?"


class DeviceError(RunError, ValueError):
    """A device a user named that this machine does not have, or no device at all: one line."""


def checked_device(name: str) -> torch.device:
    """:func:`resolve_device` for a device a user typed (``--device``): a clear error, not torch's
    (``cuda:7`` on a machine without it, ``cpu; rm -rf /``)."""
    if not isinstance(name, str) or not re.fullmatch(DEVICE_PATTERN, name):
        raise DeviceError(f"{str(name)[:60]!r} is not a device: use auto, cpu, cuda or cuda:N")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceError(f"{name}: no CUDA device on this machine")
        count = torch.cuda.device_count()
        if ":" in name and int(name.split(":")[1]) >= count:
            raise DeviceError(f"{name}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    return resolve_device(name)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; a CUDA device always carries its index."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


ALLOC_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # torch reads either; the first is older
EXPANDABLE_SEGMENTS = "expandable_segments:True"


def allocator_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a CUDA trial process should start with: expandable segments for the caching
    allocator, unless the user configured the allocator themselves (then nothing: theirs stands).

    A trial capped at its share of a GPU (packed trials) fragments its few GiB at 224 px without
    them: blocks of one size cannot be reused for another, and the cap is reached with memory free.
    """
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in ALLOC_CONF_VARIABLES):
        return {}
    return {ALLOC_CONF_VARIABLES[0]: EXPANDABLE_SEGMENTS}


def prepare_allocator(device_name: str) -> dict[str, bool]:
    """For a trial about to run on CUDA (``device_name`` cuda, cuda:N, or auto with a GPU present):
    set :func:`allocator_environment` in this process before CUDA initialises (torch reads the
    variable once, as its allocator starts), leaving a user's own setting alone. Returns, for the
    trial's record, whether the allocator asks for expandable segments; nothing on a CPU trial,
    whose process environment stays as it was. Checking for a GPU does not initialise CUDA.
    """
    if not (device_name.startswith("cuda") or (device_name == "auto" and torch.cuda.is_available())):
        return {}
    os.environ.update(allocator_environment())
    wanted = any("expandable_segments:true" in os.environ.get(n, "").lower() for n in ALLOC_CONF_VARIABLES)
    return {"cuda_expandable_segments": wanted}


def cuda_index(device: torch.device) -> int:
    """The integer index of a CUDA device (the current device when the device has none)."""
    return int(device.index) if device.index is not None else int(torch.cuda.current_device())


def cap_process_memory(device: torch.device, share: float | None) -> dict[str, Any]:
    """Cap this process's caching allocator at its share of the GPU, before anything is allocated.

    Returns what it set, for the trial's record: the fraction, the cap in bytes, the GPU's memory.
    """
    index = cuda_index(device)
    total = int(torch.cuda.get_device_properties(index).total_memory)
    fraction = memory_cap_fraction(share, total)
    torch.cuda.set_per_process_memory_fraction(float(fraction), index)
    return {
        "gpu_memory_cap_fraction": fraction,
        "gpu_memory_cap_bytes": int(fraction * total),
        "gpu_total_bytes": total,
    }


def configure_backends(device: torch.device) -> dict[str, bool]:
    """cuDNN autotuning and TF32 matmuls on CUDA (fixed input sizes: autotuning pays for itself).

    The benchmark calls this too, so a trial and ``benchmarks/gpu.py`` measure the same thing.
    Returns the settings in force, which the trial records.
    """
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return {
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
    }


def release_memory(device: torch.device) -> None:
    """Give cached blocks back to the driver (for a packed neighbour or the next trial of this worker).

    Call it *after* the last reference to the trial's model, optimiser and any exception traceback
    is gone, or the memory it should free is still alive.
    """
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def peak_memory(device: torch.device) -> tuple[float | None, float | None]:
    """(max allocated MiB, max reserved MiB) since the last reset; None on CPU."""
    if device.type != "cuda":
        return None, None
    return torch.cuda.max_memory_allocated(device) / 2**20, torch.cuda.max_memory_reserved(device) / 2**20


def _chain(error: BaseException):
    """The error and the errors it was raised from or during, without looping."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # BackendCompilerFailed keeps the backend's exception as ``inner_exception``, not as a cause.
        current = current.__cause__ or current.__context__ or getattr(current, "inner_exception", None)


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps: a compile error around an OOM) is an out-of-memory."""
    for e in _chain(error):
        if isinstance(e, torch.OutOfMemoryError):
            return True
        text = str(e).lower()
        if "out of memory" in text and ("cuda" in text or "allocate" in text):
            return True
    return False


def is_compile_error(error: BaseException) -> bool:
    """Whether ``error`` came from torch.compile (Dynamo, AOTAutograd, Inductor, Triton).

    Either its type (or a type it wraps) is the compiler's, or it was raised inside the compiler's
    code: AOTAutograd compiles the backward lazily, at the first ``loss.backward()``, and a backend's
    failure there surfaces as the backend's own exception. A genuine error of the model raised
    inside compiled code also matches; the eager retry then raises it again, as the trial's error.
    An out-of-memory or a sticky CUDA error is never a compile error: falling back to eager would
    hide it (and then fail again, or on a broken CUDA context).
    """
    if is_out_of_memory(error) or is_sticky_cuda_error(error):
        return False
    for e in _chain(error):
        if type(e).__module__.startswith(COMPILER_MODULES):
            return True
        frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ is not None else []
        if any(path in frame.filename.replace("\\", "/") for frame in frames for path in COMPILER_PATHS):
            return True
    return False


# Errors after which the CUDA context is unusable for the rest of the process (CUDA "sticky" errors).
_STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "misaligned address",
    "illegal instruction",
    "hardware stack error",
    "invalid program counter",
    "launch timed out",
    "uncorrectable ecc error",
    "cudaerrorillegaladdress",
    "cudaerrorlaunchfailure",
    "cudaerrorassert",
    "cublas_status_execution_failed",
)


def is_sticky_cuda_error(error: BaseException) -> bool:
    """Whether ``error`` left the CUDA context broken: every later CUDA call of the process would fail."""
    for e in _chain(error):
        text = str(e).lower()
        if any(marker in text for marker in _STICKY_CUDA_ERRORS):
            return True
    return False


def mfu(model_macs: float, images_per_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation (%) of a training step: 2 FLOPs per MAC, x3 for forward + backward."""
    if not (peak_flops > 0 and math.isfinite(peak_flops)):
        return float("nan")
    return 100.0 * 2 * model_macs * 3 * images_per_s / peak_flops
