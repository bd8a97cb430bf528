"""A reproduction's runs file is validated before any verdict is decided from it (issue 44, item 5).

A runs file edited by hand used to be trusted: one ``nan`` marked a variant "did not complete", one
``inf`` made seven seeds "fewer than 3", a duplicated (variant, seed) row was used silently and
flipped a verdict, ``1e308`` gave no difference and no reason. Each damage below, made to a
committed runs file, is refused with a :class:`DataError` (exit 2) of one line naming the file, the
line, the column and the value; every committed runs file passes. The store's runs table goes
through the same check before its verdicts, and a completed run the store holds no finite number
for is left out with its reason, never counted.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.reproduce.analysis import NO_VALUE, check_runs, run_table, summarize, summarize_runs
from harness.reproduce.records import RUNS_SUFFIX, VERDICTS_SUFFIX, read_runs, recompute
from harness.reproduce.registry import STUDIES, plan
from harness.store import Store
from trials.errors import DataError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproductions"
# A committed file with every kind of row: counted, left out (never reached the level), interrupted.
GENERALISATION = "coatnet-layouts-generalisation-cpu-mnist5k"
CAPACITY = "coatnet-layouts-capacity-cpu-mnist5k"


def _committed() -> dict[str, tuple]:
    """Each committed runs file's name -> (protocol, the study's variants), from the registry."""
    out = {}
    for study in STUDIES.values():
        for protocol in study.protocols or (None,):
            (run,) = plan(study.name, "cpu", 7, (protocol,) if protocol else (), "mnist5k", None)
            if (DOCS / f"{run.spec['name']}{RUNS_SUFFIX}").is_file():
                out[run.spec["name"]] = (run.protocol, set(run.spec["variants"]))
    return out


COMMITTED = _committed()


def _lines(name: str) -> list[str]:
    return (DOCS / f"{name}{RUNS_SUFFIX}").read_text().splitlines()


def _header(lines: list[str]) -> list[str]:
    return lines[1].split(",")


def _row(lines: list[str], predicate) -> int:
    """The index (0-based; the file's line is index + 1) of the first data row ``predicate`` accepts."""
    header = _header(lines)
    for k, line in enumerate(lines[2:], start=2):
        if predicate(dict(zip(header, line.split(","), strict=True))):
            return k
    raise AssertionError("no such row")


def _counted(row) -> bool:
    return row["status"] == "completed" and not row["left_out"]


def _set(lines: list[str], k: int, column: str, value: str) -> list[str]:
    header = _header(lines)
    cells = lines[k].split(",")
    cells[header.index(column)] = value
    return [*lines[:k], ",".join(cells), *lines[k + 1 :]]


def _refused(tmp_path, name: str, lines: list[str], *, variants=None) -> str:
    path = tmp_path / f"{name}{RUNS_SUFFIX}"
    path.write_text("".join(f"{line}\n" for line in lines))
    protocol, _ = COMMITTED[name]
    with pytest.raises(DataError) as caught:
        recompute(path, protocol, variants=variants)
    message = str(caught.value)
    assert caught.value.exit_code == 2 and caught.value.kind == "data"
    assert "\n" not in message and message.startswith(f"{path} line"), message
    return message.removeprefix(f"{path} ")


@pytest.mark.parametrize("bad", ["nan", "NaN", "inf", "-inf", "1e308", "101", "-0.5", "ninety", ""])
def test_a_counted_value_that_is_not_a_finite_number_in_the_metrics_range_is_refused(tmp_path, bad):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    variant, seed = lines[k].split(",")[:2]
    message = _refused(tmp_path, GENERALISATION, _set(lines, k, "value", bad))
    assert message.startswith(f"line {k + 1}: value "), message
    assert f"for variant {variant} seed {seed}" in message
    if bad:
        assert f"value {bad!r}" in message
    expected = {
        "nan": "is not finite", "NaN": "is not finite", "inf": "is not finite", "-inf": "is not finite",
        "1e308": "outside the metric's range [0, 100]", "101": "outside the metric's range [0, 100]",
        "-0.5": "outside the metric's range [0, 100]", "ninety": "is not a number", "": "value is empty",
    }  # fmt: skip
    assert expected[bad] in message


@pytest.mark.parametrize(
    ("bad", "why"), [("1e308", "too large to compute with"), ("-0.01", "outside the metric's range [0, inf]")]
)
def test_a_loss_is_at_least_0_and_small_enough_to_compute_with(tmp_path, bad, why):
    lines = _lines(CAPACITY)
    k = _row(lines, _counted)
    message = _refused(tmp_path, CAPACITY, _set(lines, k, "value", bad))
    assert message.startswith(f"line {k + 1}: value {bad!r} for variant ") and why in message, message


def test_a_value_on_a_run_that_is_not_counted_is_refused(tmp_path):
    lines = _lines(GENERALISATION)
    interrupted = _row(lines, lambda row: row["status"] == "interrupted")
    message = _refused(tmp_path, GENERALISATION, _set(lines, interrupted, "value", "91.5"))
    assert message.startswith(f"line {interrupted + 1}: value '91.5'") and "a run that is interrupted" in message
    left_out = _row(lines, lambda row: row["left_out"] == "never reached the level")
    message = _refused(tmp_path, GENERALISATION, _set(lines, left_out, "value", "80"))
    assert message.startswith(f"line {left_out + 1}: value '80'") and "left out (never reached the level)" in message


def test_a_duplicated_row_is_refused_naming_both_lines(tmp_path):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    variant, seed = lines[k].split(",")[:2]
    # The same run pasted again at the end: counted twice, which a verdict would use silently.
    message = _refused(tmp_path, GENERALISATION, [*lines, lines[k]])
    assert message.startswith(f"line {k + 1} and line {len(lines) + 1}: variant {variant} seed {seed} is counted twice")
    # A second completed run of the same variant and seed (another trial number): refused the same way.
    other = _set([*lines, lines[k]], len(lines), "number", "999")
    assert _refused(tmp_path, GENERALISATION, other).startswith(f"line {k + 1} and line {len(lines) + 1}: ")
    # An interrupted run's row twice: the same trial, refused as such.
    interrupted = _row(lines, lambda row: row["status"] == "interrupted")
    message = _refused(tmp_path, GENERALISATION, [*lines, lines[interrupted]])
    assert message.startswith(f"line {interrupted + 1} and line {len(lines) + 1}: trial ")
    assert "appears twice" in message


@pytest.mark.parametrize(
    ("column", "bad", "why"),
    [
        ("seed", "3.5", "is not a whole number >= 0"),
        ("seed", "-1", "is not a whole number >= 0"),
        ("seed", "three", "is not a whole number >= 0"),
        ("status", "complete", "is not a trial status"),
        ("status", "", "is not a trial status"),
        ("left_out", "felt like it", "is not a reason a run is left out"),
        ("variant", "", "the variant is empty"),
        ("top1", "1e999", "is not a top-1 in [0, 100]"),
        ("test_top1", "much", "is not a number"),
    ],
)
def test_a_bad_seed_status_reason_or_metric_is_refused(tmp_path, column, bad, why):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    message = _refused(tmp_path, GENERALISATION, _set(lines, k, column, bad))
    assert message.startswith(f"line {k + 1}: ") and why in message, message
    if bad and column != "variant":
        assert f"{column} {bad!r}" in message


def test_an_unknown_variant_is_refused_where_the_studys_variants_are_given(tmp_path):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    variants = COMMITTED[GENERALISATION][1]
    message = _refused(tmp_path, GENERALISATION, _set(lines, k, "variant", "CCXT"), variants=variants)
    assert message.startswith(f"line {k + 1}: variant 'CCXT' is not one of the study's (")


@pytest.mark.parametrize("column", ["variant", "seed", "status", "value", "left_out"])
def test_a_missing_column_is_refused(tmp_path, column):
    lines = _lines(GENERALISATION)
    renamed = [lines[0], ",".join("other" if c == column else c for c in _header(lines)), *lines[2:]]
    message = _refused(tmp_path, GENERALISATION, renamed)
    assert message.startswith(f"line 2: the header has no column {column!r}")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda lines: [], "line 1: the file is empty"),
        (lambda lines: lines[1:], "line 1: 'variant,seed,status"),
        (lambda lines: ["# metric:", *lines[1:]], "line 1: '# metric:' is not '# metric: <what value is>'"),
        (lambda lines: lines[:1], "line 2: no header"),
        (lambda lines: [*lines[:2], lines[2] + ",extra", *lines[3:]], "line 3: 16 fields where the header has 15"),
        (lambda lines: [lines[0], lines[1] + ",value", *lines[2:]], "line 2: column 'value' appears twice"),
    ],
    ids=["empty", "no-metric-line", "no-metric-words", "no-header", "extra-field", "twice-named-column"],
)
def test_a_file_that_is_not_a_runs_file_is_refused(tmp_path, damage, expected):
    assert _refused(tmp_path, GENERALISATION, damage(_lines(GENERALISATION))).startswith(expected)


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_every_committed_runs_file_validates_and_recomputes_to_its_verdicts(name):
    protocol, variants = COMMITTED[name]
    runs, _ = read_runs(DOCS / f"{name}{RUNS_SUFFIX}", protocol, variants=variants)
    check_runs(runs, protocol.kind, variants=variants)  # the typed table too
    committed = (DOCS / f"{name}{VERDICTS_SUFFIX}").read_text()
    recomputed = recompute(DOCS / f"{name}{RUNS_SUFFIX}", protocol, variants=variants)
    assert [v["verdict"] for v in recomputed] == [v["verdict"] for v in json.loads(committed)]


