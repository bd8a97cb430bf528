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


# --- Outputs never land on the store's files, whatever they are named; refusals are one line (issue 44 pass 2)


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_stores_absent_wal_and_shm_are_refused_by_name(tmp_path, store_url, command):
    """-journal too (adversarial pass 2): a YAML written as store.db-journal was replayed by SQLite as
    a hot rollback journal, and every later command failed "attempt to write a readonly database"."""
    for side in ("-wal", "-shm", "-journal"):
        path = tmp_path / f"store.db{side}"
        path.unlink(missing_ok=True)  # the store is closed: SQLite has none now, and makes one when it opens
        result = CliRunner().invoke(main, COMMANDS[command](str(path), store_url))
        assert result.exit_code == 2 and "which this command reads" in result.output, result.output
        assert not path.exists()


def test_atomic_write_never_replaces_a_sqlite_database_or_its_side_files(tmp_path, store_url):
    from dashboards.files import OutputRefused, atomic_write

    db = tmp_path / "store.db"
    before = _digest(db)
    renamed = tmp_path / "s.runs.csv"  # a store named as a reproduction's runs table
    renamed.write_bytes(db.read_bytes())
    plain = tmp_path / "plain.csv"
    plain.write_text("old")
    (tmp_path / "plain.csv-wal").write_text("a log")
    for path in (db, renamed, tmp_path / "store.db-wal", tmp_path / "store.db-shm", plain):
        with pytest.raises(OutputRefused):
            atomic_write(path, "x,y\n")
    assert _digest(db) == before and renamed.read_bytes()[:16] == b"SQLite format 3\0" and plain.read_text() == "old"
    assert not (tmp_path / "store.db-wal").exists()
    atomic_write(tmp_path / "fresh.csv", "x\n")  # anything else is written as before
    assert (tmp_path / "fresh.csv").read_text() == "x\n"


