"""The runs committed in docs/reproductions are there, complete, and match the study they claim to be.

Every study `archsearch reproduce` offers (the registry) has its `cpu`-scale run on `mnist5k`
committed (summary, report and both figures) and linked from docs/reproductions/README.md. A run
under today's protocol has its per-seed runs file and verdicts file beside it and is linked from the
manual's page on reproductions (docs/reproducing.md) too: its summary's protocol section is the
protocol the code pre-registers today, and every committed verdict is decided again from the runs
file alone (an edited number fails here). A run that predates today's protocol says so at its top,
with the command that re-runs it, and docs/reproductions/README.md lists it as awaiting a re-run. A
study pre-registered and not run yet (issue 48's controls) has nothing committed and the README lists
it as awaiting its first run; one too long for a sitting, run in part, has its store alone committed (the
next ``reproduce`` with it runs the rest) and the README says "in progress: N of M runs", N counted from that
store; once its summary is committed, the README may no longer say either.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from harness.reproduce.records import RUNS_SUFFIX, VERDICTS_SUFFIX, recompute
from harness.reproduce.registry import STUDIES, plan
from harness.reproduce.run import finished_runs
from harness.store import Store
from search_space.validation import load_spec

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproductions"
MANUAL = DOCS.parent / "reproducing.md"
SUPERSEDED = "> **Run under an earlier protocol; awaiting a re-run.**"
FIRST_RUN = "awaiting its first run"
IN_PROGRESS = r"in progress: (?P<done>\d+) of (?P<total>\d+) runs"  # a long study committed between sittings
STORES = DOCS / "stores"


def _committed_runs() -> list[tuple[str, str | None]]:
    return [(s.name, p) for s in STUDIES.values() for p in (s.protocols or (None,))]


def _run(study, protocol):
    (run,) = plan(study, "cpu", 7, (protocol,) if protocol else (), "mnist5k", None)
    return run


@pytest.mark.parametrize(("study", "protocol"), _committed_runs())
def test_every_study_has_its_cpu_run_committed_with_its_command_and_protocol(study, protocol):
    run = _run(study, protocol)
    name = run.spec["name"]
    pending = re.search(rf"`{re.escape(name)}`[^\n]*{FIRST_RUN}", (DOCS / "README.md").read_text())
    started = re.search(rf"`{re.escape(name)}`[^\n]*{IN_PROGRESS}", (DOCS / "README.md").read_text())
    if not (DOCS / f"{name}.md").is_file():  # pre-registered, not finished: no summary, no verdict, and said
        assert not list(DOCS.glob(f"{name}.*")) and not list(DOCS.glob(f"{name}-*.png")), name
        if not (STORES / f"{name}.db").is_file():  # not run yet: nothing of it committed
            assert pending, f"{name}.md is not committed and the README does not list {name} as {FIRST_RUN}"
            return
        # run in part (too long for one sitting): its store alone, and the README says how far it got
        assert not pending and started, f"stores/{name}.db is committed: the README must say it is in progress"
        done, total = _finished_in_committed_store(run)
        assert (int(started["done"]), int(started["total"])) == (done, total), (started.group(0), done, total)
        assert done < total, f"every run of {name} has finished: write its summary (reproduce --report-only)"
        return
    assert not pending and not started, f"{name}.md is committed: the README still lists it as not run"
    for suffix in (".md", ".html", "-variants.png", "-loss-vs-accuracy.png"):
        assert (DOCS / f"{name}{suffix}").is_file(), f"{name}{suffix} is not committed"
    summary = (DOCS / f"{name}.md").read_text()
    command = re.search(r"^Command: `(.*)`$", summary, re.MULTILINE).group(1)
    assert command.startswith(f"archsearch reproduce {study} --scale cpu --seeds ")
    assert command.endswith("--output docs/reproductions") and "--dataset mnist5k" in command
    if protocol:
        assert f"--protocol {protocol}" in command
    readme = (DOCS / "README.md").read_text()
    assert f"[md]({name}.md)" in readme
    if (DOCS / f"{name}{RUNS_SUFFIX}").is_file():  # under today's protocol: all of it, recomputable
        assert "\n".join(run.protocol.markdown()) in summary, f"{name}.md was run under another protocol"
        assert (DOCS / f"{name}{VERDICTS_SUFFIX}").is_file()
        assert SUPERSEDED not in summary
        assert f"](reproductions/{name}.md)" in MANUAL.read_text(), f"docs/reproducing.md does not link {name}.md"
    else:  # an earlier protocol's run: marked, with the command that re-runs it, and listed as such
        assert summary.startswith(f"# {name}\n\n{SUPERSEDED}"), f"{name}.md predates the protocol unmarked"
        assert f"archsearch reproduce {study} --scale cpu" in summary.split("\n\n")[1]
        assert re.search(rf"awaiting a re-run[^\n]*{re.escape(name)}|{re.escape(name)}[^\n]*awaiting a re-run", readme)


def _finished_in_committed_store(run) -> tuple[int, int]:
    """The runs of ``run`` its committed store holds finished (what the next ``reproduce`` with that store skips,
    as ``--plan --store`` counts them), and its planned runs."""
    name = run.spec["name"]
    with Store.open(f"sqlite:///{STORES / f'{name}.db'}", create=False, read_only=True) as store:
        done = set().union(*(finished_runs(store, load_spec(part, check_paths=False)) for part in run.run_specs))
    return len(done), run.spec["search"]["n_trials"]


def _committed_verdicts() -> list[Path]:
    return sorted(DOCS.glob(f"*{VERDICTS_SUFFIX}"))


def _protocol_of(summary_name: str):
    for study, protocol in _committed_runs():
        run = _run(study, protocol)
        if run.spec["name"] == summary_name:
            return run.protocol
    raise AssertionError(f"{summary_name}: no study of the registry writes this summary")


def _same(recomputed, committed, where: str = "") -> None:
    if isinstance(committed, float) or isinstance(recomputed, float):
        assert committed is not None and recomputed is not None, where
        assert math.isclose(recomputed, committed, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {recomputed} != {committed}"
    elif isinstance(committed, list):
        assert isinstance(recomputed, list) and len(recomputed) == len(committed), where
        for index, (r, c) in enumerate(zip(recomputed, committed, strict=True)):
            _same(r, c, f"{where}[{index}]")
    elif isinstance(committed, dict):
        assert isinstance(recomputed, dict) and set(recomputed) == set(committed), where
        for key in committed:
            _same(recomputed[key], committed[key], f"{where}.{key}")
    else:
        assert recomputed == committed, f"{where}: {recomputed!r} != {committed!r}"


@pytest.mark.parametrize("path", _committed_verdicts(), ids=lambda p: p.name)
def test_every_committed_verdict_recomputes_from_its_runs_file(path):
    name = path.name[: -len(VERDICTS_SUFFIX)]
    protocol = _protocol_of(name)
    committed = json.loads(path.read_text())
    assert [c["claim"] for c in committed] == [" ".join(c) for c in protocol.claims]
    assert all(c["margin"] in (None, protocol.margin, protocol.large_margin) for c in committed)  # no deviation
    _same(recompute(DOCS / f"{name}{RUNS_SUFFIX}", protocol), committed, name)


@pytest.mark.parametrize("path", _committed_verdicts(), ids=lambda p: p.name)
def test_the_recomputation_catches_an_edited_committed_number(path, tmp_path):
    """The check above is not vacuous: in each committed runs file, one value of a variant that a
    claim compares, on a seed its counterpart also has, edited, changes the verdicts file."""
    name = path.name[: -len(VERDICTS_SUFFIX)]
    protocol = _protocol_of(name)
    claimed = {side for a, _, b in protocol.claims for side in (a, b)}  # a variant some claim compares
    lines = (DOCS / f"{name}{RUNS_SUFFIX}").read_text().splitlines()
    header = lines[1].split(",")
    column, seed, variant = header.index("value"), header.index("seed"), header.index("variant")
    valued = [(k, line.split(",")) for k, line in enumerate(lines[2:], start=2) if line.split(",")[column]]
    shared = [row[seed] for _, row in valued]  # a seed more than one variant has: it enters a paired claim
    edited = next(k for k, row in valued if row[variant] in claimed and shared.count(row[seed]) > 1)
    row = lines[edited].split(",")
    row[column] = repr(float(row[column]) + 2.5)
    lines[edited] = ",".join(row)
    (tmp_path / f"{name}{RUNS_SUFFIX}").write_text("\n".join(lines) + "\n")
    with pytest.raises(AssertionError):
        _same(recompute(tmp_path / f"{name}{RUNS_SUFFIX}", protocol), json.loads(path.read_text()))


@pytest.mark.parametrize("path", _committed_verdicts(), ids=lambda p: p.name)
def test_every_committed_test_split_table_recomputes_from_its_runs_file(path):
    """The summary's exploratory pairs on the test split are the runs file's test numbers, every row,
    with the seed x image bootstrap recomputed from the predictions sidecar where there is one (and,
    for runs from before predictions were kept, the words saying there are none)."""
    from harness.reproduce.records import read_runs, recompute_test_pairs
    from harness.reproduce.summary import _test_split_pairs

    name = path.name[: -len(VERDICTS_SUFFIX)]
    protocol = _protocol_of(name)
    runs, _ = read_runs(DOCS / f"{name}{RUNS_SUFFIX}")
    table = _test_split_pairs(recompute_test_pairs(DOCS / f"{name}{RUNS_SUFFIX}", protocol), protocol.kind)
    summary = (DOCS / f"{name}.md").read_text()
    assert all(line in summary for line in table if line), name
    if protocol.kind != "accuracy" and "test_top1" in runs and runs["test_top1"].notna().any():
        assert table, f"{name}: its runs have test numbers, so its summary shows the pairs on them"


PRESETS = Path(__file__).resolve().parent.parent / "search_space" / "presets"


@pytest.mark.parametrize(("study", "protocol"), _committed_runs())
def test_no_committed_run_was_affected_by_dropped_fixed_parameters(study, protocol):
    """Issue 37: a search once dropped every fixed or bare-value parameter before its trials ran.
    The committed runs were not affected: their specs (under today's protocol, which the test above
    ties to the committed summary) search ``variant`` and ``seed`` only, both choices, and a
    variant's model fields are applied by the variant itself, a path that never lost a value."""
    from search_space.sampling import build_trial_config, fixed_params
    from search_space.spec import ChoiceDomain, SearchSpec

    run = _run(study, protocol)
    spec = SearchSpec.model_validate(run.spec)
    assert fixed_params(spec) == {}
    assert set(spec.params) == {"variant", "seed"}
    assert all(isinstance(domain, ChoiceDomain) for domain in spec.params.values())
    for variant, overrides in spec.variants.items():  # each variant trains the model it names
        model = build_trial_config(spec, {"variant": variant, "seed": 0})["model"]
        for field, value in overrides.items():
            assert model[field] == (list(value) if isinstance(value, tuple) else value), (variant, field)


