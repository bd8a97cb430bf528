"""Compile once per architecture per node (trials.compilation.compile_cache): compile threads from the trial's
CPUs, the node-local FX-graph and AOTAutograd caches (hit in a second process, by counters, never
by a clock), the evaluation graph's compile time recorded, and the ``compile: auto`` budget rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch._inductor.config as inductor_config
from test_gpu_training import tiny  # the same tiny CaiT trial as the GPU training tests

from trials.compilation import compile_cache
from trials.compilation.compile_cache import CompileLedger, CompileRecord, compile_pays, compile_threads, decide_auto
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.runner import run_trial

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def node_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh node cache for this test; the environment and Inductor's thread count restored after it.

    (Not ``monkeypatch.setattr`` for the thread count: torch's config module hides an option it is
    asked to delete, and monkeypatch's undo can delete.)"""
    directory = tmp_path / "node-cache"
    monkeypatch.setenv(compile_cache.CACHE_ENV, str(directory))
    monkeypatch.setenv(compile_cache.TORCH_CACHE_ENV, str(tmp_path / "before"))  # restored after the test
    threads = inductor_config.compile_threads
    yield directory
    inductor_config.compile_threads = threads


def test_compile_threads_follow_the_trials_cpus():
    assert compile_threads(0.25) == 1  # a packed quarter-CPU trial compiles in its own process
    assert compile_threads(1) == 1
    assert compile_threads(3.9) == 3
    assert compile_threads(100) == 32  # Inductor's ceiling
    assert compile_threads(None) == min(32, len(os.sched_getaffinity(0)))


def test_configure_compiler_sets_threads_and_the_node_cache_for_inductor(node_cache: Path):
    facts = compile_cache.configure_compiler(cpus=1)
    assert inductor_config.compile_threads == 1
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(node_cache) == facts["compile_cache_dir"]
    assert node_cache.is_dir() and facts["fx_graph_cache"] and facts["autograd_cache"]


def test_the_default_cache_is_refused_when_others_can_write_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Inductor loads what it finds in the cache as code: a directory others can write is not used."""
    monkeypatch.delenv(compile_cache.CACHE_ENV, raising=False)
    monkeypatch.delenv(compile_cache.TORCH_CACHE_ENV, raising=False)
    monkeypatch.setattr(compile_cache.tempfile, "tempdir", str(tmp_path))
    assert compile_cache.cache_dir() == tmp_path / f"archsearch-inductor-{os.getuid()}"
    shared = compile_cache.default_cache_dir()
    shared.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert compile_cache.cache_dir() != shared


def test_compile_pays_while_it_stays_within_the_budget_share():
    # 100 steps of 0.2 s = 20 s of training; a quarter of it is 5 s
    assert compile_pays(compile_s=5.0, step_s=0.2, steps=100, share=0.25)
    assert not compile_pays(compile_s=5.1, step_s=0.2, steps=100, share=0.25)
    assert compile_pays(compile_s=5.1, step_s=0.2, steps=1000, share=0.25)  # a longer trial repays it


def test_auto_compiles_on_cuda_until_a_warm_compile_is_measured_over_budget():
    warm, cold = CompileRecord(60.0, 0.05, cold=False), CompileRecord(300.0, 0.05, cold=True)
    on_cpu = decide_auto("cpu", {"warm": warm}, steps=10, share=0.25)
    assert not on_cpu.compile and on_cpu.estimate_s is None  # CPU: eager, whatever was measured
    assert decide_auto("cuda", {}, steps=10, share=0.25).compile  # never measured here
    assert decide_auto("cuda", {"cold": cold}, steps=10, share=0.25).compile  # measure it once with the cache full
    long_trial = decide_auto("cuda", {"cold": cold, "warm": warm}, steps=10_000, share=0.25)  # 60 s <= 125 s
    assert long_trial.compile and long_trial.budget_s == pytest.approx(125.0)
    short = decide_auto("cuda", {"warm": warm}, steps=1000, share=0.25)  # 60 s > 12.5 s
    assert not short.compile and short.facts() == {
        "compile_auto_skipped": 1.0,
        "compile_estimate_s": 60.0,
        "compile_budget_s": pytest.approx(12.5),
    }
    assert "skipped compiling" in short.reason and "60.0 s" in short.reason and "1000 steps" in short.reason


def test_the_ledger_keeps_the_latest_cold_and_warm_record_per_architecture(tmp_path: Path):
    ledger = CompileLedger(tmp_path)
    assert ledger.read("abc") == {}
    ledger.write("abc", CompileRecord(90.0, 0.1, cold=True))
    ledger.write("abc", CompileRecord(8.0, 0.1, cold=False))
    ledger.write("abc", CompileRecord(7.0, 0.1, cold=False))
    assert ledger.read("abc") == {"cold": CompileRecord(90.0, 0.1, True), "warm": CompileRecord(7.0, 0.1, False)}
    (tmp_path / compile_cache.LEDGER_DIR / "bad.json").write_text("{not json")
    assert ledger.read("bad") == {} and ledger.read("other") == {}


def test_compile_budget_share_is_validated():
    assert load_trial_config(tiny({"compile_budget_share": 0.5})).training.compile_budget_share == 0.5
    with pytest.raises(ConfigError, match=r"training\.compile_budget_share: must be a number in \(0, 1\]"):
        load_trial_config(tiny({"compile_budget_share": 0}))


def test_a_compiled_trial_records_its_compile_facts_and_eval_compiles_once(node_cache: Path):
    """Two epochs: the evaluation graph is compiled at the first evaluation only (the training graph
    stays cached beside it), its time is recorded, and threads follow the trial's CPUs."""
    result = run_trial(tiny({"compile": True, "compile_backend": "eager", "epochs": 2}, cpus=1))
    assert result.status == "completed", result.error
    facts = result.runtime
    assert facts["compile_threads"] == 1 and facts["compile_cache_dir"] == str(node_cache)
    # regional (the default): the self- and class-attention blocks, each for training and evaluation;
    # no recompile in epoch 2
    assert result.final["compiled_graphs"] == 4 and result.final["recompiles"] == 0
    assert facts["eval_compile_s"] > 0 and facts["compile_total_s"] >= facts["eval_compile_s"]
    assert "compile_auto_skipped" not in facts  # compile: true is not auto
    assert len(list((node_cache / compile_cache.LEDGER_DIR).glob("*.json"))) == 1


