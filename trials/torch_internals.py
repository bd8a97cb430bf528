"""The one place in ``trials`` (and what builds on it) that names torch's private modules.

torch.compile's settings, counters and caches have no public API for what a trial needs: Inductor's
compile threads and cache switches (``torch._inductor.config``), AOTAutograd's cache switch
(``torch._functorch.config``), Dynamo's graph and cache counters and compile callbacks
(``torch._dynamo.utils``, ``torch._dynamo.callback``), Dynamo's recompile settings
(``torch._dynamo.config``), and Inductor's worker pool and cache helpers. A torch upgrade that moves
one of them breaks this module's names, found by ``tests/test_engine_room.py`` (every name resolves on the
installed torch), not a trial at run time. Each is bound lazily: a trial that does not compile never
imports the compiler. The Ray and Optuna counterpart is :mod:`harness.search.adapter`.
"""

from __future__ import annotations

from trials.lazy import lazy_import

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
