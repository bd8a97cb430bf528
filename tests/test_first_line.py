"""Issue 45 item 2: a person watching a search sees a first line before Ray's start-up (5-7 s here),
not after it: on a terminal, ``[STUDY] checks passed; starting a local Ray...`` comes first, then the
progress line's ``starting: done 0/N``. Off a terminal (a pipe, a log, the refusal tests' one line)
nothing is added. Checked by order on a pseudo-terminal, never by time."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest
import yaml
from conftest import tiny_search_spec

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


@pytest.mark.slow
def test_on_a_terminal_the_first_line_comes_before_ray_starts(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_search_spec("watched", n_trials=1)))
    leader, follower = pty.openpty()
    args = [EXE, "search", str(spec), "--store", f"sqlite:///{tmp_path / 's.db'}", "--results-dir", str(tmp_path / "r")]
    with subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=follower, stdin=subprocess.DEVNULL) as process:
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(timeout=600) == 0, seen.decode(errors="replace")[-2000:]
    os.close(leader)
    lines = [line for line in seen.decode(errors="replace").splitlines() if line.strip()]
    assert lines[0] == "[watched] checks passed; starting a local Ray...", lines[:3]
    assert lines[1].startswith("[watched] starting: done 0/1"), lines[:3]


@pytest.mark.slow
def test_off_a_terminal_nothing_is_added_before_ray_starts(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_search_spec("piped", n_trials=1)))
    args = [EXE, "search", str(spec), "--store", f"sqlite:///{tmp_path / 's.db'}", "--results-dir", str(tmp_path / "r")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "checks passed" not in done.stderr and lines[0].startswith("[piped] starting: done 0/1"), lines[:3]