def test_blank_lines_carry_nothing_and_lines_are_still_counted_in_the_file(tmp_path):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    damaged = _set(lines, k, "value", "inf")
    message = _refused(tmp_path, GENERALISATION, [*damaged[:2], "", *damaged[2:]])
    assert message.startswith(f"line {k + 2}: value 'inf'")


def _table() -> pd.DataFrame:
    rows = [
        {"variant": v, "seed": s, "status": "completed", "value": 90.0 + s + (v == "A"), "left_out": "",
         "params": 1e6, "flops": 1e9, "study": "s", "number": 2 * s + (v == "B")}
        for s in range(5) for v in ("A", "B")
    ]  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("bad", [math.inf, math.nan, 1e308])
def test_a_runs_table_handed_to_the_verdicts_is_checked_too(bad):
    table = _table()
    table.loc[3, "value"] = bad
    with pytest.raises(DataError, match=r"^runs table \(study s trial 3\): value"):
        summarize_runs(table, "accuracy", [("A", ">", "B")], metric="top-1")


def _store_with(tmp_path, study: str, spec: dict, trials: list[tuple[str, int, float]]) -> str:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        store.create_study(study, spec, {"top1": "max"})
        for number, (variant, seed, top1) in enumerate(trials):
            store.finish_trial(
                study, number, status="completed", config={"name": variant, "seed": seed},
                measurement={"params": 1000, "flops": 1e6}, final={"top1": top1, "train_loss": 0.3},
                epochs=[{"epoch": 1, "train_loss": 0.3, "top1": top1}],
            )  # fmt: skip
    return url