def test_auto_compiles_a_new_architecture_then_skips_it_when_its_measured_compile_exceeds_the_budget(
    node_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    """The rule as trials meet it, on the CPU (``auto`` allowed there for the test): the first ``auto``
    trial of an architecture compiles (nothing measured here yet) and leaves its measurement in the
    node's ledger; a later one whose budget is too short for that compile runs eagerly and says so."""
    monkeypatch.setattr(compile_cache, "AUTO_DEVICE_TYPES", ("cuda", "cpu"))
    first = run_trial(tiny({"compile": "auto", "compile_backend": "eager", "epochs": 1}, cpus=1))
    assert first.status == "completed" and first.final["compiled"] == 1.0, first.error
    assert first.final["compile_auto_skipped"] == 0.0 and not first.notes
    skipped = run_trial(tiny({"compile": "auto", "compile_backend": "eager", "compile_budget_share": 0.01}, cpus=1))
    assert skipped.status == "completed", skipped.error
    assert skipped.final["compiled"] == 0.0 and skipped.final["compile_auto_skipped"] == 1.0
    assert skipped.final["compile_estimate_s"] > skipped.final["compile_budget_s"] > 0
    assert any("auto skipped compiling" in note for note in skipped.notes)


@pytest.mark.slow
def test_a_repeated_architecture_hits_both_caches_in_a_fresh_process(tmp_path: Path):
    """The benchmark's tiny mode: two fresh processes compile the same CaiT with one cache directory.
    The second loads every graph (FX-graph and AOTAutograd cache hits, no misses): proved by torch's
    counters as the trial records them, not by its clock."""
    out = tmp_path / "compile_cache.json"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.compile_cache", "--tiny", "--json", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=1800,  # three fresh processes, two of them compiling from scratch (C++ kernels on a CPU)
    )
    report = json.loads(out.read_text())
    (runs,) = report["rounds"]
    first, repeated = runs["first"], runs["repeated"]
    assert first["fxgraph_cache_misses"] > 0 and first["fxgraph_cache_hits"] == 0
    assert repeated["fxgraph_cache_misses"] == 0 and repeated["fxgraph_cache_hits"] == first["fxgraph_cache_misses"]
    assert repeated["autograd_cache_misses"] == 0 and repeated["autograd_cache_hits"] > 0
    assert first["eval_compile_s"] > 0 and repeated["compiled_graphs"] == first["compiled_graphs"] == 4
    # Another node (an empty node cache of its own) loads the artifacts the first trial shared: every FX
    # graph hits (issue 47: compile once per architecture per cluster).
    other_node = runs["other node"]
    assert first["compile_artifacts_saved"] == 1.0 and other_node["compile_artifacts_loaded"] == 1.0
    assert other_node["fxgraph_cache_misses"] == 0 and other_node["fxgraph_cache_hits"] == first["fxgraph_cache_misses"]
    assert [row["run"] for row in report["rows"]] == ["first", "repeated", "other node"]
