"""The search engine's house rules (issue 43), checked on the code itself and on real searches.

* No module of the engine (``harness/search/``) keeps module-level mutable state: no ``global``, no
  module-level container or object that anything mutates. What a search's hooks share is a
  :class:`harness.search.session.SearchSession`, passed to them. The one context variable that lets a
  hook Ray unpickles find its session is scoped by ``SearchSession.active()`` and named here.
* No module outside the two adapters (``harness/search/adapter.py`` for Ray and Optuna,
  ``trials/devices/torch_internals.py`` for torch) names a private module or private field of Ray, Optuna or
  torch; every private name the adapters use exists on the installed versions.
* Two searches run one after the other in one Python process through the public API, each ending
  with its own counts and its own stop reason.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
ENGINE = ROOT / "harness" / "search"
ADAPTERS = {ROOT / "harness" / "search" / "adapter.py", ROOT / "trials" / "devices" / "torch_internals.py"}
FOREIGN = ("ray", "optuna", "torch", "torchvision", "fvcore", "syne_tune")
SCOPED_CONTEXT = {("session.py", "_ACTIVE")}  # see the module docstring
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "add", "discard",
            "remove", "__setitem__"}  # fmt: skip
# Underscore names that are documented public API of the standard library and SQLAlchemy: a named
# tuple's methods and fields, ``os._exit``, a SQLAlchemy ``Row``'s ``_mapping``.
DOCUMENTED_UNDERSCORE_NAMES = {"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit", "_mapping"}
MUTABLE_CALLS = {"dict", "list", "set", "Counter", "defaultdict", "deque", "OrderedDict", "bytearray"}


def module_state_problems(source: str, filename: str = "<module>") -> list[str]:
    """Module-level mutable state in ``source``: ``global`` statements; module-level names bound to a
    mutable container or to an instance of a class of the module; module-level names mutated anywhere
    (item or attribute assignment, augmented assignment, a mutating method)."""
    tree = ast.parse(source)
    local_classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    module_names: dict[str, ast.AST] = {}
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
                module_names[target.id] = node.value
    problems = []
    for name, value in module_names.items():
        if (filename, name) in SCOPED_CONTEXT:
            continue
        if name.startswith("__"):
            continue  # __all__ and friends
        # A container display named as a constant (ALL_CAPS) is a table, checked for writes below; a
        # mutable object built by a call is state whatever its name.
        display = isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp)
        built = False
        if isinstance(value, ast.Call):
            called = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
            built = called in MUTABLE_CALLS or called in local_classes
        if built or (display and not name.isupper()):
            problems.append(f"{filename}: module-level {name} holds a mutable value")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            problems.append(f"{filename}:{node.lineno}: global {', '.join(node.names)}")
        targets = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript | ast.Attribute):
                base = target.value
                if isinstance(base, ast.Name) and base.id in module_names and (filename, base.id) not in SCOPED_CONTEXT:
                    problems.append(f"{filename}:{node.lineno}: writes into module-level {base.id}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            base = node.func.value
            if isinstance(base, ast.Name) and base.id in module_names and (filename, base.id) not in SCOPED_CONTEXT:
                problems.append(f"{filename}:{node.lineno}: {base.id}.{node.func.attr}() mutates module-level state")
    return problems


def test_the_scan_finds_the_hidden_channels_the_engine_used_to_have():
    """The scanner itself: each of the three channels issue 43 found would be caught."""
    assert module_state_problems('_state = {"reason": None}\ndef f():\n    _state["reason"] = 1\n')
    assert module_state_problems("from collections import Counter\n_ENDED = Counter()\n")
    assert module_state_problems("class _State:\n    pass\n_state = _State()\n")
    assert module_state_problems("X = None\ndef f():\n    global X\n    X = 1\n")
    assert module_state_problems("RULES = {}\ndef f():\n    RULES.update(a=1)\n")
    assert not module_state_problems('NAMES = {"a": 1}\nLIMIT = 3\ndef f(x):\n    return NAMES[x]\n')


def test_the_engine_keeps_no_module_level_mutable_state():
    problems = []
    for path in sorted(ENGINE.rglob("*.py")):
        problems += module_state_problems(path.read_text(), path.name)
    assert problems == []


def _chain(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def own_names(source: str) -> set[str]:
    """Names ``source`` defines: functions, classes, assignment targets (names and attributes, as
    ``self._x = ...`` defines ``_x``), arguments and imported names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.For | ast.With | ast.NamedExpr):
            targets = {
                ast.Assign: lambda n: n.targets, ast.For: lambda n: [n.target], ast.NamedExpr: lambda n: [n.target],
                ast.With: lambda n: [item.optional_vars for item in n.items if item.optional_vars is not None],
            }.get(type(node), lambda n: [n.target])(node)  # fmt: skip
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute):
                        names.add(part.attr)
                    elif isinstance(part, ast.Name):
                        names.add(part.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setdefault" and node.args:
            key = getattr(node.args[0], "value", None)  # ``self.__dict__.setdefault("_x", ...)`` defines _x
            if isinstance(key, str) and getattr(node.func.value, "attr", None) == "__dict__":
                names.add(key)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    return names


def foreign_private_uses(source: str, filename: str = "<module>", ours: set[str] | None = None) -> list[str]:
    """Private modules and names of a foreign package (Ray, Optuna, torch...) that ``source`` names:
    imports, ``lazy_import`` strings, attribute chains on an imported foreign module, and ANY
    ``._name`` attribute that neither this module nor the rest of the project (``ours``) defines
    (a private field or method of a foreign object, through ``self`` in a subclass or not), except
    the standard library's documented underscore names."""
    tree = ast.parse(source)
    defined = own_names(source) | (ours or set())
    foreign_names: set[str] = set()
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FOREIGN:
                    foreign_names.add(alias.asname or alias.name.split(".")[0])
                    if _private(alias.name):
                        uses.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FOREIGN:
            foreign_names.update(alias.asname or alias.name for alias in node.names)
            for alias in node.names:
                if _private(node.module) or _private(alias.name):
                    uses.append(f"{filename}:{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_import" and node.args:
            name = getattr(node.args[0], "value", "")
            if isinstance(name, str) and name.split(".")[0] in FOREIGN and _private(name):
                uses.append(f"{filename}:{node.lineno}: lazy_import({name!r})")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr"):
            name = getattr(node.args[1], "value", None) if len(node.args) > 1 else None
            if isinstance(name, str) and _private(name) and name not in defined | DOCUMENTED_UNDERSCORE_NAMES:
                uses.append(f"{filename}:{node.lineno}: {node.func.id}(..., {name!r})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            chain = _chain(node)
            if chain and chain[0] in foreign_names:
                uses.append(f"{filename}:{node.lineno}: {'.'.join(chain)}")
            elif node.attr not in defined and node.attr not in DOCUMENTED_UNDERSCORE_NAMES:
                uses.append(f"{filename}:{node.lineno}: .{node.attr}")
    return uses


def project_sources() -> dict[Path, str]:
    """Every module of the shipped packages outside the adapters, with its source."""
    return {
        path: path.read_text()
        for package in ("harness", "dashboards", "search_space", "trials", "benchmarks")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path not in ADAPTERS
    }


def test_the_private_access_scan_finds_each_kind():
    assert foreign_private_uses("import ray\nnode = ray._private.worker\n")
    assert foreign_private_uses("from optuna.visualization._hypervolume_history import f\n")
    assert foreign_private_uses('x = lazy_import("torch._dynamo.utils")\n')
    assert foreign_private_uses("from torch import nn\nnn.modules.batchnorm._BatchNorm\n")
    assert foreign_private_uses("def f(sampler):\n    sampler._all_grids = []\n") == []  # it defines it...
    assert foreign_private_uses("def f(sampler):\n    return sampler._all_grids\n")  # ...this reads it
    # Any private field of a foreign object, not a list of known ones: torch's, through a subclass too.
    assert foreign_private_uses("def f(block):\n    block._compiled_call_impl = None\n") == []
    assert foreign_private_uses("def f(block):\n    return block._compiled_call_impl\n")
    assert foreign_private_uses("class B(nn.BatchNorm2d):\n    def g(self, x):\n        self._check_input_dim(x)\n")
    assert foreign_private_uses("def f(m):\n    return getattr(m, '_orig_mod')\n")
    # What this module or the project defines, and the standard library's documented names, are not foreign.
    assert not foreign_private_uses("class A:\n    def _x(self):\n        pass\n    def y(self):\n        self._x()\n")
    assert not foreign_private_uses("def f(store):\n    return store._write\n", ours={"_write"})
    assert not foreign_private_uses("import os\nos._exit(1)\nrow._mapping\npoint._replace(x=1)\n")
    assert not foreign_private_uses("import torch\nimport optuna\ntorch.compile\noptuna.samplers.TPESampler\n")


def test_no_module_outside_the_adapters_names_a_private_part_of_ray_optuna_or_torch():
    sources = project_sources()
    ours = set().union(*(own_names(source) for source in sources.values()))
    uses = []
    for path, source in sources.items():
        uses += foreign_private_uses(source, str(path.relative_to(ROOT)), ours)
    assert uses == []


def test_every_private_name_the_adapters_use_exists_on_the_installed_versions():
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    from harness.search import adapter
    from trials.devices import torch_internals

    for name, module in torch_internals.MODULES.items():
        assert importlib.import_module(module) is not None
        assert getattr(torch_internals, name).__name__ == module
    assert callable(adapter.ray_raylet.Config.initialize) and callable(adapter.ray_raylet.GcsClient)
    assert callable(adapter.ray_services.canonicalize_bootstrap_address)
    assert callable(adapter.optuna_hypervolume_history._get_hypervolume_history_info)
    grid = optuna.samplers.GridSampler({"a": [1, 2, 3]}, seed=0)
    assert all(hasattr(grid, name) for name in adapter.GRID_FIELDS)
    assert adapter.restrict_grid(grid, [{"a": 2}]) == 1 and adapter.grid_size(grid) == 1
    assert OptunaSearch is not None  # its fields: tests/test_optuna_fields.py


def _tiny_spec(name: str, n_trials: int, stop: dict | None = None) -> dict:
    return {
        "name": name,
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 128, "val_size": 32, "batch_size": 32},
        "training": {"epochs": 1, "lr": 1e-3},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        "params": {"embed_dim": {"choice": [32, 48, 64]}, "depth": {"int": [1, 2]}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "random", "n_trials": n_trials, "concurrency": 1, "seed": 1}
        | ({"stop": stop} if stop else {}),
    }


@pytest.fixture
def local_ray_ends_with_the_test():
    """A search in this process starts a local Ray; the tests after it start their own."""
    import ray

    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.usefixtures("local_ray_ends_with_the_test")
def test_two_searches_run_one_after_the_other_in_one_process_each_with_its_own_counts(tmp_path, monkeypatch):
    """Through the public API: the first search is ended by its own stop rule (a wall-clock budget
    spent at once), the second runs all its trials: nothing of the first (its stop reason, its trial
    ends, its budget's start) reaches the second, which shares only the process with it."""
    from dashboards import load_study
    from harness import run_search

    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    first = run_search(_tiny_spec("first", 4, stop={"max_hours": 1e-9}), store=url, results_dir=tmp_path / "ray")
    second = run_search(_tiny_spec("second", 3), store=url, results_dir=tmp_path / "ray")
    assert first.record["status"] == "completed" and "max_hours" in (first.record["status_message"] or "")
    assert first.counts.by_status.get("completed", 0) < 4
    assert second.record["status"] == "completed" and not second.record["status_message"]
    assert second.counts.by_status["completed"] == 3
    again = load_study("second", url)  # the API returns what load_study returns
    assert type(again) is type(second) and len(again.trials()) == len(second.trials()) == 3
    for study in (first, second, again):
        study.close()


@pytest.mark.slow
@pytest.mark.usefixtures("local_ray_ends_with_the_test")
def test_a_search_leaves_its_process_as_it_found_it(tmp_path, monkeypatch):
    """Issue 58 (4): the store's password went to PGPASSWORD and stayed there, and Optuna's verbosity,
    Ray's output settings and the umask with it: a second run_search in the process inherited the
    first one's secret. After a search on a PostgreSQL store with a password (trust auth here: it is
    accepted and ignored), the environment, umask and log levels are what they were."""
    import logging
    import os

    import optuna
    from sqlalchemy.engine import make_url

    from harness import run_search
    from harness.search.session import QUIETED_LOGGERS
    from tests.conftest import fresh_postgres_database

    monkeypatch.delenv("PGPASSWORD", raising=False)
    url, drop = fresh_postgres_database()
    secret = "Archsearch-Env-Secret-31"
    with_password = make_url(url).set(password=secret).render_as_string(hide_password=False)
    environment = dict(os.environ)
    levels = {name: logging.getLogger(name).level for name in QUIETED_LOGGERS}
    verbosity = optuna.logging.get_verbosity()
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        study = run_search(_tiny_spec("scoped", 1), store=with_password, results_dir=tmp_path / "ray")
        study.close()
        assert dict(os.environ) == environment
        assert secret not in repr(dict(os.environ))
        assert {name: logging.getLogger(name).level for name in QUIETED_LOGGERS} == levels
        assert optuna.logging.get_verbosity() == verbosity
        assert os.umask(umask) == umask
    finally:
        drop()


@pytest.mark.slow
@pytest.mark.usefixtures("local_ray_ends_with_the_test")
def test_ray_failing_under_the_driver_is_an_interruption_in_one_line_with_the_resume_command(tmp_path, monkeypatch):
    """Issue 58 (7): the README tour's search once exited 1 with Ray's own "Failed to read data from the
    socket: End of file" (the driver's connection to its local Ray lost). Such a failure out of fit()
    now records the study interrupted and says, in one line, what failed and how to resume."""
    from ray import tune
    from ray.exceptions import RaySystemError

    from harness import run_search
    from harness.search.interrupts import SearchInterrupted
    from harness.store import Store

    def lost(self, *args, **kwargs):
        raise RaySystemError("Failed to read data from the socket: End of file")

    monkeypatch.setattr(tune.Tuner, "fit", lost)  # the fault, where Ray raises it; everything else real
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.raises(SearchInterrupted) as stopped:
        run_search(_tiny_spec("lost", 1), store=url, results_dir=tmp_path / "ray")
    said = str(stopped.value)
    assert "\n" not in said and stopped.value.exit_code == 1, said
    assert "Ray failed under the driver: RaySystemError" in said
    assert "resume with: archsearch search --resume lost" in said
    with Store.open(url, create=False) as store:
        assert store.study("lost")["status"] == "interrupted"


@pytest.mark.slow
@pytest.mark.usefixtures("local_ray_ends_with_the_test")
def test_the_documented_python_example_runs(tmp_path, monkeypatch):
    """docs/searching.md, "From Python: launch a search": the example as written, on a tiny spec laid
    where the example names its spec (the quickstart preset's path; tests/test_readme_tour.py runs it
    on the preset itself after the demo)."""
    import re

    import yaml

    text = (ROOT / "docs" / "searching.md").read_text()
    section = text.split("## From Python: launch a search", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "search_space" / "presets" / "quickstart.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(yaml.safe_dump(_tiny_spec("doc", 2)))
    namespace: dict = {}
    exec(compile(example, "docs/searching.md", "exec"), namespace)
    study = namespace["study"]
    assert study.name == "my-search" and study.record["status"] == "completed"
    assert study.counts.by_status["completed"] == 2 and len(study.front()) >= 1
    study.close()


STATUS_WORDS = {"running", "completed", "pruned", "failed", "diverged", "infeasible", "duplicate", "interrupted"}
STATUS_MAPPING = {ROOT / "trials" / "status.py", ROOT / "harness" / "store" / "schema.py"}  # the enums; the columns


def bare_status_strings(source: str, filename: str = "<module>") -> list[str]:
    """Status words used as statuses (compared, looked up, passed as ``status=``/``statuses=``)
    instead of :class:`trials.status.TrialStatus` / ``StudyStatus`` members."""

    def words(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and node.value in STATUS_WORDS:
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [w for element in node.elts for w in words(element)]
        return []

    found = []
    for node in ast.walk(ast.parse(source)):
        hits: list[str] = []
        if isinstance(node, ast.Compare):
            hits = [w for side in (node.left, *node.comparators) for w in words(side)]
        elif isinstance(node, ast.keyword) and node.arg in ("status", "statuses"):
            hits = words(node.value)
        elif isinstance(node, ast.Subscript):
            hits = words(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "isin"):
            hits = [w for argument in node.args[:1] for w in words(argument)]
        found += [f"{filename}:{getattr(node, 'lineno', '?')}: {w!r}" for w in hits]
    return found


def test_the_status_scan_finds_each_use():
    assert bare_status_strings('if row["status"] == "completed":\n    pass\n')
    assert bare_status_strings('store.finish_trial(s, 1, status="failed")\n')
    assert bare_status_strings('n = counts["pruned"]\n')
    assert bare_status_strings('ok = status in ("running", "interrupted")\n')
    assert bare_status_strings('frame["status"].isin(["completed"])\n')
    assert not bare_status_strings('columns = ["name", "completed", "failed"]\nkind = "interrupted"\n')


def test_no_bare_status_strings_outside_the_enums_and_the_schema():
    found = []
    for package in ("harness", "dashboards", "search_space", "trials"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in STATUS_MAPPING:
                continue
            found += bare_status_strings(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_constraints_bound_ray_and_optuna_to_the_releases_the_adapter_is_tested_on(monkeypatch):
    """Issue 58 (3): constraints.txt pinned torch alone while the adapter told users to "install the
    version in constraints.txt" for Ray and Optuna. Now it bounds both to TESTED_RELEASES (the same
    numbers), the installed ones are inside (CI installs with it), and another release is warned of."""
    import re
    import warnings

    from harness.search import adapter

    lines = (ROOT / "constraints.txt").read_text().splitlines()
    for package, (first, past) in adapter.TESTED_RELEASES.items():
        bound = f"{package}>={first[0]}.{first[1]},<{past[0]}.{past[1]}"
        assert bound in lines, (bound, lines)
    assert adapter.untested_releases() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adapter.check_releases()
    real = adapter.version
    monkeypatch.setattr(adapter, "version", lambda name: "9.1.0" if name == "ray" else real(name))
    assert [re.sub(r" \(.*", "", u) for u in adapter.untested_releases()] == ["ray 9.1.0"]
    with pytest.warns(RuntimeWarning, match=r"not tested on ray 9\.1\.0"):
        adapter.check_releases()


def test_one_atomic_write():
    """Issue 58 (5): five modules replaced files each their own way (one without fsync, one without
    removing its temporary file on failure). trials.atomic is the one; dashboards.files stages an
    output set's files through it and renames them together."""
    import ast

    allowed = {ROOT / "trials" / "atomic.py", ROOT / "dashboards" / "files.py"}
    found = []
    for package in ("harness", "dashboards", "search_space", "trials", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                is_os = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
                if is_os and node.attr in ("replace", "rename") and path not in allowed:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} os.{node.attr}")
    assert found == []


def test_no_module_calls_a_private_name_of_another_project_module():
    """Issue 58 (1): cluster_scale called studies._grid_spec and studies._study_name. A name that other
    modules use is public: ``module._name`` of a project module imported by name is flagged."""
    import ast

    found = []
    for package in ("harness", "dashboards", "search_space", "trials", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            modules = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROJECT_PACKAGES:
                    modules |= {alias.asname or alias.name for alias in node.names}
                elif isinstance(node, ast.Import):
                    modules |= {
                        alias.asname
                        for alias in node.names
                        if alias.asname and alias.name.split(".")[0] in PROJECT_PACKAGES
                    }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in modules
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value.id}.{node.attr}")
    assert found == []


PROJECT_PACKAGES = {"harness", "dashboards", "search_space", "trials", "benchmarks"}


MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines_without_a_reason_in_its_docstring():
    """Issue 58 (5): functions a reader cannot hold (a 148-line report section, a 119-line driver with
    11 parameters). Each function over 80 lines says why it is long ("Long because ...") or is split."""
    import ast

    found = []
    for package in ("harness", "dashboards", "search_space", "trials", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and "Long because" not in (ast.get_docstring(node) or ""):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert found == []
