"""Compile time of a first and a repeated architecture on the CPU, through a trial's own record.

Each round, in fresh processes (as Ray workers are), with one fresh node cache directory and one
fresh shared artifacts directory (``training.compile_artifacts_dir``) per round:

1. ``first``: architecture A with the cache empty: Inductor generates and builds every kernel, and
   the trial saves the architecture's compile artifacts to the shared directory.
2. ``repeated``: A again, same node cache: its FX graphs and AOTAutograd entries are loaded.
3. ``other node``: A again on "another node": an empty node cache of its own, the shared
   artifacts loaded before compiling (compile once per architecture per cluster).
4. ``other``: architecture B, first node's (now warm) cache: what a new architecture costs on a
   node that has compiled before.

Every run is one compiled (``inductor``) trial, ``run_trial`` on a small synthetic dataset with
``cpus`` as Ray would assign them; the numbers are the trial's own runtime facts: ``compile_s``
(the first training step, forward and backward compiled), ``eval_compile_s`` (the evaluation
graph), ``compile_total_s`` (every compile, from Dynamo's compile callbacks) and both caches' hits
and misses. On these shared 2-core machines timings vary by about +-25% between processes: the
rounds interleave the three runs and the table quotes medians and the median per-round ratio.

    .venv/bin/python -m benchmarks.compile_cache [--rounds 3] [--tiny | --depth12] [--json FILE]

``--tiny``: one-block CaiTs, one round, no ``other`` run: the cache mechanism in about a minute (tests).
``--depth12``: a depth-12 CaiT (issue 47's measurement of cold vs warm from artifacts), no ``other``
run; its results go to ``benchmarks/results/compile_artifacts.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.hostinfo import cpu_model, load_average
from dashboards.files import atomic_write
from harness.output import render_table
from trials.runner import run_trial

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = {
    "full": ROOT / "benchmarks" / "results" / "compile_cache.json",
    "tiny": ROOT / "benchmarks" / "results" / "compile_cache.json",
    "depth12": ROOT / "benchmarks" / "results" / "compile_artifacts.json",
}
TINY_CAIT = {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1}
ARCHITECTURES = {  # (A, B) per mode
    "full": ({"preset": "cait_tiny32"}, {"preset": "coatnet_tiny32"}),
    "tiny": (TINY_CAIT, {**TINY_CAIT, "depth": 2}),
    "depth12": ({"preset": "cait_tiny32", "depth": 12}, {"preset": "coatnet_tiny32"}),
}
FACTS = (
    "compile_s",
    "eval_compile_s",
    "compile_total_s",
    "fxgraph_cache_hits",
    "fxgraph_cache_misses",
    "autograd_cache_hits",
    "autograd_cache_misses",
    "compile_threads",
    "compiled_graphs",
    "recompiles",
    "compile_artifacts_loaded",
    "compile_artifacts_load_s",
    "compile_artifacts_saved",
    "compile_artifacts_bytes",
)


def trial_config(model: dict[str, Any], cpus: int, shared: Path) -> dict[str, Any]:
    """One short compiled trial: four training steps and two evaluation batches of 32x32 images,
    its compile artifacts shared through ``shared``."""
    training = {"epochs": 1, "compile": True, "compile_backend": "inductor", "warmup_epochs": 0}
    return {
        "model": model,
        "data": {"name": "synthetic", "num_classes": 10, "train_size": 128, "val_size": 64, "batch_size": 32},
        "training": {**training, "compile_artifacts_dir": str(shared)},
        "measure": {"flops": False, "throughput": False, "latency": False},
        "device": "cpu",
        "cpus": cpus,
        "seed": 0,
    }


def child(config: dict[str, Any]) -> dict[str, Any]:
    """In the fresh process: run the trial and return its compile facts (and the process's wall time)."""
    result = run_trial(config, progress=False)
    if result.status != "completed":
        raise SystemExit(f"trial {result.status}: {result.error}")
    facts = {**result.runtime, **result.final}
    return {name: facts.get(name) for name in FACTS} | {"trial_s": result.wall_time_s}


def run_child(model: dict[str, Any], cache: Path, cpus: int, shared: Path) -> dict[str, Any]:
    """One fresh Python process compiling ``model`` with ``cache`` as the node's compile cache."""
    env = {**os.environ, "ARCHSEARCH_COMPILE_CACHE": str(cache)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.compile_cache", "--child", json.dumps(trial_config(model, cpus, shared))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the compile child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"process_s": time.perf_counter() - started}


def run_round(mode: str, cpus: int, with_other: bool) -> dict[str, dict[str, Any]]:
    """first, repeated, other node (and other) in fresh processes: first, repeated and other share
    one node cache, other node has its own; all share one artifacts directory."""
    first, other = ARCHITECTURES[mode]
    with tempfile.TemporaryDirectory(prefix="archsearch-compile-bench-") as directory:
        root = Path(directory)
        node, shared = root / "node-a", root / "shared"
        runs = {"first": run_child(first, node, cpus, shared), "repeated": run_child(first, node, cpus, shared)}
        runs["other node"] = run_child(first, root / "node-b", cpus, shared)
        if with_other:
            runs["other"] = run_child(other, node, cpus, shared)
    return runs


def summary_rows(rounds: list[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per run kind: medians over rounds, and the median per-round ratio of first to it."""
    rows = []
    for kind in rounds[0]:
        runs = [r[kind] for r in rounds]
        ratios = [r["first"]["compile_total_s"] / r[kind]["compile_total_s"] for r in rounds]
        rows.append(
            {
                "run": kind,
                "compile_total_s": _median(runs, "compile_total_s"),
                "train_compile_s": _median(runs, "compile_s"),
                "eval_compile_s": _median(runs, "eval_compile_s"),
                "process_s": _median(runs, "process_s"),
                "first_x": round(statistics.median(ratios), 2),
                "ratio_range": f"{min(ratios):.2f}-{max(ratios):.2f}",
                "fx_hit/miss": f"{runs[-1]['fxgraph_cache_hits']:.0f}/{runs[-1]['fxgraph_cache_misses']:.0f}",
                "aot_hit/miss": f"{runs[-1]['autograd_cache_hits']:.0f}/{runs[-1]['autograd_cache_misses']:.0f}",
                "artifacts": _artifacts(runs[-1]),
            }
        )
    return rows


def _artifacts(run: dict[str, Any]) -> str:
    """What the run did with the shared artifacts: loaded, saved (with the size), or neither."""
    if run.get("compile_artifacts_loaded"):
        return f"loaded in {float(run.get('compile_artifacts_load_s') or 0):.2f} s"
    if run.get("compile_artifacts_saved"):
        return f"saved {float(run['compile_artifacts_bytes']) / 2**20:.1f} MB"
    return "-"


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(float(r[key]) for r in runs), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; 1 with --tiny)")
    parser.add_argument("--cpus", type=int, default=2, help="the trial's CPUs (Inductor's compile threads)")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--tiny", action="store_true", help="one-block CaiTs, one round, no other architecture")
    sizes.add_argument("--depth12", action="store_true", help="a depth-12 CaiT, no other architecture")
    parser.add_argument("--json", dest="json_out", default=None, help="where the results go")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # a trial config, in the fresh process
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    mode = "tiny" if args.tiny else "depth12" if args.depth12 else "full"
    rounds_n = args.rounds or (1 if args.tiny else 3)
    json_out = args.json_out or str(DEFAULT_JSON[mode])
    print(
        f"{cpu_model()}, {os.cpu_count()} cpus, load {load_average()}; torch {torch.__version__}; "
        f"{mode}: A={ARCHITECTURES[mode][0]}, B={ARCHITECTURES[mode][1]}; {rounds_n} round(s), cpus={args.cpus}",
        flush=True,
    )
    rounds = []
    for index in range(rounds_n):
        rounds.append(run_round(mode, args.cpus, with_other=mode == "full"))
        print(f"round {index + 1}: " + ", ".join(f"{k} {v['compile_total_s']:.1f} s" for k, v in rounds[-1].items()))
    rows = summary_rows(rounds)
    print(render_table(rows))
    print(
        "compile_total_s: every compile of the trial (Dynamo's compile callbacks); train_compile_s: the first "
        "training step with its compile; eval_compile_s: the evaluation graph; process_s: the child process, "
        "start to exit; first_x: first's compile_total_s / this run's, median of per-round ratios; hit/miss: "
        "the FX-graph and AOTAutograd caches, last round; artifacts: the shared compile artifacts, last round; "
        "medians over rounds",
        flush=True,
    )
    report = {
        "mode": mode,
        "cpus": args.cpus,
        "architectures": ARCHITECTURES[mode],
        "host": {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_at_end": load_average()},
        "torch": torch.__version__,
        "rows": rows,
        "rounds": rounds,
    }
    atomic_write(json_out, json.dumps(report, indent=2, default=str))
    print(f"wrote {json_out}")


if __name__ == "__main__":
    main()
