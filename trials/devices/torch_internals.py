"""The one place in ``trials`` (and what builds on it) that names torch's private modules.

torch.compile's settings, counters and caches have no public API for what a trial needs: Inductor's
compile threads and cache switches (``torch._inductor.config``), AOTAutograd's cache switch
(``torch._functorch.config``), Dynamo's graph and cache counters and compile callbacks
(``torch._dynamo.utils``, ``torch._dynamo.callback``), Dynamo's recompile settings
(``torch._dynamo.config``), Inductor's worker pool and cache helpers, and the one private field of
``nn.Module`` regional compilation needs (``_compiled_call_impl``: where ``nn.Module.compile`` keeps a
module's compiled call, which has no public way to be undone or set aside). A torch upgrade that moves
one of them breaks this module's names, found by ``tests/test_engine_room.py`` (every name resolves on the
installed torch), not a trial at run time. Each is bound lazily: a trial that does not compile never
imports the compiler. The Ray and Optuna counterpart is :mod:`harness.search.adapter`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trials.lazy import lazy_import

if TYPE_CHECKING:  # torch itself is not imported here: importing this module compiles nothing
    from torch import nn

inductor_config = lazy_import("torch._inductor.config")  # the compiler's settings: only when a trial compiles
functorch_config = lazy_import("torch._functorch.config")
async_compile = lazy_import("torch._inductor.async_compile")
inductor_utils = lazy_import("torch._inductor.utils")
dynamo_callback = lazy_import("torch._dynamo.callback")
dynamo_utils = lazy_import("torch._dynamo.utils")  # the compiler's counters: only when compiling
dynamo_config = lazy_import("torch._dynamo.config")

MODULES = {
    "inductor_config": "torch._inductor.config",
    "functorch_config": "torch._functorch.config",
    "async_compile": "torch._inductor.async_compile",
    "inductor_utils": "torch._inductor.utils",
    "dynamo_callback": "torch._dynamo.callback",
    "dynamo_utils": "torch._dynamo.utils",
    "dynamo_config": "torch._dynamo.config",
}


# The compiler's private packages, by module name and by source path: an exception raised there (or of a
# type defined there) is a compile error (:func:`trials.devices.gpu.is_compile_error`).
COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch", "triton")
COMPILER_PATHS = ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/", "/triton/")

# The field ``nn.Module.compile`` sets: ``nn.Module.__call__`` runs it instead of ``_call_impl`` when set.
COMPILED_CALL_FIELD = "_compiled_call_impl"


def compiled_call(module: nn.Module) -> Callable[..., Any] | None:
    """The compiled call ``module.compile()`` installed on ``module`` (None: it runs eagerly)."""
    return getattr(module, COMPILED_CALL_FIELD, None)


def set_compiled_call(module: nn.Module, call: Callable[..., Any] | None) -> None:
    """Install ``call`` as ``module``'s compiled call; None undoes ``module.compile()``."""
    setattr(module, COMPILED_CALL_FIELD, call)


@contextmanager
def eager_view(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` with every submodule that ``nn.Module.compile`` compiled in place running eagerly,
    restored on exit.

    Why: ``torch.jit.trace`` (fvcore's FLOP counter traces with it) refuses a Dynamo-optimised call,
    and regional compilation compiles a model's blocks in place; the eager model computes the same
    operations, so its FLOP count is the compiled model's. Nothing is recompiled on exit: the
    compiled calls and their caches are put back as they were.
    """
    compiled = [(module, call) for module in model.modules() if (call := compiled_call(module)) is not None]
    for module, _ in compiled:
        set_compiled_call(module, None)
    try:
        yield model
    finally:
        for module, call in compiled:
            set_compiled_call(module, call)
