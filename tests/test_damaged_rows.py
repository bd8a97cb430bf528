"""A damaged row is that row's problem (issue 44, item 4): a store written by archsearch, then damaged
by hand with raw SQL UPDATEs (a JSON column that is not JSON, of the wrong shape, nested 10^5 deep; a
number held as text), on SQLite and, where PostgreSQL can hold the damage, on PostgreSQL.

``studies`` lists every other study as usual and the damaged one with what is wrong; ``trials``,
``pareto`` and ``report`` leave a damaged trial out with one warning line naming study, trial and
column; ``export`` of that trial exits 2 with that one line; ``load_study`` raises the store's typed
error (``DamagedRow``, a ``StoreError``), never a bare ``ValueError`` or ``JSONDecodeError``. Nothing
is an internal error, and nothing stored reaches a terminal unescaped."""

from __future__ import annotations

import json
import sqlite3
import warnings

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from dashboards import load_study
from dashboards.study import DamagedRowsLeftOut
from harness.cli import main
from harness.store import Store, StoreError
from harness.store.errors import DamagedRow
from trials.errors import ArchsearchError

OBJECTIVES = {"top1": "max", "flops": "min"}


def _study(store: Store, name: str) -> None:
    """Three completed trials that export and train (a 1-3 block CaiT), each on the front (top1 and
    FLOPs both grow with depth), with their parameters, cost, final metrics and one epoch."""
    store.create_study(name, {"name": name}, OBJECTIVES)
    for number in range(3):
        depth = number + 1
        store.finish_trial(
            name,
            number,
            status="completed",
            config={"model": {"preset": "cait_tiny32", "depth": depth}, "training": {"epochs": 1}},
            parameters={"sampled": {"depth": depth}, "fixed": {}},
            measurement={"flops": 1_000_000 * depth, "params": 1000 * depth},
            final={"top1": 50.0 + number},
            epochs=[{"epoch": 1, "top1": 50.0 + number, "train_loss": 1.0}],
        )


@pytest.fixture
def stores(store_url):
    """(url, backend): studies ``good``, ``bad`` and ``other``, written by the store as a search writes them."""
    with Store.open(store_url) as store:
        for name in ("good", "bad", "other"):
            _study(store, name)
    return store_url, "sqlite" if store_url.startswith("sqlite") else "postgresql"


def _damage(url: str, table: str, column: str, value: str, where: str) -> None:
    """A raw UPDATE behind the store's back (a JSON column takes the text as jsonb on PostgreSQL)."""
    engine = create_engine(url)
    json_column = column in ("objectives", "spec", "config", "final", "parameters")
    placeholder = "CAST(:value AS jsonb)" if json_column and engine.dialect.name == "postgresql" else ":value"
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE archsearch_{table} SET {column} = {placeholder} WHERE {where}"), {"value": value})
    engine.dispose()


def _bad_trial(number: int) -> str:
    study = "(SELECT id FROM archsearch_studies WHERE name = 'bad')"
    return f"study_id = {study} AND number = {number}"


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _lines(text_: str) -> list[str]:
    return [line for line in text_.strip().splitlines() if line.strip()]


def _one_error_line(result) -> str:
    """Exit 2, no internal error, one line in all."""
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output
    lines = _lines(result.output)
    assert len(lines) == 1, result.output
    return lines[0]


