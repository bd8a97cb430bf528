"""Store passwords never reach a disk, a pickle, a log or the screen; the results dir is private.

The PostgreSQL server here trusts local connections, so a password in the URL is accepted and
ignored by the server: exactly what lets these tests check where archsearch would have put it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from harness.store.urls import mask_url, split_secret

SECRET = "Archsearch-Test-Secret-7f3a"
EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


@pytest.mark.parametrize(
    ("url", "public"),
    [
        (f"postgresql://u:{SECRET}@h:5432/db", "postgresql://u@h:5432/db"),
        (f"postgresql://u@h:5432/db?password={SECRET}&sslmode=require", "postgresql://u@h:5432/db?sslmode=require"),
        ("sqlite:///archsearch.db", "sqlite:///archsearch.db"),
    ],
)
def test_passwords_are_split_off_and_masked_wherever_they_are_written(url, public):
    without, password = split_secret(url)
    assert without == public and SECRET not in without
    assert password == (SECRET if SECRET in url else None)
    assert SECRET not in mask_url(url)
    assert SECRET not in mask_url(url.replace(":5432", ":notaport"))  # unparseable: masked all the same


def test_an_error_about_a_url_with_a_query_password_does_not_print_it():
    from click.testing import CliRunner

    from harness.cli import main

    for url in (f"postgresql://u@127.0.0.1:1/db?password={SECRET}", f"postgresql://u:{SECRET}@127.0.0.1:port/db"):
        result = CliRunner().invoke(main, ["studies", "--store", url])
        assert result.exit_code == 2, result.output
        assert SECRET not in result.output and len(result.output.strip().splitlines()) == 1


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*")]


@pytest.mark.slow
def test_a_postgresql_search_leaves_no_password_in_the_results_or_rays_session_dir(tmp_path):
    from conftest import fresh_postgres_database

    admin_url, drop = fresh_postgres_database()
    try:
        url = make_url(admin_url).set(password=SECRET).render_as_string(hide_password=False)
        spec = {
            "name": "secret",
            "family": "cait",
            "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
            "data": {"name": "synthetic", "num_classes": 4, "train_size": 128, "val_size": 64, "batch_size": 32},
            "training": {"epochs": 2, "lr": 1e-3},
            "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
            "params": {"embed_dim": {"choice": [32, 48]}, "lr": {"float": [1e-4, 1e-2]}},
            "objectives": {"top1": "max", "flops": "min"},
            "search": {"sampler": "random", "n_trials": 2, "concurrency": 1, "seed": 1},
        }
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        results = tmp_path / "results"
        started = time.time()
        env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
        done = subprocess.run(
            [EXE, "search", str(tmp_path / "spec.yaml"), "--store", url, "--results-dir", str(results)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert SECRET not in done.stdout + done.stderr
        written = _files(results)
        assert any(p.name == "tuner.pkl" for p in written) and any(p.name.startswith("searcher-state") for p in written)
        sessions = [p for p in Path("/tmp/ray").glob("session_2*") if p.stat().st_mtime >= started - 5]
        assert sessions, "no Ray session dir of this search found"
        for path in written + [f for s in sessions for f in _files(s)]:
            if path.is_file() and not path.is_symlink():
                try:
                    assert SECRET.encode() not in path.read_bytes(), path
                except (PermissionError, FileNotFoundError, OSError):
                    continue
        for path in written:  # created 0600 / 0700: nobody else on the shared results dir reads them
            mode = stat.S_IMODE(path.lstat().st_mode)
            assert mode & 0o077 == 0, (path, oct(mode))
    finally:
        drop()


SECRET_FORMS = [  # every place a URL may carry a secret: what a message masks is what is split off
    "postgresql://u:{s}@h:5432/db",
    "postgresql://u@h:5432/db?password={s}",
    "postgresql://u@h:5432/db?sslpassword={s}",
    "postgresql://u@h:5432/db?passfile=/home/{s}",
    "postgresql://u@h:5432/db?token={s}&sslmode=require",
    "postgresql://u@h:5432/db?some_new_option={s}",
    "sqlite:////tmp/x.db?password={s}",
    "sqlite:////tmp/x.db?sslpassword={s}",
    "sqlite:////tmp/x.db?passfile={s}",
    "sqlite:////tmp/x.db?api_key={s}",
]


@pytest.mark.parametrize("form", SECRET_FORMS)
def test_whatever_a_message_masks_is_split_off_or_the_url_refused(form):
    """One secrets list: a URL that passes the store's check hands on (split_secret) no part that
    mask_url hides; every other URL is refused, naming the parameter, without its value."""
    from harness.store.errors import StoreError
    from harness.store.urls import normalize_url

    url = form.format(s=SECRET)
    assert SECRET not in mask_url(url)
    public, password = split_secret(url)
    assert SECRET not in public, public
    try:
        normalize_url(url)
    except StoreError as refused:
        said = str(refused)
        assert SECRET not in said and ("?" in said or "parameter" in said), said
        return
    assert password == SECRET, "a secret the store took is neither split off nor refused"


def test_a_sqlite_store_url_with_a_secret_parameter_is_refused_before_anything_is_written(tmp_path):
    spec = {
        "name": "s",
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
        "params": {"depth": {"choice": [1, 2]}},
        "objectives": {"top1": "max"},
        "search": {"sampler": "random", "n_trials": 1},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'store.db'}?sslpassword={SECRET}"
    done = subprocess.run(
        [EXE, "search", str(tmp_path / "spec.yaml"), "--store", url, "--results-dir", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "?sslpassword" in done.stderr and SECRET not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no store, no results dir