def test_a_completed_run_without_a_finite_value_in_the_store_is_left_out_with_its_reason(tmp_path):
    (run,) = plan("cait-class-attention", "tiny", 3, (), "synthetic", None)
    trials = [(v, s, 80.0 + s) for s in range(3) for v in ("6+0", "6+2")]
    trials[1] = ("6+2", 0, math.inf)  # a number the store holds, no run's accuracy
    url = _store_with(tmp_path, "c", run.spec, trials)
    with Store.open(url, create=False) as store:
        runs, _, _ = run_table(store, "c", "accuracy")
        rows, _, _ = summarize(store, "c", "accuracy", [("6+0", ">", "6+2")])
    bad = runs[(runs["variant"] == "6+2") & (runs["seed"] == 0)].iloc[0]
    assert bad["left_out"] == NO_VALUE and math.isnan(bad["value"])
    by_variant = {r.variant: r for r in rows}
    assert by_variant["6+2"].n == 2 and by_variant["6+2"].excluded == 1 and math.isfinite(by_variant["6+2"].mean)


@pytest.mark.parametrize("protocol", ["accuracy", "capacity"])
def test_completed_runs_that_recorded_no_metric_at_all_are_left_out_not_a_crash(tmp_path, protocol):
    """No completed trial of the study holds the metric's column (a store from a sitting that ended before any
    run reported it; the column is then absent, not missing): every run is left out with its reason; before,
    a KeyError. The failure rule reads the same columns and flags nothing it cannot see."""
    (run,) = plan("cait-class-attention", "tiny", 2, (), "synthetic", None)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("c", run.spec, {"top1": "max"})
        for number, (variant, seed) in enumerate((v, s) for s in range(2) for v in ("6+0", "6+2")):
            store.start_trial("c", number, {"name": variant, "seed": seed}, seed=seed)
            store.finish_trial("c", number, status="completed", config={"name": variant, "seed": seed}, seed=seed)
    with Store.open(url, create=False) as store:
        runs, _, _ = run_table(store, "c", protocol)
    assert len(runs) == 4 and (runs["left_out"] == NO_VALUE).all() and runs["value"].isna().all()