def _good_and_other_listed(url: str) -> None:
    result = _invoke("studies", "--store", url, "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"good", "bad", "other"}
    for name in ("good", "other"):
        assert rows[name]["objectives"] == "top1:max,flops:min" and rows[name]["trials"] == 3


# -- a study's objectives --------------------------------------------------------------------------

OBJECTIVE_FORMS = [
    pytest.param('"top1:max,flops:min"', "is a string, not a list of {name, direction}", id="a-json-string"),
    pytest.param("[1, 2]", "item 0 is a number, not {name, direction}", id="a-list-of-numbers"),
    pytest.param('[{"name": "top1"}, {"name": "flops"}]', "item 0 has no 'direction'", id="lacking-direction"),
    pytest.param('{"top1": "max"}', "is an object, not a list of {name, direction}", id="an-object"),
    pytest.param("top1:max,flops:min", "is not JSON", id="not-json"),  # SQLite only: jsonb refuses it
]


@pytest.mark.parametrize("value, said", OBJECTIVE_FORMS)
def test_damaged_objectives_are_that_studys_problem_and_hide_no_other(stores, value, said):
    url, backend = stores
    if value == "top1:max,flops:min" and backend == "postgresql":
        pytest.skip("a jsonb column cannot hold text that is not JSON")
    _damage(url, "studies", "objectives", value, "name = 'bad'")
    line = f"study 'bad': column 'objectives' {said}"

    result = _invoke("studies", "--store", url)
    assert result.exit_code == 0, result.output
    table = _lines(result.stdout)
    assert table[2].startswith("good ") and "top1:max,flops:min" in table[2]
    assert table[4].startswith("other ") and "top1:max,flops:min" in table[4]
    assert table[3].startswith("bad ") and f"damaged: column 'objectives' {said}" in table[3]
    assert _lines(result.stderr) == [f"warning: {line}"]
    _good_and_other_listed(url)

    for args in (["pareto", "bad"], ["report", "bad", "-o", "-"]):
        assert _one_error_line(_invoke(*args, "--store", url)) == f"Error: {line}"
    # Objectives given on the command line: the study's trials are read as usual.
    result = _invoke("pareto", "bad", "--objectives", "top1:max,flops:min", "--store", url, "--format", "json")
    assert result.exit_code == 0, result.output
    assert [row["number"] for row in json.loads(result.stdout)] == [2, 1, 0]
    assert _invoke("pareto", "good", "--store", url).exit_code == 0
    assert _invoke("trials", "bad", "--store", url).exit_code == 0

    with load_study("bad", url) as study:
        with pytest.raises(DamagedRow) as raised:
            study.objectives  # noqa: B018
        assert str(raised.value) == line and isinstance(raised.value, StoreError)
        assert "damaged" in repr(study)
        assert len(study.trials()) == 3


# -- a trial's JSON and numbers --------------------------------------------------------------------

DEEP = 10**5  # SQLite holds it; PostgreSQL's jsonb refuses past its stack depth, so 10^4 there

TRIAL_FORMS = [
    # (table, column, stored value, what the one line says, read by pareto and report, SQLite only)
    pytest.param("trials", "config", '{"model": {"depth": 2', "is not JSON", True, True, id="config-not-json"),
    pytest.param("trials", "config", "[1, 2]", "is an array, not a JSON object", True, False, id="config-a-list"),
    pytest.param("trials", "config", "DEEP", "is nested deeper than 32 levels", True, False, id="config-deep"),
    pytest.param(
        "trials", "config", '{"model": 7}', "has 'model' as a number, not a JSON object", True, False,
        id="config-model-a-number",
    ),
    pytest.param(
        "trials", "config", '{"model": {}, "training": "x"}', "has 'training' as a string, not a JSON object",
        True, False, id="config-section-a-string",
    ),
    pytest.param("trials", "final", '"top1"', "is a string, not a JSON object", True, False, id="final-a-string"),
    pytest.param(
        "trials",
        "final",
        '{"top1": "high"}',
        "holds 'top1' as a string, not a number",
        True,
        False,
        id="final-metric-a-string",
    ),
    pytest.param("trials", "final", "{top1: 51}", "is not JSON", True, True, id="final-not-json"),
    pytest.param(
        "trials",
        "parameters",
        '{"sampled": [2]}',
        "'sampled' is an array, not an object of parameter values",
        False,
        False,
        id="parameters-malformed",
    ),
    pytest.param(
        "trials", "parameters", '"depth=2"', "is a string, not a JSON object", False, False, id="parameters-a-string"
    ),
    pytest.param("measurements", "flops", "lots", "is a string, not a number", True, True, id="flops-as-text"),
]


@pytest.mark.parametrize("table, column, value, said, read_by_fronts, sqlite_only", TRIAL_FORMS)
def test_a_damaged_trial_is_left_out_in_one_line_and_exported_never(
    stores, tmp_path, table, column, value, said, read_by_fronts, sqlite_only
):
    url, backend = stores
    if sqlite_only and backend == "postgresql":
        pytest.skip("PostgreSQL's column types cannot hold this damage")
    if value == "DEEP":
        depth = DEEP if backend == "sqlite" else 10**4
        value = '{"model": ' + "[" * depth + "]" * depth + "}"
    where = _bad_trial(1)
    if table == "measurements":
        where = f"trial_id = (SELECT id FROM archsearch_trials WHERE {where})"
    _damage(url, table, column, value, where)
    line = f"study 'bad' trial 1: column '{column}' {said}"
    warning = f"warning: {line}; left out"

    _good_and_other_listed(url)

    result = _invoke("trials", "bad", "--store", url)
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in _lines(result.stdout)[2:4]] == ["0", "2"]
    assert "2 of 3 trials; 1 damaged, left out" in result.stdout
    assert _lines(result.stderr) == [warning]

    result = _invoke("trials", "bad", "--store", url, "--format", "json")
    assert result.exit_code == 0, result.output
    assert [row["number"] for row in json.loads(result.stdout)] == [0, 2]  # stdout stays JSON
    assert _lines(result.stderr) == [warning]

    result = _invoke("trials", "bad", "--store", url, "--sort", "top1", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in _lines(result.stdout)[2:4]] == ["2", "0"]

    result = _invoke("pareto", "bad", "--store", url, "--format", "json")
    assert result.exit_code == 0, result.output
    front = [row["number"] for row in json.loads(result.stdout)]
    assert front == ([2, 0] if read_by_fronts else [2, 1, 0])
    assert _lines(result.stderr) == ([warning] if read_by_fronts else [])

    report = tmp_path / "report.html"
    result = _invoke("report", "bad", "-o", str(report), "--store", url, "--static")
    assert result.exit_code == 0, result.output
    # the report's fidelity panel reads every completed trial's row: the damaged one is left out, and said
    assert report.exists() and warning in _lines(result.stderr)

    exported = tmp_path / "trial.yaml"
    assert _one_error_line(_invoke("export", "bad", "1", "-o", str(exported), "--store", url)) == f"Error: {line}"
    assert not exported.exists()
    assert _invoke("export", "bad", "0", "-o", str(exported), "--store", url).exit_code == 0

    with load_study("bad", url) as study:
        with pytest.warns(DamagedRowsLeftOut, match="trial 1"):
            assert study.trials()["number"].tolist() == [0, 2]
        with pytest.raises(DamagedRow) as raised:
            study.trial_config(1)
        assert str(raised.value) == line and isinstance(raised.value, ArchsearchError)
        assert not isinstance(raised.value, ValueError)
        assert study.trial_config(2).model.depth == 3
    with load_study("good", url) as study, warnings.catch_warnings():
        warnings.simplefilter("error")
        assert study.trials()["number"].tolist() == [0, 1, 2]


