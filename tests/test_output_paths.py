"""Outputs look before they write (issue 44, pattern 1): every ``-o``/``--png`` path of ``report`` and
``export`` is a regular file or nothing; ``-`` and the ``-o /dev/stdout`` idiom write to standard
output; the store and the files a command reads are never overwritten; a device, a FIFO, a directory
or a symbolic link is refused in one line with exit 2 and nothing written; an existing file keeps its mode.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.store import Store

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        for number, (top1, flops) in enumerate([(50.0, 3e6), (60.0, 5e6)]):
            store.finish_trial(
                "s",
                number,
                status="completed",
                config={"model": {"preset": "cait_tiny32", "depth": 1}, "seed": number},
                measurement={"flops": flops, "params": 10},
                epochs=[{"epoch": 1, "top1": top1, "train_loss": 1.0}],
                final={"top1": top1},
            )
    return url


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


COMMANDS = {
    "report": lambda out, url: ["report", "s", "-o", out, "--store", url],
    "export": lambda out, url: ["export", "s", "0", "-o", out, "--store", url],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_store_itself_is_refused_as_an_output_and_left_as_it_was(tmp_path, store_url, command):
    db = tmp_path / "store.db"
    before = _digest(db)
    wal = tmp_path / "store.db-wal"
    wal.write_bytes(b"wal")  # SQLite's write-ahead log: part of the store
    for spelling in (str(db), str(tmp_path / "." / "store.db"), str(wal)):
        result = CliRunner().invoke(main, COMMANDS[command](spelling, store_url))
        assert result.exit_code == 2 and "which this command reads" in result.output
    assert _digest(db) == before and wal.read_bytes() == b"wal"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_devices_fifos_directories_and_links_are_refused_in_one_line(tmp_path, store_url, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "real.html"
    target.write_text("keep me")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    directory = tmp_path / "dir"
    directory.mkdir()
    for path, fragment in [
        ("/dev/null", "not a regular file"),
        (str(fifo), "a FIFO"),
        (str(directory), "is a directory"),
        (str(link), "symbolic link"),
    ]:
        result = CliRunner().invoke(main, COMMANDS[command](path, store_url))
        assert result.exit_code == 2, (path, result.output)
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and fragment in errors[0]
    assert target.read_text() == "keep me" and link.is_symlink() and fifo.exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_dash_and_dev_stdout_write_to_standard_output(tmp_path, store_url, command):
    for spelling in ("-", "/dev/stdout"):
        done = subprocess.run(
            [EXE, *COMMANDS[command](spelling, store_url)], capture_output=True, text=True, cwd=tmp_path, timeout=300
        )
        assert done.returncode == 0, done.stderr
        marker = "<html" if command == "report" else "model:"
        assert marker in done.stdout
        assert not (tmp_path / "-").exists()  # no file named "-"
        assert "written to" not in done.stdout  # nothing but the output on standard output


def test_an_existing_output_keeps_its_mode(tmp_path, store_url):
    out = tmp_path / "trial.yaml"
    out.write_text("old")
    out.chmod(0o640)
    result = CliRunner().invoke(main, COMMANDS["export"](str(out), store_url))
    assert result.exit_code == 0, result.output
    assert "model:" in out.read_text() and (out.stat().st_mode & 0o777) == 0o640


def test_a_png_directory_that_is_a_file_is_refused_before_anything_is_written(tmp_path, store_url):
    blocker = tmp_path / "png"
    blocker.write_text("a file")
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "s", "-o", str(out), "--png", str(blocker), "--store", store_url])
    assert result.exit_code == 2 and "--png" in result.output and "is a file" in result.output
    assert not out.exists() and blocker.read_text() == "a file"


def _strict_json(text: str):
    import json

    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_json_output_is_strict_and_stored_control_characters_never_reach_a_terminal(tmp_path, store_url):
    """``--format json`` is RFC 8259 JSON (no bare Infinity or NaN); a status message carrying escape
    sequences (a window-title one among them) is shown escaped in the table."""
    from sqlalchemy import update

    from harness.store.schema import Study

    hostile = "stopped\x1b]0;pwned\x07 \x1b[31mred\x1b[0m\r\nnext line"
    with Store.open(store_url) as store:
        store.finish_trial("s", 2, status="completed", config={"seed": 2}, measurement={"flops": float("inf")},
                           epochs=[{"epoch": 1, "top1": float("nan"), "train_loss": float("inf")}],
                           final={"top1": float("inf")})  # fmt: skip
        with store.engine.begin() as conn:
            conn.execute(update(Study).where(Study.name == "s").values(status_message=hostile))
    for args in (
        ["trials", "s", "--format", "json"],
        ["studies", "--format", "json"],
        ["pareto", "s", "--format", "json"],
    ):
        result = CliRunner().invoke(main, [*args, "--store", store_url])
        assert result.exit_code == 0, result.output
        _strict_json(result.output)
    for args in (["studies"], ["trials", "s"]):
        shown = CliRunner().invoke(main, [*args, "--store", store_url]).output
        assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert "\\x1b]0;pwned\\x07" in CliRunner().invoke(main, ["studies", "--store", store_url]).output
