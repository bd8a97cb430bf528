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
    ("data.batch_size>100", {1, 3}),  # as text, "32" and "64" > "100" (bare batch_size: the measured column)
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
    done = CliRunner().invoke(main, ["fidelity", "s", "--store", url, "--where", "lr=0.002x", "--where", "lr~1"])
    assert done.exit_code == 2 and "filter 'lr~1' is not KEY=VALUE, KEY!=VALUE" in done.output
    done = CliRunner().invoke(main, ["fidelity", "s", "--store", url, "--where", "lr=>0.002"])
    assert done.exit_code == 2 and "filter 'lr=>0.002': => is no operator" in done.output, done.output


def test_key_value_parses_as_it_always_did():
    (one,) = parse_filters(["name=a<b=c"])  # the key ends at the first operator; the value keeps the rest
    assert (one.key, one.op, one.value) == ("name", "=", "a<b=c")
    with pytest.raises(FilterError, match=r"filter key 'layout' given twice \(layout=CCTT, layout=CTTT\)"):
        parse_filters(["layout=CCTT", "layout=CTTT"])


# Review of issue 61: what the tables show is what a filter sees. Trial 0 and 1 ran (a spec's ``choice:
# [null, 16]`` gave trial 1 a null head); trial 2 was infeasible: no final record, no measured batch, and a
# config written before ``head_hidden_dim`` existed (the key missing, which the tables also show ``-``).
FACTS = {0: {"cudnn_benchmark": 1.0, "deterministic": 0.0, "threads": 4.0}, 1: {"cudnn_benchmark": 0.0,
         "deterministic": 1.0, "threads": 4.0}}  # fmt: skip


@pytest.fixture
def shown(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'shown.db'}"
    with Store.open(url) as store:
        store.create_study("h", {"name": "h"}, {"top1": "max", "flops": "min"})
        for number, head in ((0, 16), (1, None)):
            store.finish_trial(
                "h", number, status="completed",
                config={"model": {"head_hidden_dim": head}, "training": {"epochs": 3},
                        "data": {"batch_size": 64, "augment": {"hflip": number == 0}}},
                measurement={"flops": 1e6 * (number + 1), "params": 1000, "batch_size": 8 * (number + 1),
                             "throughput_shared": number == 1},
                final={"top1": 50.0 + number, "epochs": 3, **FACTS[number]},
            )  # fmt: skip
        store.finish_trial(
            "h", 2, status="infeasible", error="too big",
            config={"model": {}, "training": {"epochs": 3}, "data": {"batch_size": 64, "augment": {"hflip": True}}},
        )  # fmt: skip
    return url


def _numbers(url: str, command: str, *filters: str) -> set[int]:
    args = [command, "h", "--store", url, "--format", "json"]
    for item in filters:
        args += ["--where", item]
    done = CliRunner().invoke(main, args)
    if done.exit_code == 2 and "no trial matches" in done.output:
        return set()
    assert done.exit_code == 0, done.output
    return {row["number"] for row in json.loads(done.stdout)}


def _everywhere(url: str, item: str, *, front: bool = True) -> tuple[set[int], ...]:
    """The trials ``item`` keeps in ``trials`` and ``Study.trials(where=)``, and (``front``) the front
    ``pareto`` shows (which filters on numeric metrics and config keys only)."""
    with load_study("h", store=url) as study:
        python = set(study.trials(where=item)["number"])
    shown = (_numbers(url, "trials", item), python)
    return (*shown, _numbers(url, "pareto", item)) if front else shown


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("head_hidden_dim=None", {1, 2}),  # null, and a config without the key: both shown '-'
        ("head_hidden_dim=null", {1, 2}),  # as YAML (the spec) writes it
        ("head_hidden_dim=~", {1, 2}),
        ("head_hidden_dim!=None", {0}),
        ("head_hidden_dim in None,16", {0, 1, 2}),
        ("head_hidden_dim=nan", set()),  # a NaN of pandas' is no value of the trial's
        ("head_hidden_dim=16", {0}),
    ],
)
def test_a_null_or_missing_config_value_is_none_in_every_filter(shown, item, expected):
    """``head_hidden_dim=None`` matched nothing (pandas had made the null a NaN in a numeric config
    column; only metric columns were turned back) and ``!=None`` everything, although the table shows
    ``-``: in ``trials``, ``pareto`` (the front: trials 0 and 1) and ``Study.trials`` alike."""
    trials, python, front = _everywhere(shown, item)
    assert trials == python == expected
    assert front == expected - {2}


