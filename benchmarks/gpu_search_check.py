"""Does the default GPU path work? Four trials of a default GPU search, before any speed is measured.

A lent GPU machine's first minutes should answer "does a default search train on it", not "how fast":
issue 56 found every compiled trial failing at its FLOP count, so a default GPU search trained nothing
while every speed benchmark ran. This runs the four trials a default search would run on one GPU:
``compile: auto`` (which compiles on CUDA), each trial packed on a quarter of the GPU
(``gpu_memory_fraction: 0.25``, what ``search.resources.gpus: 0.25`` gives a trial), FLOPs, throughput
and latency measured, all four at once as four processes. Where Ray and Optuna are installed it runs
them as a real search (``archsearch search``, a SQLite store in the output directory); a bare GPU node
(torch alone) runs the same trial configs through ``trials.runner.run_trial``, which is what a Ray
worker runs. FLOPs need fvcore; without it they are checked against the closed-form cost model only.

One row per trial: status, whether it compiled and timed the compiled forward, its FLOPs against the
cost model, throughput, latency, seconds. It exits non-zero if any trial did not complete.

    python -m benchmarks.gpu_search_check --json gpu-check/search.json             # on the GPU machine
    python -m benchmarks.gpu_search_check --device cpu --compile true --no-ray ... # the CPU stand-in
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

from search_space.cost_model import estimate_cost
from trials.models import resolve_config

# Four CaiT trials of a small search space at 32 px (the CIFAR-sized default of a packed GPU search).
DEPTHS = (2, 4, 6, 8)
SHARE = 0.25


def trial_config(depth: int, args: argparse.Namespace) -> dict[str, Any]:
    """One trial as a packed default GPU search dispatches it (``search.resources.gpus: 0.25``)."""
    return {
        "model": {"preset": "cait_tiny32", "depth": depth, "embed_dim": args.width, "num_heads": 4, "ca_depth": 1},
        "data": {
            "name": "synthetic",
            "num_classes": 10,
            "train_size": args.train_size,
            "val_size": 256,
            "batch_size": 64,
        },
        "training": {"epochs": args.epochs, "lr": 2e-3, "compile": json.loads(args.compile)},
        "measure": {"batch_size": 64, "repeats": 3},
        "device": args.device,
        "gpu_memory_fraction": SHARE if args.device != "cpu" else None,
        "cpus": 1,
        "seed": depth,
    }


def _run_one(config: dict[str, Any]) -> dict[str, Any]:
    from trials.runner import run_trial

    started = time.perf_counter()
    result = run_trial(config, progress=False)
    cost = result.cost
    return {
        "depth": config["model"]["depth"],
        "status": str(result.status),
        "error": (result.error or "").splitlines()[0] if result.error else None,
        "compiled": result.final.get("compiled"),
        "measured_compiled": cost.compiled if cost else None,
        "flops": cost.flops if cost else None,
        "flops_cost_model": estimate_cost(resolve_config(result.config["model"])).flops,
        "throughput": cost.throughput if cost else None,
        "latency_ms": cost.latency_ms if cost else None,
        "top1": result.final.get("top1"),
        "seconds": time.perf_counter() - started,
    }


def run_packed(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The four trials at once, each its own process (as Ray runs packed trials), spawned fresh."""
    configs = [trial_config(depth, args) for depth in DEPTHS]
    with multiprocessing.get_context("spawn").Pool(len(configs)) as pool:
        return pool.map(_run_one, configs)


def run_search(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """The same four trials as a real search: Optuna's grid over the depths, Ray dispatching them packed."""
    from harness import run_search as launch
    from harness.store import Store

    base = trial_config(DEPTHS[0], args)
    spec = {
        "name": "gpu-check",
        "family": "cait",
        "base_model": base["model"],
        "data": base["data"],
        "training": base["training"],
        "measure": base["measure"],
        "params": {"depth": {"choice": list(DEPTHS)}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {
            "sampler": "grid",
            "n_trials": len(DEPTHS),
            "concurrency": len(DEPTHS),
            "resources": {"cpus": 1, "gpus": SHARE if args.device != "cpu" else 0},
        },
    }
    url = f"sqlite:///{(out / 'gpu-check.db').resolve()}"
    launch(spec, store=url, results_dir=out / "ray_results")
    with Store.open(url, create=False) as store:
        trials = store.trials("gpu-check", flatten_config=False)
    rows = []
    for _, trial in trials.iterrows():
        model = trial["config"]["model"]
        rows.append({
            "depth": model["depth"], "status": trial["status"], "error": trial.get("error"),
            "compiled": trial.get("compiled"), "measured_compiled": trial.get("measured_compiled"),
            "flops": trial.get("flops"), "flops_cost_model": estimate_cost(resolve_config(model)).flops,
            "throughput": trial.get("throughput"), "latency_ms": trial.get("latency_ms"), "top1": trial.get("top1"),
            "seconds": trial.get("duration_s"),
        })  # fmt: skip
    return rows


def problems(rows: list[dict[str, Any]], expect_compiled: bool) -> list[str]:
    """What is wrong with the rows: a trial that did not complete, did not compile where a default GPU
    trial compiles, or whose FLOPs differ from the cost model's."""
    found = []
    if len(rows) != len(DEPTHS):
        found.append(f"{len(rows)} trials recorded, not {len(DEPTHS)}")
    for row in rows:
        where = f"depth {row['depth']}"
        if row["status"] != "completed":
            found.append(f"{where}: {row['status']}: {row['error']}")
            continue
        if expect_compiled and not (row["compiled"] and row["measured_compiled"]):
            found.append(f"{where}: did not train and measure compiled")
        if row["flops"] is not None and row["flops"] != row["flops_cost_model"]:
            found.append(f"{where}: FLOPs {row['flops']} != the cost model's {row['flops_cost_model']}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("gpu-check/search.json"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--compile", default='"auto"', help='training.compile as JSON: "auto", true or false')
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--no-ray", action="store_true", help="run the trials without Ray even where it is installed")
    args = parser.parse_args(argv)
    out = args.json.parent
    out.mkdir(parents=True, exist_ok=True)
    with_ray = not args.no_ray and all(importlib.util.find_spec(m) for m in ("ray", "optuna", "sqlalchemy"))
    rows = run_search(args, out) if with_ray else run_packed(args)
    expect_compiled = json.loads(args.compile) is True or (json.loads(args.compile) == "auto" and args.device != "cpu")
    found = problems(rows, expect_compiled)
    print(f"{'depth':>5}  {'status':<10} {'compiled':>8} {'GFLOPs':>9} {'model':>9} {'img/s':>9} {'ms':>7} {'s':>6}")
    for row in rows:
        flops = "-" if row["flops"] is None else f"{row['flops'] / 1e9:.4f}"
        rate = "-" if row["throughput"] is None else f"{row['throughput']:.0f}"
        latency = "-" if row["latency_ms"] is None else f"{row['latency_ms']:.2f}"
        print(f"{row['depth']:>5}  {row['status']:<10} {row['compiled']!s:>8} {flops:>9} "
              f"{row['flops_cost_model'] / 1e9:>9.4f} {rate:>9} {latency:>7} {row['seconds'] or 0:>6.0f}")  # fmt: skip
    payload = {"via": "archsearch search" if with_ray else "run_trial, packed processes", "rows": rows,
               "problems": found, "python": sys.version.split()[0], "pid": os.getpid()}  # fmt: skip
    temporary = args.json.with_name(args.json.name + ".tmp")
    temporary.write_text(json.dumps(payload, indent=2, default=str))
    temporary.replace(args.json)
    for problem in found:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
