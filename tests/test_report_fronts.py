"""The report's Pareto scatters tell the truth about the front: the step line turns at corners the front
dominates, whatever the objectives' directions; with 3 objectives the scatter marks the table's front;
an unknown metric or studies with different objectives are refused as ``pareto`` refuses them; every
study's PNGs get their own file names; a study named twice is one section."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.cbook import STEP_LOOKUP_MAP
from test_report import OBJECTIVES, _fill, front_table_numbers

from dashboards import figures, interactive, report
from dashboards.report import write_report
from dashboards.values import axes_order
from harness.cli import main
from harness.store import Store

THREE = {"top1": "max", "flops": "min", "throughput": "max"}
# (top1, flops, throughput): on (top1, flops) alone the front is 0, 1, 2, 3, 4, 5, 8; over all three it is
# 0, 1, 3, 5, 6, 8 (2 is beaten by 0, 4 by 5, 7 by 6; 6 has the best throughput).
THREE_POINTS = [(50, 100, 10), (50, 100, 10), (50, 100, 5), (60, 200, 1), (40, 50, 1), (40, 50, 20),
                (30, 300, 30), (30, 300, 29), (60, 200, 1)]  # fmt: skip


def _better_or_equal(a: float, b: float, direction: str) -> bool:
    return a >= b if direction == "max" else a <= b


def _dominates(p: dict, q: dict, objectives: dict[str, str]) -> bool:
    """``p`` at least as good as ``q`` on every objective and better on one: the definition, by hand."""
    return all(_better_or_equal(p[m], q[m], d) for m, d in objectives.items()) and any(p[m] != q[m] for m in objectives)


def _brute_front(points: list[dict], objectives: dict[str, str]) -> set[int]:
    return {p["number"] for p in points if not any(_dominates(q, p, objectives) for q in points)}


def _direction_frame(objectives: dict[str, str]) -> pd.DataFrame:
    """Three front members and two beaten trials, placed by how good they are on each objective (higher
    is better below), then written in the objectives' own directions."""
    goodness = [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0), (1.0, 1.0), (0.5, 2.0)]
    (a, da), (b, db) = objectives.items()
    rows = [
        {"number": i, "status": "completed", a: 10 + g if da == "max" else 10 - g, b: 10 + h if db == "max" else 10 - h}
        for i, (g, h) in enumerate(goodness)
    ]
    return pd.DataFrame(rows)


def _check_corners(corners: np.ndarray, members: list[dict], objectives: dict[str, str], x: str, y: str) -> None:
    """Every corner of the step line is a member or beaten by one, and beats none: an inner corner."""
    assert len(corners)
    for cx, cy in corners:
        corner = {x: float(cx), y: float(cy)}
        assert any(all(_better_or_equal(m[k], corner[k], d) for k, d in objectives.items()) for m in members), (
            f"corner {corner} is beaten by no front member"
        )
        assert not any(_dominates(corner, m, objectives) for m in members), f"corner {corner} beats a member"


@pytest.mark.parametrize(
    "objectives",
    [
        {"top1": "max", "flops": "min"},
        {"top1": "max", "throughput": "max"},
        {"flops": "min", "params": "min"},
        {"flops": "min", "throughput": "max"},
    ],
    ids=["max-min", "max-max", "min-min", "min-max"],
)
def test_the_step_line_turns_at_corners_the_front_dominates(objectives: dict[str, str]):
    """The reviewer's max/max store drew the PNG's line through (80, 300) and (90, 200), corners that beat
    the front they join; plotly got max/max and min/min wrong. Whichever way each axis points, every
    corner of both figures' step lines is one the front dominates (or a member itself)."""
    frame = _direction_frame(objectives)
    members = [r for r in frame.to_dict("records") if r["number"] in (0, 1, 2)]
    assert _brute_front(frame.to_dict("records"), objectives) == {0, 1, 2}
    x, y = axes_order(objectives)

    fig = figures.pareto_scatter(frame, objectives)
    (line,) = [line for line in fig.axes[0].lines if line.get_drawstyle().startswith("steps")]
    xs, ys = STEP_LOOKUP_MAP[line.get_drawstyle()](*line.get_xydata().T)
    assert len(xs) == 2 * len(members) - 1  # every member joined, one corner between neighbours
    _check_corners(np.column_stack([xs, ys]), members, objectives, x, y)

    live = interactive.pareto_scatter(frame, objectives)
    (front,) = [t for t in live.data if t.meta == "front"]
    assert "lines" in front.mode
    fx, fy = np.asarray(front.x, dtype=float), np.asarray(front.y, dtype=float)
    shape = front.line.shape
    assert shape in ("hv", "vh")
    corners = [(fx[i + 1], fy[i]) if shape == "hv" else (fx[i], fy[i + 1]) for i in range(len(fx) - 1)]
    _check_corners(np.array(corners), members, objectives, x, y)