def test_a_store_whose_runs_recorded_no_model_config_gets_its_summary_and_an_uncoloured_report(tmp_path):
    """The report is coloured by the model's LayerScale (CaiT) or layout (CoAtNet); runs that recorded no
    model config (an older or hand-made store) refused that colour after the summary was written, which
    left a summary without its report and exit 2. Now the report is drawn uncoloured, beside the summary."""
    (run,) = plan("cait-class-attention", "tiny", 3, (), "synthetic", None)
    trials = [(v, s, 80.0 + s + (v == "6+2")) for s in range(3) for v in run.spec["variants"]]
    url = _store_with(tmp_path, run.spec["name"], run.spec, trials)
    result = CliRunner().invoke(
        main, ["reproduce", "cait-class-attention", "--scale", "tiny", "--seeds", "3", "--dataset", "synthetic",
               "--report-only", "--store", url, "--output", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for suffix in (".md", ".html", ".runs.csv", ".verdicts.json"):
        assert (tmp_path / "out" / f"{run.spec['name']}{suffix}").is_file(), suffix
    assert "coloured by" not in (tmp_path / "out" / f"{run.spec['name']}.html").read_text()


def test_a_report_that_cannot_be_written_leaves_no_summary_behind(tmp_path):
    """The summary is written last: a report that fails (here its name is taken by a folder) leaves no
    summary pointing at a report that is not there, and says so in one line."""
    (run,) = plan("cait-class-attention", "tiny", 3, (), "synthetic", None)
    name = run.spec["name"]
    url = _store_with(tmp_path, name, run.spec, [(v, s, 80.0 + s) for s in range(3) for v in run.spec["variants"]])
    (tmp_path / "out" / f"{name}.html").mkdir(parents=True)
    result = CliRunner().invoke(
        main, ["reproduce", "cait-class-attention", "--scale", "tiny", "--seeds", "3", "--dataset", "synthetic",
               "--report-only", "--store", url, "--output", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    (line,) = [line for line in result.output.splitlines() if line]
    assert line.startswith("Error: cannot write ") and line.endswith(f"{name}.html: Is a directory"), line
    assert not (tmp_path / "out" / f"{name}.md").exists()


def test_reproduce_from_a_store_with_a_run_counted_twice_exits_2_with_one_line(tmp_path):
    (run,) = plan("cait-class-attention", "tiny", 3, (), "synthetic", None)
    name = run.spec["name"]
    trials = [(v, s, 80.0 + s) for s in range(3) for v in run.spec["variants"]]
    trials.append((trials[0][0], 0, 99.0))  # the same variant and seed completed again
    url = _store_with(tmp_path, name, run.spec, trials)
    result = CliRunner().invoke(
        main, ["reproduce", "cait-class-attention", "--scale", "tiny", "--seeds", "3", "--dataset", "synthetic",
               "--report-only", "--store", url, "--output", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line]
    study = re.escape(name)
    assert re.fullmatch(
        rf"Error: runs table \(study {study} trial 0\) and \(study {study} trial {len(trials) - 1}\): "
        rf"variant {re.escape(trials[0][0])} seed 0 is counted twice .*",
        line,
    ), line
    assert "Traceback" not in result.output


@pytest.mark.parametrize("bad", ["99999999999999999999999999", "4294967296", "9" * 5000])
def test_a_seed_beyond_a_trials_seed_is_refused_naming_the_line_not_an_overflow(tmp_path, bad):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    message = _refused(tmp_path, GENERALISATION, _set(lines, k, "seed", bad))
    assert message.startswith(f"line {k + 1}: seed ") and "is not a whole number >= 0" in message, message
    assert "4,294,967,295" in message and len(message) < 600


def test_a_huge_whole_number_in_another_column_is_no_overflow(tmp_path):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    message = _refused(tmp_path, GENERALISATION, _set(lines, k, "number", "99999999999999999999999999"))
    assert message.startswith(f"line {k + 1}: number ") and "is not a trial number" in message, message


def test_an_unknown_variant_is_refused_from_the_protocol_alone(tmp_path):
    """recompute(path, protocol) with no variant list: the registry's protocol knows the study's variants."""
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    message = _refused(tmp_path, GENERALISATION, _set(lines, k, "variant", "d99-unknown"))
    assert message.startswith(f"line {k + 1}: variant 'd99-unknown' is not one of the study's ("), message


def test_an_unknown_variant_is_echoed_capped_and_escaped(tmp_path):
    lines = _lines(GENERALISATION)
    k = _row(lines, _counted)
    name = "\x1b]0;owned\x07" + "v" * 100_000
    message = _refused(tmp_path, GENERALISATION, _set(lines, k, "variant", name))
    assert message.startswith(f"line {k + 1}: variant ") and "is not one of the study's" in message
    assert "\x1b" not in message and "\x07" not in message and len(message) < 600, message[:700]


def test_the_store_path_refuses_a_variant_the_study_does_not_have(tmp_path):
    (run,) = plan("cait-class-attention", "tiny", 3, (), "synthetic", None)
    assert set(run.protocol.variants) == set(run.spec["variants"])
    trials = [(v, s, 80.0 + s) for s in range(3) for v in run.spec["variants"]]
    trials.append(("d99-unknown", 0, 99.0))
    url = _store_with(tmp_path, "c", run.spec, trials)
    with Store.open(url, create=False) as store:
        runs, metric, _ = run_table(store, "c", run.protocol)
    with pytest.raises(DataError, match=r"variant 'd99-unknown' is not one of the study's"):
        summarize_runs(runs, run.protocol, metric=metric)
