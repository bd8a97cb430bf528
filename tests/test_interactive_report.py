"""The interactive report: one offline file (plotly.js inlined once, nothing fetched), hover that names the
trial, log-scaled knobs on log axes, parameter importance from Optuna's evaluators; and, in headless
Chromium, a page that loads without errors and draws one point per completed trial."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_report import OBJECTIVES, _trial, brute_force_front, fill_tiny, front_table_numbers

from benchmarks import browser
from dashboards import interactive
from dashboards.report import write_report
from harness.store import Store

SPEC = {
    "name": "tiny",
    "description": "<script>alert('x')</script> & friends",
    "params": {
        "layout": {"choice": ["CCTT", "TTTT"]},
        "depth": {"choice": [2, 4, 6, 8]},
        "embed_dim": {"choice": [64, 96, 128]},
        "lr": {"float": [1e-4, 1e-2], "log": True},
    },
}
HOSTILE = "</script><script>alert('hover')</script>"


def _hostile_note(number: int, config: dict) -> None:
    if number == 1:
        config["model"]["note"] = HOSTILE  # a free-text config value a hover label shows


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as s:
        fill_tiny(s, SPEC, _hostile_note)
        yield s


def _completed(store: Store) -> set[int]:
    frame = store.trials("tiny")
    return {int(n) for n in frame.loc[frame["status"] == "completed", "number"]}


def _scripts(html: str) -> list[str]:
    return re.findall(r"<script[^>]*>(.*?)</script>", html, re.S)


def test_the_report_is_one_offline_file_with_plotly_inlined_once(store: Store, tmp_path: Path):
    out = write_report(store, ["tiny"], OBJECTIVES, tmp_path / "report.html", png_dir=tmp_path / "png")
    html = out.read_text()
    scripts = _scripts(html)
    bundle = interactive.plotly_js()
    assert scripts.count(bundle) == 1  # plotly.js itself, once, inline
    figures = [s for s in scripts if s != bundle]
    assert figures and all("Plotly.newPlot" in s for s in figures)
    markup = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)  # the bundle's own strings are not fetched
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', markup, re.I), "external reference in the report"
    assert not re.search(r"<script[^>]+src=", html, re.I)
    assert "&lt;script&gt;alert(&#39;x&#39;)" in html  # the spec's text escaped, never markup
    assert HOSTILE not in html  # a config value never closes the page's script
    # and every user string reached plotly HTML-escaped (plotly draws a subset of HTML in labels)
    assert not any("\\u003cscript" in s for s in figures)
    for key in ("pareto", "hypervolume", "curves", "params", "importance"):
        assert f'id="s1-{key}"' in html, key
    assert "data:image/png" not in markup  # the PNGs are files for papers, not in the interactive page
    assert sorted(p.name for p in (tmp_path / "png").glob("*.png")) == [
        "tiny-curves.png", "tiny-hypervolume.png", "tiny-params.png", "tiny-pareto.png",
    ]  # fmt: skip
    assert front_table_numbers(html) == brute_force_front(store)


def test_the_scatter_has_one_point_per_completed_trial_and_hover_names_it(store: Store):
    outcomes = store.outcomes("tiny", list(OBJECTIVES), strict=False)
    frame = outcomes.merge(store.configs("tiny", outcomes["number"].tolist()), on="number", how="left")
    params = ["config.model.layout", "config.model.depth", "config.training.lr", "config.model.note"]
    fig = interactive.pareto_scatter(frame, OBJECTIVES, params, "config.model.layout")
    trials = [t for t in fig.data if t.meta == "trials"]
    numbers = [int(row[0]) for t in trials for row in t.customdata]
    assert sorted(numbers) == sorted(_completed(store))  # exactly one point per completed trial
    assert {t.name for t in trials} == {"model.layout = CCTT", "model.layout = TTTT"}
    (front,) = [t for t in fig.data if t.meta == "front"]
    assert {int(row[0]) for row in front.customdata} == brute_force_front(store)
    template = trials[0].hovertemplate
    for shown in ("trial %{customdata[0]}", "top1: %{y", "flops: %{x", "model.depth: %{customdata", "training.lr"):
        assert shown in template
    cells = {str(c) for t in trials for row in t.customdata for c in row}
    assert "&lt;/script&gt;&lt;script&gt;alert(&#x27;hover&#x27;)&lt;/script&gt;" in cells  # shown as text
    assert "1 pruned, 1 failed, 1 diverged, 1 infeasible" in fig.layout.title.text  # not drawn, but counted


def test_log_scaled_parameters_get_log_axes_and_others_do_not():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "number": range(20),
            "status": "completed",
            "top1": rng.uniform(50, 90, 20),
            "config.training.lr": rng.uniform(1e-3, 4e-3, 20),  # a 4x range: no log axis unless declared
            "config.model.depth": rng.integers(2, 9, 20),
            "config.model.layout": rng.choice(["CCTT", "CTTT"], 20),
        }
    )
    params = ["config.training.lr", "config.model.depth", "config.model.layout"]
    declared = interactive.objective_vs_params(frame, "top1", params, ["config.training.lr"])
    assert [declared.layout[f"xaxis{i}"].type for i in ("", "2", "3")] == ["log", None, "category"]
    undeclared = interactive.objective_vs_params(frame, "top1", params, [])
    assert undeclared.layout.xaxis.type is None  # plotly's linear default


def test_importance_finds_the_knob_that_moves_each_objective():
    """top1 driven by depth, flops by width; the noise knob gets little. Both evaluators, both objectives."""
    rng = np.random.default_rng(1)
    n = 60
    depth = rng.integers(1, 13, n)
    width = rng.choice([64, 128, 192, 256], n)
    noise = rng.uniform(0, 1, n)
    frame = pd.DataFrame(
        {
            "number": range(n),
            "status": "completed",
            "top1": 40 + 4 * depth + rng.normal(0, 0.5, n),
            "flops": width**2 * 1e3 * (1 + rng.normal(0, 0.01, n)),
            "config.model.depth": depth,
            "config.model.embed_dim": width,
            "config.training.noise": noise,
        }
    )
    found = interactive.param_importances(
        frame, OBJECTIVES, ["config.model.depth", "config.model.embed_dim", "config.training.noise"]
    )
    assert "PED-ANOVA" in found
    for evaluator, by_objective in found.items():
        top1, flops = by_objective["top1"], by_objective["flops"]
        assert max(top1, key=top1.get) == "model.depth", (evaluator, top1)
        assert max(flops, key=flops.get) == "model.embed_dim", (evaluator, flops)
        assert sum(top1.values()) == pytest.approx(1.0) and sum(flops.values()) == pytest.approx(1.0)


def test_no_importance_below_four_trials(store: Store, tmp_path: Path):
    with Store.open(f"sqlite:///{tmp_path / 'few.db'}") as few:
        few.create_study("few", SPEC, OBJECTIVES)
        for number in range(3):
            t = _trial(number)
            few.finish_trial("few", number, status="completed", config=t["config"],
                             measurement={"params": 1, "flops": t["flops"]}, final={"top1": t["top1"]},
                             epochs=[{"epoch": 1, "top1": t["top1"]}])  # fmt: skip
        html = write_report(few, ["few"], None, tmp_path / "few.html").read_text()
    assert 'id="s1-importance"' not in html and "No parameter importance: it needs at least 4" in html


def test_the_interactive_report_loads_in_headless_chromium(store: Store, tmp_path: Path):
    """The page loads with no script error; the scatter draws one point per completed trial (the
    trial numbers as hover data), the front its members; lr, declared log, on a log axis; a hover
    label names the trial."""
    if not browser.chromium():
        if os.environ.get("ARCHSEARCH_CI"):
            pytest.fail("headless Chromium is required in CI (make browser installs it)")
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    out = write_report(store, ["tiny"], OBJECTIVES, tmp_path / "report.html", color_by="config.model.layout")
    page = browser.probe_copy(out, tmp_path / "probe.html", hover="s1-pareto")
    summary = browser.run_page(page, tmp_path / "profile")
    assert summary["errors"] == [] and summary["plotly"]
    graphs = {g["id"]: g for g in summary["graphs"]}
    assert set(graphs) == {"s1-pareto", "s1-hypervolume", "s1-curves", "s1-params", "s1-importance"}
    assert all(g["svg"] >= 1 for g in graphs.values())  # every figure drew
    scatter = graphs["s1-pareto"]["traces"]
    drawn = [int(n) for t in scatter if t["meta"] == "trials" for n in t["numbers"]]
    assert sorted(drawn) == sorted(_completed(store))
    assert sum(t["points"] for t in scatter if t["meta"] == "trials") == len(_completed(store))
    assert [t["points"] for t in scatter if t["meta"] == "front"] == [len(brute_force_front(store))]
    params = graphs["s1-params"]
    axis_of = {re.search(r"<br>([\w.]+):", t["template"]).group(1): t["xaxis"] for t in params["traces"]}
    type_of = {name: params["axes"][axis.replace("x", "xaxis", 1)]["type"] for name, axis in axis_of.items()}
    assert type_of == {"model.layout": "category", "model.depth": "linear", "model.embed_dim": "linear",
                       "model.note": "category", "training.lr": "log"}, type_of  # fmt: skip
    assert summary["hover"] and re.search(r"trial \d+", summary["hover"]), summary.get("hover")