def test_a_key_naming_a_shown_column_reads_that_column_before_a_config_key_by_its_last_part(shown):
    """``epochs=None`` read ``config.training.epochs`` (3 everywhere) and matched nothing although the
    table's ``epochs`` column shows ``-`` for the infeasible trial; ``batch_size=8`` was refused as
    ambiguous between two config keys while the unknown-key message offered ``batch_size`` as a metric.
    The column shown under the name wins; the config keys are reached by more of their path."""
    assert _everywhere(shown, "epochs=None", front=False) == ({2}, {2})
    assert _everywhere(shown, "epochs=3") == ({0, 1}, {0, 1}, {0, 1})
    assert _everywhere(shown, "training.epochs=3", front=False) == ({0, 1, 2}, {0, 1, 2})
    assert _everywhere(shown, "config.training.epochs=3", front=False) == ({0, 1, 2}, {0, 1, 2})
    assert _everywhere(shown, "batch_size=8") == ({0}, {0}, {0})  # the measured batch
    assert _everywhere(shown, "batch_size>8") == ({1}, {1}, {1})
    assert _everywhere(shown, "data.batch_size=64", front=False) == ({0, 1, 2}, {0, 1, 2})
    done = CliRunner().invoke(main, ["trials", "h", "--store", shown, "--where", "bogus>1"])
    assert done.exit_code == 2 and "or a metric: batch_size" in done.output, done.output
    assert "data.batch_size" in done.output  # each key the message offers resolves as offered


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("cudnn_benchmark=False", {1}),  # a fact recorded as 0.0
        ("cudnn_benchmark=true", {0}),
        ("deterministic=FALSE", {0}),
        ("throughput_shared=false", {0}),  # a stored boolean
        ("throughput_shared=True", {1}),
        ("throughput_shared=1", {1}),
        ("hflip=false", {1}),  # a config boolean, in YAML's spelling
        ("hflip=False", {1}),
        ("hflip=true", {0, 2}),
    ],
)
def test_a_flag_compares_as_a_flag_whatever_its_storage_or_spelling(shown, item, expected):
    """``cudnn_benchmark=False`` matched nothing (the trial's facts are recorded as 0.0) while
    ``throughput_shared=False`` matched, and ``hflip=false`` (YAML's spelling) matched nothing."""
    trials, python = _everywhere(shown, item, front=False)
    assert trials == python == expected


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("lr==0.002", {1}),
        ("layout in 'CCCT','CTTT'", {0, 2}),
        ('layout in "CCCT","CTTT"', {0, 2}),
        ("layout in 'CCCT,CTTT'", {0, 2}),
        ("layout='CCTT'", {1, 3}),
        ('layout!="CCTT"', {0, 2}),
    ],
)
def test_a_doubled_equals_sign_or_quoted_values_filter_as_meant(url, item, expected):
    """``lr==0.00365`` compared with the text ``=0.00365`` and quoted values with their quotes: nothing
    matched, and the user read "no trial" as the answer."""
    assert _front(url, item) == expected
    assert set(_listed(url, "--where", item)) == expected


@pytest.mark.parametrize(("item", "meant"), [("lr=>0.003", ">="), ("lr=<0.003", "<="), ("layout<>CCTT", "!=")])
def test_an_operator_written_the_other_way_round_is_refused_naming_the_one_meant(url, item, meant):
    for command in ("pareto", "trials"):
        done = CliRunner().invoke(main, [command, "s", "--store", url, "--where", item])
        assert done.exit_code == 2, done.output
        assert f"is no operator (operators: =, !=, <, <=, >, >=, in); did you mean {meant}?" in done.output
        assert len(done.output.strip().splitlines()) == 1
    with pytest.raises(FilterError, match="is no operator"):
        parse_filters(item)
