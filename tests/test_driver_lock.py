"""The SQLite driver lock (``harness.store.driver_lock``) never disturbs SQLite's own locks on the file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards.files import database_in_the_way
from harness.store import driver_lock


def _in_another_process(path: Path, sql: str) -> list:
    """Run ``sql`` on the database in a new process (a new connection there, closed at its end)."""
    code = (
        "import sqlite3, sys, json\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        f"rows = c.execute({sql!r}).fetchall()\n"
        "c.close()\n"
        "print(json.dumps(rows))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [tuple(row) for row in json.loads(done.stdout)]


@pytest.mark.parametrize("how", ["ask", "take and release", "refuse an output onto it"])
def test_asking_about_or_letting_go_of_a_driver_lock_keeps_sqlites_locks(tmp_path, how):
    """POSIX record locks belong to the process, and closing any descriptor on the file drops them all: the
    lock probe's open-and-close dropped this process's SQLite locks, so another process, thinking itself the
    last connection, checkpointed and deleted the WAL this process's open connection went on writing to; its
    next committed row was invisible to every fresh reader (two WALs for one database)."""
    path = tmp_path / "store.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t (x INTEGER)")
    connection.execute("INSERT INTO t VALUES (1)")
    if how == "ask":
        assert driver_lock.lock_held(path, 1) is False
    elif how == "refuse an output onto it":  # report -o store.db from a process that has the store open
        assert database_in_the_way(path) == "has a SQLite -wal file beside it (a store?)"
        assert database_in_the_way(f"{path}-wal") == f"is the -wal file of the SQLite database {path}"
    else:
        assert driver_lock.hold(path, 7) is not None and driver_lock.lock_held(path, 7) is True
        driver_lock.release(path, 7)
        assert driver_lock.lock_held(path, 7) is False
    _in_another_process(path, "INSERT INTO t VALUES (2)")  # a connection that opens, writes and closes
    connection.execute("INSERT INTO t VALUES (3)")
    assert _in_another_process(path, "SELECT x FROM t ORDER BY x") == [(1,), (2,), (3,)]
    connection.close()
