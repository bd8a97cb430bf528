"""Issue 44: read options say what they do or are refused. ``--where`` twice on one key is refused
(the last one was silently kept); ``--color-by`` an unknown column is refused before anything is
written (it was ignored while the caption said the figure was coloured by it), and a short name
(``layout``) resolves as ``--where`` keys do."""

from __future__ import annotations

from click.testing import CliRunner

from harness.cli import main
from harness.store import Store


def _study(url: str) -> None:
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        for number, (layout, depth) in enumerate([("CCTT", 1), ("CTTT", 2), ("CCTT", 3)]):
            store.finish_trial(
                "s", number, status="completed",
                config={"model": {"layout": layout, "depths": [1, 1, depth, 1]}, "training": {"lr": 1e-3}},
                measurement={"flops": 1e6 * (number + 1), "params": 1000},
                final={"top1": 50.0 + 10 * number},
            )  # fmt: skip
        store.set_study_status("s", "completed")


def test_a_filter_key_given_twice_is_refused_in_one_line(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    _study(url)
    args = ["pareto", "s", "--store", url, "--where", "layout=CCTT", "--where", "layout=CTTT"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 2, done.output
    assert "filter key 'layout' given twice (layout=CCTT, layout=CTTT)" in done.output
    assert len(done.output.strip().splitlines()) == 1


def test_color_by_an_unknown_column_is_refused_and_writes_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    _study(url)
    out, png = tmp_path / "out" / "r.html", tmp_path / "png"
    args = ["report", "s", "--store", url, "-o", str(out), "--png", str(png), "--static"]
    done = CliRunner().invoke(main, [*args, "--color-by", "no_such_column"])
    assert done.exit_code == 2, done.output
    assert "--color-by 'no_such_column' is not a config column of these studies; e.g. model.depths" in done.output
    assert not out.exists() and not out.parent.exists() and not png.exists()


def test_color_by_a_short_name_colours_by_its_config_column(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    _study(url)
    out = tmp_path / "r.html"
    done = CliRunner().invoke(main, ["report", "s", "--store", url, "-o", str(out), "--color-by", "layout"])
    assert done.exit_code == 0, done.output
    html = out.read_text()
    assert "coloured by config.model.layout" in html and "layout = CCTT" in html