def _fill_three(store: Store, study: str, points: list[tuple[float, float, float]]) -> None:
    store.create_study(study, {"name": study}, THREE)
    for number, (top1, flops, throughput) in enumerate(points):
        store.finish_trial(
            study,
            number,
            status="completed",
            config={"model": {"depth": number % 4}},
            measurement={"flops": flops, "params": 10, "throughput": throughput},
            epochs=[{"epoch": 1, "top1": top1, "train_loss": 1.0}],
            final={"top1": top1},
        )


def _plotly_data(html: str, div_id: str) -> list[dict]:
    """The traces of the page's plotly figure drawn into ``div_id``."""
    start = re.search(rf'Plotly\.newPlot\(\s*"{re.escape(div_id)}",\s*', html)
    assert start, f"no figure {div_id}"
    data, _ = json.JSONDecoder().raw_decode(html, start.end())
    return data


def _marked_front(traces: list[dict]) -> tuple[set[int], dict]:
    (front,) = [t for t in traces if t.get("meta") == "front"]
    return {int(row[0]) for row in front["customdata"]}, front


def test_a_three_objective_report_marks_its_tables_front_in_the_scatter(tmp_path: Path):
    """The scatter once recomputed the front of the first two objectives: "Pareto front (6 trials)" in the
    table, 7 on the front in the scatter, beaten trials marked as members. Now the study's scatter and
    the several-studies one mark the front of all 3 (the table's), say it is a 2-objective view, and
    draw no step line through members that beat one another in the plane."""
    other = [(p[0] + 5, p[1] * 2, p[2]) for p in THREE_POINTS]
    with Store.open(f"sqlite:///{tmp_path / 'three.db'}") as store:
        _fill_three(store, "three", THREE_POINTS)
        _fill_three(store, "more", other)
        html = write_report(store, ["three", "more"], None, tmp_path / "r.html").read_text()
        frame = store.outcomes("three", list(THREE))

    points = [{"number": n, "top1": a, "flops": b, "throughput": c} for n, (a, b, c) in enumerate(THREE_POINTS)]
    expected = _brute_front(points, THREE)
    assert expected == {0, 1, 3, 5, 6, 8}
    assert _brute_front(points, {"top1": "max", "flops": "min"}) == {0, 1, 2, 3, 4, 5, 8}  # not the front

    assert front_table_numbers(html) == expected
    marked, trace = _marked_front(_plotly_data(html, "s1-pareto"))
    assert marked == expected
    assert "lines" not in trace["mode"]  # no step line through a 3-objective front
    assert "throughput: %{customdata[1]}" in trace["hovertemplate"]  # the third objective, in the hover
    assert "6 on the front of top1, flops, throughput (a 2-objective view)" in html
    assert "Pareto front of top1, flops, throughput seen in the plane of top1 vs flops" in html

    # The several-studies scatter: the front of the union, over all 3 objectives.
    union = [{**p, "number": ("three", p["number"])} for p in points] + [
        {"number": ("more", n), "top1": a, "flops": b, "throughput": c} for n, (a, b, c) in enumerate(other)
    ]
    marked, trace = _marked_front(_plotly_data(html, "studies-pareto"))
    members = [p for p in union if p["number"] in _brute_front(union, THREE)]
    assert marked == {p["number"][1] for p in members}
    assert len(trace["customdata"]) == len(members) != len(_brute_front(union, {"top1": "max", "flops": "min"}))
    assert "lines" not in trace["mode"]

    fig = figures.pareto_scatter(frame, THREE)
    assert not [line for line in fig.axes[0].lines if line.get_drawstyle().startswith("steps")]
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert f"Pareto front of all 3 objectives ({len(expected)})" in labels
    assert "(a 2-objective view)" in fig.axes[0].get_title()


def _error_line(output: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith("Error:")]
    return line


