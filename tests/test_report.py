"""The HTML report: self-contained, the right Pareto front, PNGs on request, and it renders in a real browser."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dashboards import figures
from dashboards.report import write_report
from harness.store import Store

OBJECTIVES = {"top1": "max", "flops": "min"}
STATUSES = ["completed"] * 8 + ["pruned", "failed", "diverged", "infeasible"]


def _trial(number: int) -> dict:
    """Deterministic trial: accuracy grows with depth/width, cost grows faster, so there is a real trade-off."""
    rng = np.random.default_rng(number)
    layout = "CCTT" if number % 2 else "TTTT"
    depth = int(rng.choice([2, 4, 6, 8]))
    width = int(rng.choice([64, 96, 128]))
    flops = float(depth * width**2 * (0.7 if layout == "CCTT" else 1.0) * 1e3)
    top1 = float(20 + 4 * depth + width / 10 + rng.normal(0, 3))
    config = {
        "model": {"layout": layout, "depth": depth, "embed_dim": width},
        "training": {"lr": float(10 ** rng.uniform(-4, -2))},
        "seed": 0,
    }
    return {"config": config, "flops": flops, "top1": top1}


def fill_tiny(s: Store, spec: dict, edit=None) -> None:
    """Study ``tiny``: the trials of STATUSES (8 completed, then pruned, failed, diverged, infeasible);
    ``edit(number, config)`` may change a trial's config before it is stored."""
    s.create_study("tiny", spec, OBJECTIVES, hardware={"gpu": "none", "cpu_count": 2})
    for number, status in enumerate(STATUSES):
        t = _trial(number)
        if edit is not None:
            edit(number, t["config"])
        has_result = status in ("completed", "pruned")
        n_epochs = 3 if status == "completed" else 1
        epochs = [{"epoch": e, "top1": t["top1"] * e / n_epochs, "train_loss": 2.5 / e} for e in range(1, n_epochs + 1)]
        s.finish_trial(
            "tiny",
            number,
            status=status,
            config=t["config"],
            measurement=None if status == "infeasible" else {"params": 1e6, "flops": t["flops"], "throughput": 10},
            epochs=epochs if has_result else (),
            final={"top1": t["top1"], "best_top1": t["top1"]} if has_result else None,
            error="boom" if status == "failed" else None,
        )


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as s:
        fill_tiny(s, {"name": "tiny", "description": "<script>alert('x')</script> & friends", "budget": {"trials": 12}})
        yield s


def brute_force_front(store: Store) -> set[int]:
    """Non-dominated completed trials, by the definition (O(n²)), independent of dashboards.pareto."""
    rows = [
        (int(r.number), float(r.top1), float(r.flops))
        for r in store.trials("tiny").itertuples()
        if r.status == "completed"
    ]
    front = set()
    for n, acc, cost in rows:
        dominated = any(a >= acc and c <= cost and (a > acc or c < cost) for m, a, c in rows if m != n)
        if not dominated:
            front.add(n)
    return front


def figure_keys(html: str, study: int = 1) -> list[str]:
    """The figures of study section ``study`` in page order (``pareto``, ``hypervolume``, ...)."""
    return re.findall(rf'<figure[^>]* id="s{study}-([a-z]+)"', html)


def front_table_numbers(html: str) -> set[int]:
    table = re.search(r'<table class="front">(.*?)</table>', html, re.S)
    assert table, "no front table"
    return {int(n) for n in re.findall(r"<tr><td>(\d+)</td>", table.group(1))}


def test_the_static_report_is_self_contained_with_the_right_front(store: Store, tmp_path: Path):
    """``static=True`` (``report --static``): no script at all, every figure a PNG in the page."""
    out = write_report(store, ["tiny"], OBJECTIVES, tmp_path / "report.html", png_dir=tmp_path / "png",
                       color_by="config.model.layout", static=True)  # fmt: skip
    html = out.read_text()

    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', html, re.I), "external reference in the report"
    assert "<script" not in html and "&lt;script&gt;" in html  # the spec's text is escaped, never markup
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 4
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)

    assert front_table_numbers(html) == brute_force_front(store)
    header = re.search(r'<table class="front">\s*<tr>(.*?)</tr>', html, re.S).group(1)
    for column in ("number", "top1", "flops", "config.model.layout", "config.model.depth", "config.training.lr"):
        assert f">{column}<" in header
    assert ">config.seed<" not in header  # constant across trials: not a searched knob
    assert "failed" in html and "infeasible" in html and "cpu_count" in html

    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == ["tiny-curves.png", "tiny-hypervolume.png", "tiny-params.png", "tiny-pareto.png"]


