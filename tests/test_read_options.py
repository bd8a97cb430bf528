"""Issue 44: read options say what they do or are refused. ``--where`` twice on one key is refused
(the last one was silently kept); ``--color-by`` an unknown column is refused before anything is
written (it was ignored while the caption said the figure was coloured by it), and a short name
(``layout``) resolves as ``--where`` keys do.

Issue 45: ``--where`` over several studies resolves each key once over all their configs (the same
column in every study, or refused as ambiguous); a study without the key matches nothing, said in
one note; a spec's indexed key (``depths[3]``) filters on that stage."""

from __future__ import annotations

import json

import pytest
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


def _two_families(url: str) -> None:
    """Study ``s`` (CoAtNet-like: layout, per-stage depths) beside ``cait`` (depth and embed_dim, no layout),
    and ``odd``, whose trials keep a ``layout`` elsewhere in their config (``data.layout``)."""
    _study(url)
    with Store.open(url) as store:
        for name, config in (
            ("cait", {"model": {"depth": 12, "embed_dim": 192}, "training": {"lr": 1e-3}}),
            ("odd", {"model": {"depth": 3}, "data": {"layout": "CCTT"}}),
        ):
            store.create_study(name, {"name": name}, {"top1": "max", "flops": "min"})
            store.finish_trial(
                name, 0, status="completed", config=config, measurement={"flops": 5e5, "params": 10},
                final={"top1": 99.0},
            )  # fmt: skip
            store.set_study_status(name, "completed")


def test_where_over_several_studies_filters_each_and_says_which_lack_the_key(store_url):
    """``pareto A B --where layout=CCTT``: the key resolves over both studies' configs; the study without
    a layout has no matching trial, said in one note on stderr (stdout stays JSON). SQLite and PostgreSQL."""
    url = store_url
    _two_families(url)
    done = CliRunner().invoke(
        main, ["pareto", "s", "cait", "--store", url, "--where", "layout=CCTT", "--format", "json"]
    )
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert {(r["study"], r["number"]) for r in rows} == {("s", 0), ("s", 2)}  # the CCTT trials; cait's none
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: --where: cait has no layout, so none of its trials match"]
    table = CliRunner().invoke(main, ["pareto", "s", "cait", "--store", url, "--where", "layout=CCTT"])
    assert table.exit_code == 0 and "front of 2 from 2 trials (completed 2)" in table.stdout
    # A key the CaiT study has and the other lacks works the other way round; neither: no match at all.
    args = ["pareto", "s", "cait", "--store", url, "--format", "json", "--where"]
    other = CliRunner().invoke(main, [*args, "embed_dim=192"])
    assert other.exit_code == 0 and "s has no embed_dim" in other.stderr
    assert [(r["study"], r["number"]) for r in json.loads(other.stdout)] == [("cait", 0)]
    nothing = CliRunner().invoke(main, ["pareto", "s", "cait", "--store", url, "--where", "embed_dim=7"])
    assert nothing.exit_code == 2 and "no trial matches the filters (s has no embed_dim)" in nothing.output


def test_a_short_key_that_names_different_columns_in_different_studies_is_ambiguous(tmp_path):
    """``layout`` is ``config.model.layout`` in ``s`` but ``config.data.layout`` in ``odd``: refused, naming
    both and where each is, never filtered on one in one study and the other in the other."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    _two_families(url)
    done = CliRunner().invoke(main, ["pareto", "s", "odd", "--store", url, "--where", "layout=CCTT"])
    assert done.exit_code == 2, done.output
    assert "filter key 'layout' is ambiguous: config.data.layout (odd); config.model.layout (s)" in done.output
    assert len(done.output.strip().splitlines()) == 1
    whole = CliRunner().invoke(main, ["pareto", "s", "odd", "--store", url, "--where", "model.layout=CCTT"])
    assert whole.exit_code == 0, whole.output
    assert "odd has no model.layout" in whole.stderr and "odd " not in whole.stdout


def test_where_takes_a_searched_parameter_as_the_spec_names_it(tmp_path):
    """``depths[2]=3``: one stage of a list-valued parameter, the spec's own key; a whole list as the
    table shows it (``1/1/3/1``)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    _study(url)
    stage = CliRunner().invoke(main, ["pareto", "s", "--store", url, "--where", "depths[2]=3", "--format", "json"])
    assert stage.exit_code == 0, stage.output
    assert [r["number"] for r in json.loads(stage.stdout)] == [2]
    whole = CliRunner().invoke(main, ["pareto", "s", "--store", url, "--where", "depths=1/1/2/1", "--format", "json"])
    assert whole.exit_code == 0, whole.output
    assert [r["number"] for r in json.loads(whole.stdout)] == [1]
    unknown = CliRunner().invoke(main, ["pareto", "s", "--store", url, "--where", "widths[2]=3"])
    assert unknown.exit_code == 2 and "unknown filter key 'widths[2]'" in unknown.output


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("depths[999999999999999999999]=1", "index 99999999999999999999... is past the end of model.depths"),
        ("depths[4]=1", "index 4 is past the end of model.depths, whose lists hold at most 4 elements"),
        ("layout[0]=C", "model.layout is not a list in study s"),
    ],
)
def test_an_index_is_checked_against_the_shape_of_the_stored_key(tmp_path, key, said):
    """Issue 57 (8): an index past the end of the stored lists (or on a key that holds no list) is refused,
    naming the key, not answered with "no trial matches"; the last index still filters."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    _study(url)
    done = CliRunner().invoke(main, ["pareto", "s", "--store", url, "--where", key])
    assert done.exit_code == 2 and said in done.output, done.output
    assert f"filter key {key.split('=')[0]!r}" in done.output and len(done.output.strip().splitlines()) == 1
    last = CliRunner().invoke(main, ["pareto", "s", "--store", url, "--where", "depths[3]=1", "--format", "json"])
    assert last.exit_code == 0, last.output


def test_a_study_named_twice_is_one_study(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    _study(url)
    done = CliRunner().invoke(main, ["pareto", "s", "s", "--store", url, "--format", "json"])
    assert done.exit_code == 0, done.output
    assert sorted(r["number"] for r in json.loads(done.stdout)) == [0, 1, 2]  # each trial once