def test_the_store_reads_each_damaged_row_once_and_lists_the_rest(stores):
    """Through the Python API of the store: the other trials come back whole, the damage noted once."""
    url, _backend = stores
    _damage(url, "trials", "config", "[1, 2]", _bad_trial(0))
    _damage(url, "trials", "final", '"x"', _bad_trial(2))
    with Store.open(url, create=False, read_only=True) as store:
        assert store.trials("bad")["number"].tolist() == [1]
        assert store.trials("bad")["number"].tolist() == [1]
        assert sorted(store.trial_records("bad")) == [1]
        assert store.outcomes("bad", ["top1", "flops"])["number"].tolist() == [1]
        assert store.configs("bad", [0, 1, 2])["number"].tolist() == [1, 2]
        assert store.trials("good")["number"].tolist() == [0, 1, 2]
        assert [str(p) for p in store.damaged_rows()] == [
            "study 'bad' trial 0: column 'config' is an array, not a JSON object",
            "study 'bad' trial 2: column 'final' is a string, not a JSON object",
        ]


def test_a_damaged_spec_is_read_without_it(stores):
    url, _backend = stores
    _damage(url, "studies", "spec", "[1]", "name = 'bad'")
    result = _invoke("trials", "bad", "--store", url)
    assert result.exit_code == 0, result.output
    assert _lines(result.stderr) == ["warning: study 'bad': column 'spec' is an array, not a JSON object"]
    with load_study("bad", url) as study, pytest.raises(DamagedRow, match="column 'spec'"):
        study.spec  # noqa: B018


def test_stored_control_characters_are_escaped_in_tables_and_warnings(stores):
    """An escape or window-title sequence in a stored value reaches neither the table nor stderr raw,
    piped or not; ``--format json`` stays strict JSON (a NaN null, an infinity the string "inf")."""
    url, _backend = stores
    hostile = "\x1b]0;pwned\x07\x1b[31m"
    _damage(url, "studies", "objectives", json.dumps([{"name": "top1", "direction": hostile}]), "name = 'bad'")
    _damage(url, "studies", "status_message", hostile + "\r\nsecond line", "name = 'good'")
    with Store.open(url) as store:
        store.finish_trial("other", 3, status="completed", config={"model": {"depth": hostile}},
                           measurement={"throughput": float("inf")}, final={"top1": float("nan")})  # fmt: skip
    for args in (["studies"], ["trials", "other"], ["pareto", "bad"], ["trials", "other", "--format", "json"]):
        result = _invoke(*args, "--store", url)
        assert "internal error" not in result.output, result.output
        assert not {"\x1b", "\x07", "\r"} & set(result.output), (args, result.output)
    result = _invoke("studies", "--store", url)
    assert "\\x1b]0;pwned\\x07" in result.stdout and "\\x1b]0;pwned\\x07" in result.stderr
    result = _invoke("trials", "other", "--store", url, "--format", "json")

    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    rows = json.loads(result.stdout, parse_constant=refuse)
    assert rows[3]["config.model.depth"] == hostile and rows[3]["throughput"] == "inf" and rows[3]["top1"] is None


def test_a_text_cell_that_is_not_utf8_is_read_with_its_bad_bytes_replaced_and_hides_nothing(tmp_path):
    """Adversarial pass D18: one such cell made `studies` fail for the whole store."""
    url = f"sqlite:///{tmp_path / 'bytes.db'}"
    with Store.open(url) as store:
        for name in ("good", "bad"):
            store.create_study(name, {"name": name}, {"top1": "max", "flops": "min"})
            store.set_study_status(name, "completed", message="fine")
    with sqlite3.connect(tmp_path / "bytes.db") as conn:
        conn.execute("UPDATE archsearch_studies SET status_message = CAST(x'66fffe80' AS TEXT) WHERE name = 'bad'")
    done = CliRunner().invoke(main, ["studies", "--store", url, "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = {row["name"]: row for row in json.loads(done.output)}
    assert set(rows) == {"good", "bad"} and rows["bad"]["message"].startswith("f\ufffd")
