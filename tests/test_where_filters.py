"""Issue 61: ``--where`` compares. ``--where 'lr>0.002'`` was refused as "not KEY=VALUE"; every filter
(``pareto``, ``fidelity``, ``Study.trials(where=...)``) takes ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` and
``KEY in V1,V2``, typed by the column: numbers as numbers (``params>100000`` and ``batch_size>100`` are
cases where text order gives another answer), text as text, and a comparison whose value is of the
other kind than the column's is refused naming the column."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dashboards import load_study
from dashboards.filters import FilterError, parse_filters
from harness.cli import main
from harness.store import Store

# number: (layout, lr, batch_size, params, depth of stage 2); each trial is on the front (flops and top1 rise together)
TRIALS = {
    0: ("CCCT", 0.001, 32, 99_999, 1),
    1: ("CCTT", 0.002, 128, 100_001, 2),
    2: ("CTTT", 0.003, 64, 250_000, 3),
    3: ("CCTT", 0.004, 256, 1_200_000, 4),
}


@pytest.fixture
def url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        for number, (layout, lr, batch, params, depth) in TRIALS.items():
            store.finish_trial(
                "s", number, status="completed",
                config={"model": {"layout": layout, "depths": [1, 1, depth, 1]}, "training": {"lr": lr},
                        "data": {"batch_size": batch}},
                measurement={"flops": 1e6 * (number + 1), "params": params},
                final={"top1": 50.0 + 10 * number},
            )  # fmt: skip
        store.set_study_status("s", "completed")
    return url


def _front(url: str, *filters: str) -> set[int]:
    args = ["pareto", "s", "--store", url, "--format", "json"]
    for item in filters:
        args += ["--where", item]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    return {row["number"] for row in json.loads(done.stdout)}


CASES = [
    ("lr>0.002", {2, 3}),
    ("lr >= 0.002", {1, 2, 3}),
    ("lr<0.002", {0}),
    ("lr<=2e-3", {0, 1}),
    ("lr=0.002", {1}),
    ("layout=CCTT", {1, 3}),
    ("layout!=CCTT", {0, 2}),
    ("layout in CCTT,CTTT", {1, 2, 3}),
    ("layout in CCTT, CCCT", {0, 1, 3}),
    ("params>100000", {1, 2, 3}),  # as text, "99999" > "100000" and trial 0 would match
    ("batch_size>100", {1, 3}),  # as text, "32" and "64" > "100"
    ("depths[2]>=3", {2, 3}),
    ("layout<CCTT", {0}),  # text as text
    ("top1>=70", {2, 3}),
]


@pytest.mark.parametrize(("item", "expected"), CASES)
def test_each_operator_filters_the_front_on_the_command_line(url, item, expected):
    assert _front(url, item) == expected


def test_filters_are_anded_and_one_key_takes_a_range(url):
    assert _front(url, "lr>0.001", "lr<0.004") == {1, 2}
    assert _front(url, "layout in CCTT,CTTT", "params<1e6") == {1, 2}


@pytest.mark.parametrize(("item", "expected"), CASES)
def test_each_operator_filters_study_trials_from_python(url, item, expected):
    with load_study("s", store=url) as study:
        assert set(study.trials(where=item)["number"]) == expected
        assert set(study.trials(where=[item, "status=completed"])["number"]) == expected


def test_python_takes_a_mapping_a_list_value_as_in_and_leaves_an_unfiltered_call_alone(url):
    with load_study("s", store=url) as study:
        assert set(study.trials(where={"layout": "CCTT"})["number"]) == {1, 3}
        assert set(study.trials(where={"layout": ["CCCT", "CTTT"]})["number"]) == {0, 2}
        assert set(study.trials(where=["lr>0.001", "lr<0.004"])["number"]) == {1, 2}
        assert len(study.trials()) == len(TRIALS)
        with pytest.raises(FilterError, match=r"config.model.layout|model.layout holds text"):
            study.trials(where="layout>3")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            "lr~0.002",
            "filter 'lr~0.002' is not KEY=VALUE, KEY!=VALUE, KEY<VALUE, KEY<=VALUE, KEY>VALUE, KEY>=VALUE or "
            "KEY in V1,V2",
        ),
        (">0.002", "filter '>0.002' is not KEY=VALUE"),
        ("layout>3", "filter 'layout>3': model.layout holds text in study s (e.g. 'CCCT'), not numbers"),
        ("lr>high", "filter 'lr>high': training.lr holds numbers in study s (e.g. 0.001) and 'high' is not one"),
        (
            "depths>2",
            "filter 'depths>2': model.depths holds lists in study s, which > cannot order; compare one "
            "element, e.g. depths[0]>2",
        ),
        ("layout in CCTT,,CTTT", "'in' takes values separated by commas, none empty"),
        ("colour<3", "unknown filter key 'colour'"),
    ],
)
def test_a_bad_filter_is_one_line_naming_it(url, item, message):
    done = CliRunner().invoke(main, ["pareto", "s", "--store", url, "--where", item])
    assert done.exit_code == 2, done.output
    assert message in done.output
    assert len(done.output.strip().splitlines()) == 1


def _listed(url: str, *args: str) -> list[int]:
    done = CliRunner().invoke(main, ["trials", "s", "--store", url, "--format", "json", *args])
    assert done.exit_code == 0, done.output
    return [row["number"] for row in json.loads(done.stdout)]


@pytest.mark.parametrize(("item", "expected"), CASES)
def test_each_operator_filters_the_trials_command(url, item, expected):
    """Every read command that lists trials takes the filters: ``trials`` had no --where at all."""
    assert set(_listed(url, "--where", item)) == expected


def test_trials_filters_before_its_sort_and_limit_cut(url):
    """The top N of the trials that match, not the matches among the top N."""
    assert _listed(url, "--where", "layout=CCTT", "--sort", "top1", "--limit", "1") == [3]
    assert _listed(url, "--where", "lr<0.004", "--sort", "top1:asc", "--limit", "2") == [0, 1]
    assert _listed(url, "--where", "params>1e7") == []


@pytest.mark.parametrize("command", ["trials", "fidelity"])
def test_a_bad_filter_is_the_same_line_in_every_read_command(url, command):
    done = CliRunner().invoke(main, [command, "s", "--store", url, "--where", "colour<3"])
    assert done.exit_code == 2 and "unknown filter key 'colour'" in done.output, done.output
    assert len(done.output.strip().splitlines()) == 1


def test_fidelity_reads_the_same_filters(url):
    done = CliRunner().invoke(main, ["fidelity", "s", "--store", url, "--where", "lr=>0.002x", "--where", "lr~1"])
    assert done.exit_code == 2 and "filter 'lr~1' is not KEY=VALUE, KEY!=VALUE" in done.output


def test_key_value_parses_as_it_always_did():
    (one,) = parse_filters(["name=a<b=c"])  # the key ends at the first operator; the value keeps the rest
    assert (one.key, one.op, one.value) == ("name", "=", "a<b=c")
    with pytest.raises(FilterError, match=r"filter key 'layout' given twice \(layout=CCTT, layout=CTTT\)"):
        parse_filters(["layout=CCTT", "layout=CTTT"])