def test_a_report_and_its_pngs_land_together_or_not_at_all(store: Store, tmp_path: Path, monkeypatch):
    """Issue 57 (7): a failure after some figures were drawn (a file-size limit, a full disk, an error in
    the next figure) once left those PNGs behind, unmentioned. Now every file is staged and renamed only
    when all are written: a failed report leaves the previous report and PNGs as they were, no new PNG,
    no temporary file and no folder it created."""
    from dashboards import report as report_module

    out, png = tmp_path / "out" / "report.html", tmp_path / "figures" / "png"
    write_report(store, ["tiny"], OBJECTIVES, out, png_dir=png)
    before = {p.name: p.read_bytes() for p in png.iterdir()} | {"report": out.read_bytes()}
    drawn = []
    real = report_module._png

    def third_figure_fails(figure):
        drawn.append(1)
        if len(drawn) == 3:
            raise OSError(27, "File too large")
        return real(figure)

    monkeypatch.setattr(report_module, "_png", third_figure_fails)
    with pytest.raises(OSError, match="File too large"):
        write_report(store, ["tiny"], OBJECTIVES, out, png_dir=png, static=True)
    assert {p.name: p.read_bytes() for p in png.iterdir()} | {"report": out.read_bytes()} == before
    fresh, fresh_png = tmp_path / "new" / "report.html", tmp_path / "new-figures" / "deep" / "png"
    drawn.clear()
    with pytest.raises(OSError, match="File too large"):
        write_report(store, ["tiny"], OBJECTIVES, fresh, png_dir=fresh_png, static=True)
    assert not fresh.parent.exists() and not (tmp_path / "new-figures").exists()  # nothing of it left
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_pareto_scatter_shows_failures_in_a_labelled_strip(store: Store):
    fig = figures.pareto_scatter(store.trials("tiny"), OBJECTIVES, color_by="config.model.layout")
    main, strip = fig.axes[:2]
    assert main.get_xlabel() == "" and "flops (min" in strip.get_xlabel() and "top1 (max" in main.get_ylabel()
    labels = strip.get_legend_handles_labels()[1]
    assert labels == ["failed (1)", "diverged (1)", "infeasible (1)"]
    assert any(label.startswith("Pareto front") for label in main.get_legend_handles_labels()[1])


def _chromium() -> str:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome") or ""


def test_the_static_report_renders_in_headless_chromium(store: Store, tmp_path: Path):
    """What a reader sees: the rendered page (DOM after Chromium ran it) has the front table with the
    right trials, every figure decoded as an image, and a screenshot that is not blank."""
    import os

    from PIL import Image

    if not _chromium():
        if os.environ.get("ARCHSEARCH_CI"):
            pytest.fail("headless Chromium is required in CI (make browser installs it)")
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    out = write_report(
        store, ["tiny"], OBJECTIVES, tmp_path / "report.html", color_by="config.model.layout", static=True
    )
    flags = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]  # fmt: skip
    rendered = subprocess.run(
        [*flags, "--dump-dom", out.resolve().as_uri()], capture_output=True, text=True, timeout=90, check=False
    ).stdout
    assert "Pareto front" in rendered, rendered[:500]
    assert front_table_numbers(rendered) == brute_force_front(store)
    assert rendered.count("data:image/png;base64,") >= 4  # scatter, hypervolume, curves, parameters
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1400,2400", out.resolve().as_uri()],
        capture_output=True, timeout=90, check=False,
    )  # fmt: skip
    assert shot.exists(), "Chromium wrote no screenshot"
    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50, "the screenshot is blank"


def test_report_command_writes_the_file_and_rejects_bad_input(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        for number, (top1, flops) in enumerate([(50.0, 3e6), (60.0, 5e6), (40.0, 6e6)]):
            store.finish_trial(
                "s",
                number,
                status="completed",
                config={"model": {"layout": "CCTT", "depth": number}},
                measurement={"flops": flops, "params": 10},
                epochs=[{"epoch": 1, "top1": top1, "train_loss": 1.0}],
                final={"top1": top1},
            )
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "s", "-o", str(out), "--png", str(tmp_path / "png"), "--store", url])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output and out.exists() and any((tmp_path / "png").glob("*.png"))
    for args, fragment in [
        (["nope"], "study 'nope' not found"),
        (["s", "--objectives", "top1:up,flops:min"], "must be max or min"),
    ]:
        bad = CliRunner().invoke(main, ["report", *args, "-o", str(tmp_path / "x.html"), "--store", url])
        assert bad.exit_code == 2 and fragment in bad.output
        assert not (tmp_path / "x.html").exists()


