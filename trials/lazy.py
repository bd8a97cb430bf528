"""The one way archsearch defers a heavy import: a module bound at the top of a file, loaded on first use.

Every import sits at the top of its module, so the import graph reads off the file heads. Where a
module must stay light (the models and the cost model run with torch alone on a bare GPU node;
``archsearch --help`` and the read-only commands never start Ray), a heavy package is bound with
:func:`lazy_import` instead of ``import``::

    tune = lazy_import("ray.tune")  # Ray: only when a search runs

The name is an ordinary module object until an attribute is read from it; then the real module is
imported (once) and the attribute read from it, so ``tune.Tuner(...)``, ``except
sqlalchemy.exc.OperationalError`` and ``isinstance(x, optuna.Study)`` behave as with a plain
import. Names used only in annotations are imported under ``typing.TYPE_CHECKING``.

Heavy, for this rule: Ray, Optuna, SQLAlchemy and Alembic, pandas, scipy, matplotlib, seaborn,
jinja2, moocore, fvcore, torchvision, timm, scikit-learn, and torch outside ``trials``; and any
project module that imports one of them at its top. (The same idea as Optuna's ``_LazyImport``.)
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
from typing import Any

LAZY_MODULES: set[str] = set()  # every name ever bound lazily (tests import each one: no typos)
_load_lock = threading.RLock()


class LazyModule(types.ModuleType):
    """A module that imports itself the first time one of its attributes is read."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_target"] = None

    def _lazy_load(self) -> types.ModuleType:
        target = self.__dict__["_lazy_target"]
        if target is None:
            with _load_lock:  # two threads reading at once import once
                target = self.__dict__["_lazy_target"]
                if target is None:
                    target = importlib.import_module(self.__name__)
                    self.__dict__["_lazy_target"] = target
        return target

    def __getattr__(self, attribute: str) -> Any:
        # Only called for names not found on the proxy itself: everything the real module defines.
        return getattr(self._lazy_load(), attribute)

    def __setattr__(self, attribute: str, value: Any) -> None:
        # A setting written through the proxy (``inductor_config.compile_threads = 1``) is the real
        # module's: kept on the proxy, it would shadow the module's value for readers of the proxy and
        # never reach the library, which reads its own module.
        setattr(self._lazy_load(), attribute, value)

    def __delattr__(self, attribute: str) -> None:
        delattr(self._lazy_load(), attribute)

    def __dir__(self) -> list[str]:
        return dir(self._lazy_load())

    def __repr__(self) -> str:
        state = "loaded" if self.__dict__["_lazy_target"] is not None else "not loaded yet"
        return f"<lazy module {self.__name__!r} ({state})>"


def lazy_import(name: str) -> types.ModuleType:
    """``name`` (a dotted module path) as a module that is imported on first attribute access.

    Already imported modules are returned as they are: nothing is deferred that is already paid for.
    """
    LAZY_MODULES.add(name)
    module = sys.modules.get(name)
    return module if module is not None else LazyModule(name)


def real_module(module: types.ModuleType) -> types.ModuleType:
    """The module behind ``module``: a lazy one's real module (imported now), any other as it is.

    For code that must reach the real module's own namespace, not the proxy's: pytest's ``monkeypatch``
    (since 9) records the value it will put back from the target's ``__dict__``, which on a proxy holds
    none of the module's names, so undoing a patch made through a proxy deleted the real attribute
    (``trials.runner.run_trial`` gone for every later test in that process)."""
    return module._lazy_load() if isinstance(module, LazyModule) else module
