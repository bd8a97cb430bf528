"""One error taxonomy (issue 34, item 4): every error a user can cause derives from ArchsearchError and
carries its exit code; the CLI catches the root once (one line); anything else is a bug, reported as
one in a line with the path of its traceback (private, passwords masked)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.table import TableError
from dashboards.pareto import ParetoError
from harness.cli import main
from harness.search.adapter import UnsupportedVersion
from harness.search.cluster.join import ClusterError
from harness.search.cluster.ray_setup import SearchError
from harness.search.driver import NothingToResume
from harness.search.interrupts import SearchInterrupted
from harness.store import StoreError
from harness.verify import VerifyError
from trials.configio import ConfigError
from trials.devices.gpu import DeviceError
from trials.errors import ArchsearchError
from trials.models.config import ModelConfigError


def test_every_user_facing_error_is_an_archsearch_error_with_its_kind_and_exit_code():
    kinds = {
        ConfigError: ("spec", 2), ModelConfigError: ("spec", 2), StoreError: ("store", 2), SearchError: ("run", 2),
        DeviceError: ("run", 2), VerifyError: ("run", 2), ClusterError: ("cluster", 2), TableError: ("data", 2),
        ParetoError: ("data", 2), UnsupportedVersion: ("environment", 2), SearchInterrupted: ("interrupted", None),
        NothingToResume: ("nothing to do", 0),
    }  # fmt: skip
    for cls, (kind, code) in kinds.items():
        assert issubclass(cls, ArchsearchError) and cls.kind == kind, cls
        if code is not None:
            assert cls.exit_code == code, cls


def _studies_raising(monkeypatch, error: BaseException):
    from harness.cli import read_commands

    def boom(*args, **kwargs):
        raise error

    monkeypatch.setattr(read_commands.studies_command, "callback", boom)
    return CliRunner().invoke(main, ["studies"])


def test_an_archsearch_error_that_reaches_the_cli_is_one_line_with_its_exit_code(monkeypatch):
    result = _studies_raising(monkeypatch, StoreError("study 'x' not found"))
    assert result.exit_code == 2 and result.stderr.strip() == "Error: study 'x' not found"


def test_anything_else_is_a_bug_in_one_line_with_a_private_traceback_and_no_password(monkeypatch):
    result = _studies_raising(monkeypatch, RuntimeError("postgresql://me:S3cret@db/x went away"))
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("archsearch: internal error (a bug, please report it): RuntimeError:")
    path = re.search(r"traceback in (\S+)$", line).group(1)
    try:
        text = Path(path).read_text()
        assert "Traceback (most recent call last)" in text and "RuntimeError" in text
        assert "S3cret" not in text and "me:***@db" in text
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        os.unlink(path)


@pytest.mark.parametrize("error", [KeyboardInterrupt()])
def test_a_ctrl_c_in_any_command_is_exit_130(monkeypatch, error):
    result = _studies_raising(monkeypatch, error)
    assert result.exit_code == 130 and "interrupted by SIGINT" in result.stderr
