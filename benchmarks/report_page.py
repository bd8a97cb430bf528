"""The report page at 100 and 100,000 trials: file size and time of the interactive page beside the static
one, and whether the page loads in headless Chromium (no script error, one point per completed trial).

Each size fills a SQLite study with ``benchmarks.store.populate`` (two objectives, 85% completed,
the rest pruned, failed or diverged; CaiT and CoAtNet configs with depth, width, layout and a
log-uniform lr), then writes ``archsearch report`` both ways in this process and loads the
interactive one in Chromium through :mod:`benchmarks.browser`.

    .venv/bin/python -m benchmarks.report_page [--sizes 100,100000] [--screenshots docs/screenshots]

``--screenshots DIR`` also writes the screenshots the README shows: the scatter of a 100-trial
study with the hover label of a front member, and its parameter panels and importance.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import browser
from benchmarks import store as STORE_BENCH
from benchmarks.hostinfo import cpu_model, load_average
from dashboards.report import write_report
from harness.output import render_table
from harness.store import Store
from harness.store.schema import Study

OBJECTIVES = {"top1": "max", "flops": "min"}
# What the populated configs search, as a spec says it: lr log-uniform (drawn on a log axis).
SPEC = {
    "name": "page",
    "params": {
        "depth": {"int": [4, 24]},
        "embed_dim": {"choice": [192, 256, 384, 512, 768]},
        "layout": {"choice": ["CCCC", "CCCT", "CCTT", "CTTT"]},
        "lr": {"float": [1e-4, 3.2e-3], "log": True},
    },
}


def _fill(url: str, study: str, n: int) -> None:
    STORE_BENCH.populate(url, study, n)
    # the populated study's spec, replaced by one that names its params (as a real study's does)
    with Store.open(url) as store, store.engine.begin() as conn:
        conn.execute(Study.__table__.update().where(Study.name == study).values(spec=SPEC))


def measure(n: int, workdir: Path, screenshots: Path | None) -> dict[str, Any]:
    url = f"sqlite:///{workdir / f'page-{n}.db'}"
    study = f"page{n}"
    _fill(url, study, n)
    row: dict[str, Any] = {"trials": n}
    with Store.open(url) as store:
        completed = int(store.study_counts(study).by_status.get("completed", 0))
        row["completed"] = completed
        for static in (False, True):
            out = workdir / f"{study}-{'static' if static else 'interactive'}.html"
            started = time.perf_counter()
            write_report(store, [study], OBJECTIVES, out, color_by="config.model.family", static=static)
            kind = "static" if static else "interactive"
            row[f"{kind} s"] = time.perf_counter() - started
            row[f"{kind} MiB"] = out.stat().st_size / 2**20
    if browser.chromium():
        page = browser.probe_copy(workdir / f"{study}-interactive.html", workdir / f"{study}-probe.html", "s1-pareto")
        started = time.perf_counter()
        summary = browser.run_page(page, workdir / "profile")
        row["chromium s"] = time.perf_counter() - started
        scatter = next(g for g in summary["graphs"] if g["id"] == "s1-pareto")
        drawn = sum(t["points"] for t in scatter["traces"] if t["meta"] == "trials")
        row["points drawn"] = drawn
        row["page errors"] = len(summary["errors"])
        row["check"] = "ok" if drawn == completed and not summary["errors"] else "MISMATCH"
        if screenshots is not None and n <= 1000:
            _screenshots(workdir / f"{study}-interactive.html", workdir, screenshots)
    return row


def _screenshots(report: Path, workdir: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    shots = [
        ("report-scatter-hover.png", "s1-pareto", "1300,640"),
        ("report-parameters.png", "s1-params", "1300,720"),
        ("report-importance.png", "s1-importance", "1300,560"),
    ]
    for name, figure, size in shots:
        hover = figure if figure == "s1-pareto" else None
        page = browser.probe_copy(report, workdir / f"shot-{figure}.html", hover=hover, point=1, only=figure)
        browser.run_page(page, workdir / "profile", screenshot=into / name, size=size)
        print(f"wrote {into / name}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,100000", help="comma-separated trial counts")
    parser.add_argument("--screenshots", default=None, help="write the README's screenshots here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# report page: {cpu_model()}, load {load_average()}")
    if not browser.chromium():
        print("# Chromium not installed (make browser): sizes and times only")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(n, Path(tmp), Path(args.screenshots) if args.screenshots else None) for n in sizes]
    columns = ["trials", "completed", "interactive MiB", "static MiB", "interactive s", "static s",
               "chromium s", "points drawn", "page errors", "check"]  # fmt: skip
    table = [
        {c: (f"{r[c]:.2f}" if isinstance(r.get(c), float) else r.get(c, "")) for c in columns} for r in rows
    ]
    print(render_table(table, columns))


if __name__ == "__main__":
    main()
