"""Compile once per architecture per cluster (issue 47, deliverable 2): trials.compilation.compile_artifacts.

* A directory that is not this user's alone is refused (artifacts are loaded as code), in a note.
* Artifacts saved by one process load into another whose node cache is empty and its compile hits
  the FX-graph cache (a one-op function here; a whole trial on "another node" in
  ``tests/test_compile_cache.py::test_a_repeated_architecture_hits_both_caches_in_a_fresh_process``,
  the benchmark's tiny mode, which runs it once for both).
* A damaged file compiles as if absent, with a warning; a file already there is not replaced unless
  asked; what is written appears whole or not at all.
* ``training.compile_artifacts_dir`` must be absolute (workers run elsewhere).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_gpu_training import tiny

from trials import atomic
from trials.compilation import compile_artifacts
from trials.compilation.compile_artifacts import SharedArtifacts
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.runner import run_trial

ROOT = Path(__file__).resolve().parents[1]


def test_a_directory_others_can_write_is_refused(tmp_path: Path):
    shared = tmp_path / "shared"
    assert SharedArtifacts(shared).usable() is None and shared.is_dir()
    shared.chmod(0o777)
    assert "writable by other users" in SharedArtifacts(shared).usable()


def test_a_trial_given_a_directory_others_can_write_says_so_and_shares_nothing(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="compile_artifacts_dir not used"):
        result = run_trial(tiny({"compile": True, "compile_backend": "eager", "compile_artifacts_dir": str(shared)}))
    assert result.status == "completed", result.error
    assert any("writable by other users" in note for note in result.notes)
    assert list(shared.iterdir()) == []


def test_a_damaged_file_is_warned_about_and_compiles_as_if_absent(tmp_path: Path):
    artifacts = SharedArtifacts(tmp_path)
    artifacts.path("k").write_bytes(b"not a cache artifact")
    with pytest.warns(RuntimeWarning, match="not loaded"):
        assert artifacts.load("k") == {"compile_artifacts_loaded": 0.0}
    assert artifacts.load("absent") == {"compile_artifacts_loaded": 0.0}


def test_an_existing_file_is_kept_unless_replacing_and_nothing_half_written_remains(tmp_path: Path, monkeypatch):
    artifacts = SharedArtifacts(tmp_path)
    monkeypatch.setattr(compile_artifacts.torch.compiler, "save_cache_artifacts", lambda: (b"new", None))
    artifacts.path("k").write_bytes(b"old")
    assert artifacts.save("k", replace=False) == {"compile_artifacts_saved": 0.0}
    assert artifacts.path("k").read_bytes() == b"old"
    assert artifacts.save("k", replace=True) == {"compile_artifacts_saved": 1.0, "compile_artifacts_bytes": 3.0}
    assert artifacts.path("k").read_bytes() == b"new"
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.warns(RuntimeWarning, match="not saved"):
        assert artifacts.save("j", replace=False) == {"compile_artifacts_saved": 0.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.artifacts"]  # no temporary left behind


def test_nothing_compiled_nothing_saved(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(compile_artifacts.torch.compiler, "save_cache_artifacts", lambda: None)
    assert SharedArtifacts(tmp_path).save("k", replace=False) == {"compile_artifacts_saved": 0.0}


def test_the_directory_must_be_absolute():
    with pytest.raises(ConfigError, match=r"training\.compile_artifacts_dir: must be an absolute path"):
        load_trial_config(tiny({"compile_artifacts_dir": "relative/dir"}))
    assert load_trial_config(tiny({"compile_artifacts_dir": "/shared/x"})).training.compile_artifacts_dir == "/shared/x"


def test_artifacts_round_trip_between_processes(tmp_path: Path):
    """A compiled function's artifacts saved here load in a fresh process with its own empty cache
    and its compile hits the FX-graph cache there (Inductor, a one-op function: seconds)."""
    script = """
import json, os, sys, torch
from torch._dynamo.utils import counters
from trials.compilation.compile_artifacts import SharedArtifacts
from trials.compilation.compile_cache import configure_compiler
configure_compiler(1)  # as a compiling trial sets up Inductor: its caches on, one compile thread
mode, directory = sys.argv[1:3]
shared = SharedArtifacts(directory)
assert shared.usable() is None  # creates it, ours alone
facts = shared.load("f") if mode == "load" else {}
fn = torch.compile(lambda x: (x.sin() * 2).sum(), backend="inductor", dynamic=False)
fn(torch.ones(8))
if mode == "save":
    facts = shared.save("f", replace=False)
print(json.dumps({**facts, **counters["inductor"]}))
"""
    runs = {}
    for mode in ("save", "load"):
        env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"node-{mode}"), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            [sys.executable, "-c", script, mode, str(tmp_path / "shared")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    assert runs["save"]["compile_artifacts_saved"] == 1.0 and runs["save"]["fxgraph_cache_miss"] >= 1
    assert runs["load"]["compile_artifacts_loaded"] == 1.0
    assert runs["load"]["fxgraph_cache_hit"] >= 1 and runs["load"].get("fxgraph_cache_miss", 0) == 0


def test_the_readme_table_is_the_committed_measurement():
    """The README's cold / same node / other node rows are benchmarks/results/compile_artifacts.json's,
    a depth-12 CaiT, and the other node loaded the artifacts and missed no FX graph."""
    report = json.loads((ROOT / "benchmarks" / "results" / "compile_artifacts.json").read_text())
    assert report["mode"] == "depth12" and report["architectures"][0]["depth"] == 12
    rows = {row["run"]: row for row in report["rows"]}
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Compile once per architecture, per cluster") :]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:4]
    for line, run in zip(lines, ("first", "repeated", "other node"), strict=True):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[1:] == [f"{rows[run]['compile_total_s']:.1f}", rows[run]["fx_hit/miss"], rows[run]["artifacts"]]
    other = report["rounds"][0]["other node"]
    assert other["compile_artifacts_loaded"] == 1.0 and other["fxgraph_cache_misses"] == 0
    cold, elsewhere = rows["first"]["compile_total_s"], rows["other node"]["compile_total_s"]
    assert 0.25 < 1 - elsewhere / cold < 0.45  # "saves only a third of the cold compile"