def test_an_objective_no_trial_records_is_refused_as_pareto_refuses_it(tmp_path: Path):
    """``report --objectives top1:max,foo:min`` wrote a report with an empty front and exited 0; now it exits
    2 with ``pareto``'s own message, and writes neither the report nor the --png folder."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _fill(store, "s", [("completed", {"a": 1}, 50.0, 5e6), ("completed", {"a": 2}, 60.0, 7e6)])
    wanted = ["--objectives", "top1:max,foo:min", "--store", url]
    out, png = tmp_path / "r.html", tmp_path / "newpng"
    report = CliRunner().invoke(main, ["report", "s", *wanted, "-o", str(out), "--png", str(png)])
    pareto = CliRunner().invoke(main, ["pareto", "s", *wanted])
    assert report.exit_code == 2 and pareto.exit_code == 2
    assert _error_line(report.output) == _error_line(pareto.output)
    assert "unknown metric 'foo'; known: " in report.output
    assert not out.exists() and not png.exists()


def test_studies_with_different_objectives_are_refused_as_pareto_refuses_them(tmp_path: Path):
    """One combined front was drawn on the first study's objectives; now, as ``pareto``, the report asks for
    ``--objectives`` (exit 2, the same words, nothing written) and draws it once they are given."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _fill(store, "a", [("completed", {"a": 1}, 50.0, 5e6), ("completed", {"a": 2}, 60.0, 7e6)])
        _fill_three(store, "b", THREE_POINTS)
    out = tmp_path / "r.html"
    report = CliRunner().invoke(main, ["report", "a", "b", "-o", str(out), "--store", url])
    pareto = CliRunner().invoke(main, ["pareto", "a", "b", "--store", url])
    assert report.exit_code == 2 and pareto.exit_code == 2
    assert _error_line(report.output) == _error_line(pareto.output)
    assert "the studies have different objectives" in report.output and not out.exists()

    given = CliRunner().invoke(
        main, ["report", "a", "b", "-o", str(out), "--store", url, "--objectives", "top1:max,flops:min"]
    )
    assert given.exit_code == 0, given.output
    assert 'id="studies-pareto"' in out.read_text()


def _images(html: str) -> dict[str, bytes]:
    """The static page's PNGs by figure id (``s1-pareto``, ``studies-pareto``)."""
    found = re.findall(r'<figure[^>]* id="([^"]+)"><img[^>]*src="data:image/png;base64,([^"]+)"', html)
    found += [("studies-pareto", data) for data in
              re.findall(r'<figure class="combined"><img[^>]*src="data:image/png;base64,([^"]+)"', html)]  # fmt: skip
    return {key: base64.b64decode(data) for key, data in found}


def test_every_studys_pngs_get_their_own_names_and_the_page_shows_each_studys_own(tmp_path: Path):
    """``exp-α`` and ``exp-β`` both became ``exp-``, and a study named ``studies`` wrote over the combined
    scatter's ``studies-pareto.png``: one study's figures silently replaced another's. Letters of every
    script are kept, and a name already taken (``a b`` and ``a_b``; ``Exp-α`` and ``exp-α`` on a
    case-blind disk) gets ``-2`` in the studies' order; a long name is cut to fit a file name."""
    names = ["exp-α", "exp-β", "studies", "a b", "a_b", "Exp-α", "é" * 300]
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        for k, name in enumerate(names):
            rows = [("completed", {"depth": d}, 50.0 + k + d, (d + 1) * 1e6 * (k + 1)) for d in range(3)]
            _fill(store, name, rows)
        html = write_report(store, names, None, tmp_path / "r.html", png_dir=tmp_path / "png", static=True)
        html = html.read_text()
    stems = ["exp-α", "exp-β", "studies-2", "a_b", "a_b-2", "Exp-α-2", "é" * 60]
    figures_of = ("pareto", "hypervolume", "curves", "params")
    expected = {f"{stem}-{key}.png" for stem in stems for key in figures_of} | {"studies-pareto.png"}
    written = {p.name for p in (tmp_path / "png").iterdir()}
    assert written == expected
    shown = _images(html)
    for index, stem in enumerate(stems, start=1):
        for key in figures_of:
            assert shown[f"s{index}-{key}"] == (tmp_path / "png" / f"{stem}-{key}.png").read_bytes(), (stem, key)
    assert shown["studies-pareto"] == (tmp_path / "png" / "studies-pareto.png").read_bytes()


def test_a_study_named_twice_is_one_section(tmp_path: Path):
    """``report ties ties`` rendered the study twice; ``pareto`` counts a study named twice once, and so does
    the report."""
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        _fill(store, "s", [("completed", {"a": 1}, 50.0, 5e6), ("completed", {"a": 2}, 60.0, 7e6)])
        html = write_report(store, ["s", "s"], OBJECTIVES, tmp_path / "r.html").read_text()
    assert html.count("<h2>Study s</h2>") == 1
    assert 'id="several-studies"' not in html


def test_the_reports_spec_block_shows_unicode_as_written():
    """A spec's ``é`` showed as ``\\xE9`` (YAML's default escapes every non-ASCII character)."""
    assert "exp-é" in report._dump({"name": "exp-é"}) and "\\x" not in report._dump({"name": "exp-é"})
