"""The import rules of ARCHITECTURE.md, checked: imports at the top, heavy ones lazy in one way, light layers light."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("trials", "search_space", "dashboards", "harness")


def _product_modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts]


def _imports_inside_functions(path: Path) -> list[str]:
    found = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            scoped = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and inside:
                found.append(f"{path.relative_to(ROOT)}:{child.lineno}")
            visit(child, scoped)

    visit(ast.parse(path.read_text()), False)
    return found


def test_every_import_is_at_the_top_of_its_module():
    """Heavy packages are bound there with trials.lazy.lazy_import; none is imported inside a function."""
    inside = [hit for path in _product_modules() for hit in _imports_inside_functions(path)]
    assert inside == [], f"{len(inside)} imports inside functions or classes: {inside[:20]}"


def test_every_lazily_bound_module_exists():
    """A typo in a lazy_import name would only fail when that code path runs: import every one now."""
    from trials.lazy import LAZY_MODULES

    for pkg in PACKAGES:
        package = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{pkg}."):
            if ".migrations" not in info.name:
                importlib.import_module(info.name)
    assert len(LAZY_MODULES) > 10
    for name in sorted(LAZY_MODULES):
        importlib.import_module(name)


def test_a_lazy_module_loads_on_first_use_only():
    from trials.lazy import LazyModule, lazy_import

    assert lazy_import("json") is sys.modules["json"]  # already paid for: the real module
    sys.modules.pop("colorsys", None)
    lazy = lazy_import("colorsys")
    assert isinstance(lazy, LazyModule) and "colorsys" not in sys.modules
    assert lazy.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" in sys.modules and "loaded" in repr(lazy)
    with pytest.raises(ModuleNotFoundError):
        _ = lazy_import("no_such_module_anywhere").anything


def test_a_setting_written_through_a_lazy_module_reaches_the_real_module():
    """``dynamo_config.recompile_limit = n`` through a not-yet-loaded proxy was kept on the proxy: torch
    never saw the trial's recompile limit or Inductor its compile threads (issue 56's sibling). In a
    fresh process, where torch's compiler configs are not imported yet."""
    code = (
        "import sys\n"
        "from trials.devices.torch_internals import dynamo_config, inductor_config\n"
        "from trials.lazy import LazyModule\n"
        "assert isinstance(dynamo_config, LazyModule) and 'torch._dynamo.config' not in sys.modules\n"
        "dynamo_config.recompile_limit = 123\n"
        "inductor_config.compile_threads = 1\n"
        "real = sys.modules['torch._dynamo.config']\n"
        "print(real.recompile_limit, sys.modules['torch._inductor.config'].compile_threads, "
        "'recompile_limit' in vars(dynamo_config))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["123", "1", "False"]


def _heavy_after(imports: str) -> list[str]:
    code = (
        "import sys\n"
        f"{imports}\n"
        "heavy = ('ray', 'optuna', 'sqlalchemy', 'seaborn', 'fvcore', 'pandas', 'scipy', 'torch', 'torchvision')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return [m for m in done.stdout.strip().split(",") if m]


def test_models_cost_model_and_pareto_maths_import_without_the_heavy_packages():
    """The models, the search-space layer and the multi-objective maths run with torch (or less) alone."""
    loaded = _heavy_after(
        "import trials.models, trials.runner, search_space, search_space.sampling, search_space.validation\n"
        "import search_space.cost_model, dashboards.multiobjective"
    )
    assert set(loaded) <= {"torch"}, loaded


def test_the_command_line_starts_without_torch_ray_or_a_database_driver():
    """``archsearch --help`` and argument errors stay instant: the commands bind their heavy modules lazily."""
    assert _heavy_after("import harness.cli") == []


LAYERS = ("trials", "search_space", "dashboards", "harness")  # each imports only those before it


def _project_imports(path: Path) -> set[str]:
    """Modules of the project a file imports: import statements and ``lazy_import("...")`` calls."""
    tree = ast.parse(path.read_text())
    found = set()
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "lazy_import"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return {m for m in found if m.split(".")[0] in LAYERS}


def _modules() -> dict[str, Path]:
    modules = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def test_no_package_imports_a_layer_above_it():
    """ARCHITECTURE.md's layer rule, checked on every module (it was a script in a note)."""
    upward = []
    for name, path in _modules().items():
        own = LAYERS.index(name.split(".")[0])
        for imported in _project_imports(path):
            if LAYERS.index(imported.split(".")[0]) > own:
                upward.append(f"{name} -> {imported}")
    assert upward == []


def test_the_project_modules_import_one_another_without_a_cycle():
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in _project_imports(path):
            while imported and imported not in modules:  # `from package import name`: the module that holds it
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    # Packages import their submodules in __init__ and submodules import siblings through the
    # package: an edge to a package's own __init__ from inside it is not a cycle of behaviour.
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in graph.get(node, ()):
            if target.startswith(node + ".") or node.startswith(target + "."):
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join([*stack[stack.index(target):], target]))
            elif target not in state:
                visit(target, [*stack, target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def _documented_imports() -> list[tuple[str, str, str]]:
    """``(doc, module, name)`` for every ``from MODULE import NAME`` of a project package in the Python
    blocks of the README and the manual (docs/*.md; the committed reproductions hold no Python)."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                    found += [(doc.name, node.module, alias.name) for alias in node.names]
    return found


def test_every_public_name_the_docs_use_imports_from_harness_the_one_home():
    """Issue 61: ``from harness import run_search, load_study`` was an ImportError (load_study lived in
    dashboards). Every name the README and the manual import from Python imports from ``harness``, and
    they import it from there; so does every name ``harness`` declares public."""
    import harness

    documented = _documented_imports()
    assert {name for _, _, name in documented} >= {"run_search", "load_study", "run_trial", "build_model", "Store"}
    elsewhere = [f"{doc}: from {module} import {name}" for doc, module, name in documented if module != "harness"]
    assert elsewhere == [], "the docs import these from outside the one home"
    for name in {*harness.__all__, *(name for _, _, name in documented)}:
        assert name in harness.__all__, name
        assert getattr(importlib.import_module("harness"), name) is not None
    from dashboards.study import Study, load_study
    from harness import Study as HomeStudy
    from harness import load_study as home_load_study

    assert HomeStudy is Study and home_load_study is load_study


def test_import_harness_stays_light_and_a_reading_name_starts_no_search_machinery():
    assert _heavy_after("import harness") == []
    loaded = _heavy_after("from harness import load_study, Study, StudyNotFound")
    assert "pandas" in loaded and not {"ray", "optuna", "torch", "sqlalchemy"} & set(loaded), loaded


def test_dashboards_points_to_harness_for_the_names_it_does_not_define():
    import dashboards
    import harness

    assert set(dashboards.ELSEWHERE) == {*harness.__all__} - {"load_study"}
    for name in dashboards.ELSEWHERE:
        with pytest.raises(ImportError, match=rf"from harness import {name}\)"):
            exec(f"from dashboards import {name}", {})
    from dashboards import load_study  # its own: still there

    assert callable(load_study)
    with pytest.raises(AttributeError):
        _ = dashboards.no_such_name


def test_a_patch_made_through_a_lazy_module_is_undone_in_the_real_module(monkeypatch):
    """tests/conftest.py's monkeypatch patches a lazy module's real module: undone, the real attribute is back
    (pytest's own, since 9, deleted it: it looked for the value to restore in the proxy's empty namespace)."""
    import colorsys

    from trials.lazy import LazyModule, real_module

    proxy, original = LazyModule("colorsys"), colorsys.rgb_to_hsv
    assert real_module(proxy) is colorsys and real_module(colorsys) is colorsys
    with monkeypatch.context() as patch:
        patch.setattr(proxy, "rgb_to_hsv", None)
        assert colorsys.rgb_to_hsv is None and proxy.rgb_to_hsv is None
        patch.delattr(proxy, "hsv_to_rgb")
        assert not hasattr(colorsys, "hsv_to_rgb")
    assert colorsys.rgb_to_hsv is original and callable(colorsys.hsv_to_rgb)
