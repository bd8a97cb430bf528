"""Shared test settings: deterministic seeds and a small thread count (CI has 2 cores)."""

from __future__ import annotations

import os
import uuid

import pytest
import torch

from trials.lazy import real_module


class _RealModuleMonkeyPatch(pytest.MonkeyPatch):
    """pytest's MonkeyPatch, patching a lazily imported module (:func:`trials.lazy.lazy_import`) in its real
    module. Patched through the proxy, pytest (>= 9) reads the value to restore from the proxy's own
    ``__dict__``, finds none and deletes the real attribute at teardown: one test's
    ``monkeypatch.setattr(trainable.runner, "run_trial", ...)`` left ``trials.runner`` without
    ``run_trial`` for every later test of its worker (five failures in one run)."""

    def setattr(self, target, *args, **kwargs):
        return super().setattr(real_module(target) if not isinstance(target, str) else target, *args, **kwargs)

    def delattr(self, target, *args, **kwargs):
        return super().delattr(real_module(target) if not isinstance(target, str) else target, *args, **kwargs)


@pytest.fixture
def monkeypatch():
    """Every test's ``monkeypatch``: pytest's own, lazy modules patched where they live (see above)."""
    patch = _RealModuleMonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    yield


@pytest.fixture(autouse=True)
def _gpu_visibility_restored():
    """Put ``CUDA_VISIBLE_DEVICES`` back after every test.

    A CPU trial placed in-process (``place_trial`` with ``gpus: 0``) blanks it, as a Ray worker must;
    left blank, the next test's fake-GPU Ray node refuses to start ("CUDA_VISIBLE_DEVICES contains []"),
    which is how a CI run once failed two cluster tests that pass alone.
    """
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    yield
    if before is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = before


# -- stores: every store test runs against SQLite AND PostgreSQL ---------------------------------

POSTGRES_ADMIN_URL = os.environ.get("ARCHSEARCH_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _postgres_unavailable(reason: str) -> None:
    """In CI an unreachable PostgreSQL is a failure; elsewhere the PostgreSQL half is skipped."""
    if os.environ.get("ARCHSEARCH_CI"):
        pytest.fail(f"PostgreSQL is required in CI but unreachable at {POSTGRES_ADMIN_URL}: {reason}")
    pytest.skip(f"PostgreSQL not reachable at {POSTGRES_ADMIN_URL}: {reason}")


def fresh_postgres_database():
    """Create an empty database on the server; return (url, drop function)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import OperationalError

    name = f"archsearch_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as error:
        admin.dispose()
        _postgres_unavailable(str(error.orig).splitlines()[0])

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    return url, drop


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A URL of an empty store: a SQLite file, or a fresh database on the PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    url, drop = fresh_postgres_database()
    try:
        yield url
    finally:
        drop()


def add_small_study(store, name: str = "s") -> None:
    """A study of three completed trials (depth 1-3, top1 50-52, FLOPs 1-3e6) in an open store."""
    store.create_study(name, {"name": name}, {"top1": "max", "flops": "min"})
    for number in range(3):
        store.finish_trial(
            name,
            number,
            status="completed",
            config={"model": {"depth": number + 1}},
            measurement={"flops": 1e6 * (number + 1), "params": 1000},
            final={"top1": 50.0 + number},
            epochs=[{"epoch": 1, "top1": 50.0 + number, "train_loss": 1.0}],
        )


def tiny_search_spec(name: str = "tiny", n_trials: int = 1) -> dict:
    """A search spec that trains in seconds (a 1-block CaiT, 64 synthetic images, one epoch), as a dict."""
    return {
        "name": name,
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
        "training": {"epochs": 1, "lr": 1e-3},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        "params": {"depth": {"choice": [1, 2]}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "random", "n_trials": n_trials, "seed": 0},
    }


def tiny_trial_config() -> dict:
    """A trial config that trains in a second on the CPU (a 1-block CaiT, 32 synthetic images, one epoch)."""
    return {
        "model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 32, "val_size": 16, "batch_size": 8},
        "training": {"epochs": 1},
        "measure": {"batch_size": 2, "repeats": 1, "warmup": 0, "latency": False},
        "device": "cpu",
    }


# -- the order files run in: the slowest first ---------------------------------------------------


def pytest_collection_modifyitems(session, config, items) -> None:
    """Files with the most ``slow`` tests first, each file's own order kept.

    ``make test`` runs the suite on two processes, a file to each at a time (pytest-xdist's ``loadfile``):
    a file of several end-to-end searches left to the end runs alone on one core while the other waits.
    Longest first is the classic schedule for that; the count of ``slow`` tests is the measure that stays
    true as tests are added, with no list of durations to keep by hand. Alone (no xdist), the order changes
    nothing a test may depend on: files never share state."""
    def file_of(item) -> str:
        return item.nodeid.split("::")[0]

    slow: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        path = file_of(item)
        slow[path] = slow.get(path, 0) + bool(item.get_closest_marker("slow"))
        first_seen.setdefault(path, index)
    items.sort(key=lambda item: (-slow[file_of(item)], first_seen[file_of(item)]))