def test_a_figure_the_report_writes_is_never_the_store(tmp_path, store_url):
    png = tmp_path / "png"
    png.mkdir()
    store = png / "s-pareto.png"  # the name the report gives study s's Pareto figure
    (tmp_path / "store.db").rename(store)
    before = _digest(store)
    url = f"sqlite:///{store}"
    out = str(tmp_path / "r.html")
    result = CliRunner().invoke(main, ["report", "s", "-o", out, "--png", str(png), "--store", url])
    assert result.exit_code == 2 and len(_error_lines(result.output)) == 1, result.output
    assert _digest(store) == before and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_standard_output_redirected_into_the_store_is_refused(tmp_path, store_url, command):
    db = tmp_path / "store.db"
    before = _digest(db)
    for spelling in ("-", "/dev/stdout"):
        with open(db, "ab") as appended:  # archsearch ... -o - >> store.db
            done = subprocess.run(
                [EXE, *COMMANDS[command](spelling, store_url)], stdout=appended, stderr=subprocess.PIPE, text=True,
                cwd=tmp_path, timeout=300,
            )  # fmt: skip
        assert done.returncode == 2 and len(_error_lines(done.stderr)) == 1, done.stderr
        assert "standard output is" in done.stderr
    with open(db, "ab") as appended:  # any command: what it prints would go into the store
        done = subprocess.run([EXE, "trials", "s", "--store", store_url], stdout=appended, stderr=subprocess.PIPE,
                              text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "standard output is the store" in done.stderr
    assert _digest(db) == before


def test_echoed_output_paths_are_escaped(tmp_path, store_url):
    out = tmp_path / "nl\nx\x1b]0;T\x07.yaml"
    result = CliRunner().invoke(main, COMMANDS["export"](str(out), store_url))
    assert result.exit_code == 0, result.output
    said = [line for line in result.output.splitlines() if "written to" in line]
    assert len(said) == 1 and "\\n" in said[0] and "\\x1b]0;T\\x07" in said[0]
    assert "\x1b" not in result.output and "\x07" not in result.output


def test_wrong_kinds_of_output_paths_are_refused_in_one_line(tmp_path, store_url):
    directory = tmp_path / "dir"
    directory.mkdir()
    a_file = tmp_path / "file"
    a_file.write_text("keep")
    for args in (
        ["export", "s", "0", "-o", str(directory)],
        ["report", "s", "-o", str(tmp_path / "r.html"), "--png", str(a_file)],
        ["report", "s", "-o", str(tmp_path / "r.html"), "--png", "/dev/stdout"],
        ["reproduce", "cait-depth", "--report-only", "--output", str(a_file)],
    ):
        result = CliRunner().invoke(main, [*args, "--store", store_url])
        assert result.exit_code == 2, (args, result.output)
        lines = _error_lines(result.output)
        assert len(lines) == 1 and lines[0].startswith("Error:") and "Usage:" not in result.output, result.output
    assert a_file.read_text() == "keep" and not (tmp_path / "r.html").exists()


def test_a_trailing_slash_names_a_directory(tmp_path, store_url):
    result = CliRunner().invoke(main, COMMANDS["export"](str(tmp_path / "newx.yaml") + "/", store_url))
    assert result.exit_code == 2 and "names a directory" in result.output, result.output
    assert not (tmp_path / "newx.yaml").exists()


def test_the_report_is_never_one_of_its_own_figures(tmp_path, store_url):
    png = tmp_path / "png"
    png.mkdir()
    figure = png / "s-pareto.png"
    figure.write_bytes(b"\x89PNG an earlier figure")
    result = CliRunner().invoke(main, ["report", "s", "-o", str(figure), "--png", str(png), "--store", store_url])
    assert result.exit_code == 2 and len(_error_lines(result.output)) == 1 and "extension .png" in result.output
    assert figure.read_bytes() == b"\x89PNG an earlier figure"


EXTENSIONS = {  # command -> (a name of another format, the extensions its message lists, a name it takes)
    "report": (lambda out, url: ["report", "s", "-o", out, "--store", url], "h1.png", ".html or .htm", "r.htm"),
    "export": (lambda out, url: ["export", "s", "0", "-o", out, "--store", url], "t.json", ".yaml or .yml", "t.yml"),
    "export --weights": (
        lambda out, url: ["export", "s", "0", "-o", "-", "--weights", out, "--store", url],
        "w.yaml",
        ".pt or .pth or .ckpt",
        None,  # written only where the search kept a checkpoint (tests/test_export.py)
    ),
}


@pytest.mark.parametrize("command", sorted(EXTENSIONS))
def test_an_output_named_for_another_format_is_refused_and_nothing_is_written(tmp_path, store_url, command):
    """Issue 61: ``report -o reports/h1.png`` wrote HTML into a .png. An output whose extension says
    another format is refused in one line naming the extension and the ones it takes, before anything
    is written (its folder included); the format's own extensions, and a name without one, are written."""
    args, wrong, accepted, right = EXTENSIONS[command]
    out = tmp_path / "reports" / wrong
    result = CliRunner().invoke(main, args(str(out), store_url))
    assert result.exit_code == 2, result.output
    (line,) = _error_lines(result.output)
    assert f"the extension {out.suffix} does not match what is written" in line and f"use {accepted}" in line
    assert not out.parent.exists()
    if right is not None:
        for name in (right, right.upper(), "no-extension", "run.2024"):
            result = CliRunner().invoke(main, args(str(tmp_path / name), store_url))
            assert result.exit_code == 0 and (tmp_path / name).is_file(), (name, result.output)


@pytest.mark.parametrize("name", ["r.mp4", "r.h5", "r.7z", "r.MP3"])
def test_an_extension_with_digits_is_an_extension_too(tmp_path, store_url, name):
    """``report -o r.mp4`` wrote HTML into an ``.mp4`` (an extension was letters only); digits alone
    (``run.2024``) stay a name, as above."""
    out = tmp_path / name
    result = CliRunner().invoke(main, ["report", "s", "-o", str(out), "--static", "--store", store_url])
    assert result.exit_code == 2, result.output
    (line,) = _error_lines(result.output)
    assert f"the extension {out.suffix} does not match what is written" in line and not out.exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_a_full_standard_output_fails_in_one_line(store_url, fmt):
    with open("/dev/full", "w") as full:
        done = subprocess.run([EXE, "trials", "s", "--format", fmt, "--store", store_url], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert _error_lines(done.stderr) == ["Error: cannot write to standard output: No space left on device"]


def test_a_refused_report_creates_no_directory(tmp_path, store_url):
    from sqlalchemy import update

    from harness.store.schema import Study

    with Store.open(store_url) as store, store.engine.begin() as conn:
        conn.execute(update(Study).where(Study.name == "s").values(objectives="not json"))
    out, png = tmp_path / "newparent" / "x.html", tmp_path / "newpng"
    result = CliRunner().invoke(main, ["report", "s", "-o", str(out), "--png", str(png), "--store", store_url])
    assert result.exit_code == 2 and len(_error_lines(result.output)) == 1, result.output
    assert not out.parent.exists() and not png.exists()
