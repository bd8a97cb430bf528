"""Commands that only read open the store read-only: on SQLite (``mode=ro``) and PostgreSQL (READ ONLY
transactions); they work on a read-only mount and leave any file, a store or not, byte-for-byte as it was."""

from __future__ import annotations

import hashlib
import shutil
import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import add_small_study
from sqlalchemy.exc import DBAPIError

from harness.cli import main
from harness.store import Store, StoreError

OBJECTIVES = {"top1": "max", "flops": "min"}


def _fill(url: str) -> None:
    with Store.open(url) as store:
        add_small_study(store)
        store.set_study_status("s", "running", driver=f"{socket.gethostname()} 999999999 1")  # a driver that is gone


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


READERS = [
    ["studies"],
    ["trials", "s", "--sort", "top1"],
    ["pareto", "s", "--objectives", "top1:max,flops:min"],
]


def test_a_read_only_store_reads_and_refuses_every_write(store_url):
    _fill(store_url)
    with Store.open(store_url, read_only=True) as store:
        frame = store.studies()
        assert frame.set_index("name").loc["s", "status"] == "interrupted"  # shown as it is...
        assert len(store.trials("s")) == 3
        with pytest.raises((DBAPIError, StoreError)):
            store.set_study_status("s", "completed")
    with Store.open(store_url, create=False) as store:
        assert store.study("s")["status"] == "running"  # ...but not recorded by a reader


def test_readers_leave_a_sqlite_store_byte_for_byte_unchanged(tmp_path):
    path = tmp_path / "store.db"
    _fill(f"sqlite:///{path}")
    before = _digest(path)
    for args in READERS:
        result = CliRunner().invoke(main, [*args, "--store", f"sqlite:///{path}"])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["report", "s", "--store", f"sqlite:///{path}", "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert _digest(path) == before


@pytest.mark.parametrize("kind", ["other-sqlite", "empty", "text"])
def test_a_file_that_is_not_a_store_is_left_exactly_as_it_was(tmp_path, kind):
    path = tmp_path / "x.db"
    if kind == "other-sqlite":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE notes (x)")
        conn.execute("INSERT INTO notes VALUES (1)")
        conn.commit()
        conn.close()
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        path.write_text("not a database at all\n" * 100)
    before, journal = _digest(path), path.read_bytes()[18:20]
    for args in READERS:
        result = CliRunner().invoke(main, [*args, "--store", f"sqlite:///{path}"])
        assert result.exit_code == 2, result.output
        assert ("no archsearch store" in result.output or "not a database" in result.output), result.output
        assert len(result.output.strip().splitlines()) == 1
    assert _digest(path) == before and path.read_bytes()[18:20] == journal
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.db"]  # no -wal, -shm or journal left


def test_readers_work_on_a_read_only_mount(tmp_path):
    mount = tmp_path / "ro"
    mount.mkdir()
    source = tmp_path / "store.db"
    _fill(f"sqlite:///{source}")
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    made = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        shutil.copy(source, mount / "store.db")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        url = f"sqlite:///{mount / 'store.db'}"
        for args in READERS:
            result = CliRunner().invoke(main, [*args, "--store", url])
            assert result.exit_code == 0, result.output
        result = CliRunner().invoke(main, ["report", "s", "--store", url, "-o", str(tmp_path / "r.html")])
        assert result.exit_code == 0, result.output
    finally:
        subprocess.run(["umount", str(mount)], check=False)