def _fill(store: Store, study: str, rows: list[tuple[str, dict, float | None, float | None]]) -> None:
    store.create_study(study, {"name": study}, OBJECTIVES)
    for number, (status, config, top1, flops) in enumerate(rows):
        store.finish_trial(
            study,
            number,
            status=status,
            config=config,
            measurement={"flops": flops, "params": 10} if flops is not None else None,
            epochs=[{"epoch": 1, "top1": top1, "train_loss": 1.0}] if top1 is not None else (),
            final={"top1": top1} if top1 is not None else None,
        )


def test_report_on_mixed_type_and_missing_config_values_exits_0(tmp_path):
    """Config columns mixing text, numbers, lists, booleans and missing values; NaN objectives: a report."""
    from click.testing import CliRunner

    from harness.cli import main

    url = f"sqlite:///{tmp_path / 'mixed.db'}"
    configs = [
        {"model": {"layout": "CCTT", "width": 64, "depths": [2, 2, 3, 5]}, "flag": True},
        {"model": {"layout": None, "width": "wide", "depths": [2, 2]}, "flag": False},
        {"model": {"width": 96.5}, "extra": {"nested": 1}},
        {"model": {"layout": 3, "width": None, "depths": None}, "flag": "yes"},
        {"model": {"layout": "CTTT", "width": 128}},
        {"model": {"layout": float("nan"), "width": 32}},
    ]
    rows = [
        ("completed", configs[0], 60.0, 5e6),
        ("completed", configs[1], 65.0, 7e6),
        ("completed", configs[2], float("nan"), 3e6),  # stored as null: no top1
        ("failed", configs[3], None, None),
        ("completed", configs[4], 70.0, None),  # no cost measured
        ("completed", configs[5], 55.0, 1e6),
    ]
    with Store.open(url) as store:
        _fill(store, "mixed", rows)
    out = tmp_path / "mixed.html"
    result = CliRunner().invoke(
        main, ["report", "mixed", "-o", str(out), "--store", url, "--color-by", "config.model.layout"]
    )
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert front_table_numbers(html) == {0, 1, 5}  # 2 has no top1, 4 no flops, 3 failed
    assert figure_keys(html) == ["pareto", "hypervolume", "curves", "params", "importance"]


@pytest.mark.parametrize(
    ("rows", "front", "drawn"),
    [
        ([], set(), []),  # no trials: nothing to draw
        (
            [("failed", {"a": 1}, None, None), ("diverged", {"a": 2}, None, 5e6)],
            set(),
            ["pareto", "hypervolume", "params"],
        ),
        (
            [("completed", {"a": 1}, 50.0, 5e6)],
            {0},
            ["pareto", "hypervolume", "curves"],
        ),  # a front of one, nothing varies
    ],
    ids=["empty-study", "no-completed-trial", "one-completed-trial"],
)
def test_report_of_degenerate_studies(tmp_path, rows, front, drawn):
    with Store.open(f"sqlite:///{tmp_path / 'd.db'}") as store:
        _fill(store, "d", rows)
        html = write_report(store, ["d"], None, tmp_path / "d.html").read_text()
    if front:
        assert front_table_numbers(html) == front
    else:
        assert "no front yet" in html
    assert figure_keys(html) == drawn


def test_report_of_a_large_study_draws_a_density_caps_the_table_and_samples_the_panels(tmp_path, monkeypatch):
    from dashboards import report

    monkeypatch.setattr(report, "LARGE_STUDY", 40)
    monkeypatch.setattr(report, "PARAM_SAMPLE", 25)
    monkeypatch.setattr(report, "MAX_FRONT_ROWS", 3)
    monkeypatch.setattr(report, "MAX_CURVES", 2)
    rng = np.random.default_rng(0)
    rows = []
    for number in range(120):
        depth = int(rng.integers(2, 12))
        top1 = 40 + 4 * depth + float(rng.normal(0, 1))
        status = "completed" if number % 10 else "failed"
        rows.append((status, {"model": {"depth": depth, "layout": "CCTT"}, "seed": number}, top1, depth * 1e6))
    with Store.open(f"sqlite:///{tmp_path / 'big.db'}") as store:
        _fill(store, "big", rows)
        trials = store.trials("big")
        out = write_report(store, ["big"], OBJECTIVES, tmp_path / "big.html", png_dir=tmp_path / "png")
    html = out.read_text()
    done = trials[trials["status"] == "completed"]
    expected = {
        int(r.number)
        for r in done.itertuples()
        if not any((o.top1 >= r.top1 and o.flops <= r.flops) and (o.top1 > r.top1 or o.flops < r.flops)
                   for o in done.itertuples())
    }  # fmt: skip
    assert len(expected) > 3
    shown = front_table_numbers(html)
    assert len(shown) == 3 and shown <= expected
    best = done[done["number"].isin(expected)].sort_values("top1", ascending=False)["number"].head(3)
    assert shown == set(best)
    assert f"The front has {len(expected)} trials: the table shows the 3 best by top1." in html
    assert f"Pareto front ({len(expected)} trials)" in html
    assert "all 120 trials, each a point" in html  # interactive: every trial drawn (the PNG: a density)
    assert f"Learning curves of the 2 front members with the best top1 (of {len(expected)} on the front)" in html
    assert "a random sample of 25 of 108 completed trials, seed 0" in html
    assert (tmp_path / "png" / "big-pareto.png").exists()