def test_which_presets_fix_a_parameter_is_known():
    """The shipped presets with a fixed or bare-value parameter (none today): they ran with the base
    model's value before the fix of issue 37, so a preset that gains one is listed here on purpose."""
    import yaml

    from search_space.sampling import fixed_params
    from search_space.spec import SearchSpec

    fixing = {}
    for path in sorted(PRESETS.glob("*.yaml")):
        spec = SearchSpec.model_validate(yaml.safe_load(path.read_text()))
        if fixed_params(spec):
            fixing[path.name] = sorted(fixed_params(spec))
    assert fixing == {}


@pytest.mark.parametrize("path", _committed_verdicts(), ids=lambda p: p.name)
def test_every_committed_summary_says_its_training_stage_beside_its_verdicts(path):
    """Issue 59 (7): the optimiser steps and the final test top-1 the variants end at, recomputed from the
    runs file, stand in the summary after the verdicts; a CaiT study whose models end at 28-74% says that
    its verdicts are about early training."""
    from harness.reproduce.analysis import summarize_runs
    from harness.reproduce.records import read_runs
    from harness.reproduce.summary import _training_stage

    name = path.name[: -len(VERDICTS_SUFFIX)]
    protocol = _protocol_of(name)
    runs, metric = read_runs(DOCS / f"{name}{RUNS_SUFFIX}", protocol)
    rows, _, _ = summarize_runs(
        runs, protocol, metric=metric, margin=protocol.margin, large_margin=protocol.large_margin
    )
    (_, line) = _training_stage(rows, protocol)
    summary = (DOCS / f"{name}.md").read_text()
    assert line in summary and summary.index(line) > summary.index("| paper's claim |"), name
    if name.startswith("cait-"):
        assert "early training" in line, name