def test_report_reads_as_tables_statuses_only_and_failures_counted(store: Store, tmp_path: Path):
    html = write_report(store, ["tiny"], OBJECTIVES, tmp_path / "r.html").read_text()
    assert '<table class="hardware">' in html and '<td class="text">cpu_count</td><td class="text">2</td>' in html
    counts = html[html.index('<table class="counts">') :].split("</table>")[0]
    assert "epochs" not in counts and "infeasible" in counts
    import pandas as pd

    frame = pd.DataFrame({"number": [1, 2, 3], "status": ["failed", "infeasible", "infeasible"],
                          "top1": [None, None, None], "flops": [None, 1e6, 1e6]})  # fmt: skip
    fig = figures.pareto_scatter(frame, OBJECTIVES)
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert "infeasible (2)" in labels and "failed (1)" in labels
    # two infeasible trials at the same cost are two markers, not one
    points = [c.get_offsets() for c in fig.axes[1].collections if len(c.get_offsets()) == 2]
    assert points and len({tuple(p) for p in points[0]}) == 2


def test_list_valued_parameters_get_one_panel_per_varying_stage():
    import pandas as pd

    frame = pd.DataFrame(
        {
            "status": ["completed"] * 3,
            "top1": [50.0, 60.0, 70.0],
            "config.model.depths": [[2, 2, 3, 5, 2], [2, 2, 6, 5, 2], [2, 2, 3, 14, 2]],
            "config.training.lr": [0.0025, 0.00275, 0.003],
        }
    )
    expanded, params = figures.per_stage_columns(frame, ["config.model.depths", "config.training.lr"])
    assert params == ["config.model.depths[2]", "config.model.depths[3]", "config.training.lr"]
    assert list(expanded["config.model.depths[3]"]) == [5, 5, 14]
    fig = figures.objective_vs_params(frame, "top1", ["config.model.depths", "config.training.lr"], "max")
    lr_axis = next(ax for ax in fig.axes if ax.get_xlabel() == "training.lr")
    fig.canvas.draw()
    ticks = [t.get_text() for t in lr_axis.get_xticklabels() if t.get_text()]
    assert ticks and all(len(t.replace("−", "-")) <= 8 for t in ticks), ticks


def test_the_front_table_shows_every_searched_parameter_even_one_that_never_varied(tmp_path):
    """Issue 45 item 5: a table never hides a searched parameter (the report's front table did when
    every trial happened to take one value)."""
    url = f"sqlite:///{tmp_path / 'one-value.db'}"
    spec = {"name": "one", "family": "cait", "params": {"depth": {"choice": [1, 2]}, "lr": {"float": [1e-4, 1e-2]}}}
    with Store.open(url) as store:
        store.create_study("one", spec, {"top1": "max", "flops": "min"})
        for number in range(3):
            store.finish_trial(
                "one", number, status="completed",
                config={"model": {"depth": 1, "embed_dim": 32}, "training": {"lr": 1e-3 * (number + 1)}},
                measurement={"flops": 1e6 * (number + 1), "params": 10}, final={"top1": 50.0 + number},
            )  # fmt: skip
        store.set_study_status("one", "completed")
        write_report(store, ["one"], {"top1": "max", "flops": "min"}, tmp_path / "r.html", static=True)
    html = (tmp_path / "r.html").read_text()
    table = html[html.index("<table", html.index("Pareto front")) :]
    header = table[: table.index("</tr>")]
    assert "depth" in header and "lr" in header and "embed_dim" not in header
