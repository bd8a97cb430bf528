"""The replay is the engine under a simulated clock (issue 43 item 5): ``benchmarks.search_quality``
drives the hooks ``harness.search.engine.build_engine`` builds for a search, through
``harness.search.simulate``; it wires none of them itself.

* A stop rule fires on the simulated clock: ``search.stop.max_hours`` of one simulated hour ends a
  replay whose epochs take 10 simulated minutes, after real seconds.
* The store writer records each trial as it ends (completed or pruned), as in a search.
* ``benchmarks/search_quality.py`` builds no sampler, scheduler, rung rule or initial design of its own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import optuna
from test_search_quality import EPOCHS, _unseen_table

from benchmarks import search_quality
from benchmarks.front_quality import TrueFront
from benchmarks.table import load_table
from harness.search.engine import build_engine
from harness.search.propose.searcher import STATUS_ATTR
from harness.search.result_keys import NUMBER_KEY, STATUS_KEY, split_tune_config
from harness.search.session import SearchSession
from harness.search.simulate import SimulatedClock, simulate
from harness.store import Store
from search_space.spec import SearchSpec
from trials.status import TrialStatus

ROOT = Path(__file__).parents[1]


def _engine(tmp_path: Path, table, spec: SearchSpec, clock: SimulatedClock, name: str | None = None, quiet=True):
    """The engine of ``spec`` run as study ``name`` (the spec's name by default); ``quiet=False``: with
    its progress line and every line the hooks print."""
    url, name = f"sqlite:///{tmp_path / 'replay.db'}", name or spec.name
    with Store.open(url) as store:
        store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives))
    session = SearchSession(name, clock=clock)
    engine = build_engine(
        spec,
        url,
        name,
        session,
        searcher_factory=lambda *args: search_quality.TableSearch(*args, table=table),
        signals=False,
        progress=not quiet,
        quiet=quiet,
        build=search_quality.table_trial_config,
    )
    return url, session, engine


def _evaluate(table, seconds: float | None = None):
    def evaluate(config, epoch):
        number, _, params = split_tune_config(config)
        index = table.index_of(params)
        result = {"flops": float(table.cost["flops"][index]), "top1": float(table.top1[index, epoch - 1]),
                  NUMBER_KEY: number}  # fmt: skip
        last = epoch == table.epochs
        if last:
            result[STATUS_KEY] = TrialStatus.COMPLETED
        return result, seconds if seconds is not None else float(table.epoch_s[index, epoch - 1]), last

    return evaluate


def test_max_hours_ends_a_replay_on_the_simulated_clock(tmp_path):
    table = load_table(_unseen_table(tmp_path / "t.csv.gz"))
    spec = search_quality.table_spec(table, "timed", "random", 0, 2, {"top1": "max", "flops": "min"}, 0)
    settings = {**spec.search.model_dump(mode="json"), "stop": {"max_hours": 1}}
    spec = SearchSpec.model_validate({**spec.model_dump(mode="json"), "search": settings})
    clock = SimulatedClock()
    _, session, engine = _engine(tmp_path, table, spec, clock)
    run = simulate(engine, _evaluate(table, seconds=600.0), workers=2, clock=clock)
    assert run.stopped_by == "stoppers" and "max_hours" in session.rule_reason
    assert 3600 < run.seconds <= 3600 + 600  # the first look past one simulated hour
    assert run.epochs < len(table) * EPOCHS


def test_the_store_writer_records_each_trial_of_a_replay(tmp_path):
    table = load_table(_unseen_table(tmp_path / "t.csv.gz"))
    objectives = {"top1": "max", "flops": "min"}
    # plain MO-ASHA: on this table epoch 1 ranks poorly, so behind the rank gate (the default) nothing is pruned
    spec = search_quality.table_spec(table, "recorded", "random", 1, 2, objectives, 0, "pareto-ungated")
    clock = SimulatedClock()
    url, session, engine = _engine(tmp_path, table, spec, clock)
    run = simulate(engine, _evaluate(table), workers=2, clock=clock)
    assert run.stopped_by == "searcher" and session.trials_ended == len(run.ended)
    completed = sum(1 for _, _, stopped in run.ended if not stopped)
    pruned = len(run.ended) - completed
    assert pruned > 0  # MO-ASHA (the scheduler a search with early_stopping gets) stopped some
    with Store.open(url, create=False) as store:
        counts = store.counts(spec.name, epochs=False)
    assert counts[TrialStatus.COMPLETED] == completed and counts[TrialStatus.PRUNED] == pruned
    assert counts[TrialStatus.RUNNING] == 0


def test_every_line_of_a_search_names_the_study_not_the_spec(tmp_path, capsys):
    """Issue 61: ``run_search(spec, name="my-search")`` printed ``[quickstart] initial spread`` (the spec's
    name) before ``[my-search] starting``. Every line a hook prints, the initial spread, single-mode ASHA's
    warning, the progress lines, a stop rule's, and a warm start's, names the study."""
    table = load_table(_unseen_table(tmp_path / "t.csv.gz"))
    spec = search_quality.table_spec(table, "spec-name", "random", 0, 2, {"top1": "max", "flops": "min"}, 3, "single")
    settings = {**spec.search.model_dump(mode="json"), "stop": {"max_hours": 0.01}}
    spec = SearchSpec.model_validate({**spec.model_dump(mode="json"), "search": settings})
    clock = SimulatedClock()
    url, _, engine = _engine(tmp_path, table, spec, clock, name="study-name", quiet=False)
    simulate(engine, _evaluate(table, seconds=60.0), workers=2, clock=clock)
    warm = {**settings, "warm_start": {"study": "study-name"}, "initial_spread": None}
    warm_spec = SearchSpec.model_validate({**spec.model_dump(mode="json"), "search": warm})
    with Store.open(url) as store:
        store.create_study("warm-name", warm_spec.model_dump(mode="json"), dict(spec.objectives))
    build_engine(warm_spec, url, "warm-name", SearchSession("warm-name"), signals=False, progress=False,
                 searcher_factory=lambda *args: search_quality.TableSearch(*args, table=table),
                 build=search_quality.table_trial_config)  # fmt: skip
    optuna_log = re.compile(r"^\[[DIWEC] \d{4}-")  # Optuna's own logging ("A new study created in memory")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not optuna_log.match(line)]
    said = {kind for kind in ("initial spread", "warning: early_stopping", "starting", "done ", "stopping", "warm")
            if any(kind in line for line in lines)}  # fmt: skip
    assert len(said) == 6, f"the hooks said only {said}: the test no longer sees every line"
    assert "spec-name" not in "\n".join(lines)
    odd = [line for line in lines if not line.startswith(("[study-name] ", "[warm-name] "))]
    assert not odd


def test_the_benchmark_wires_no_hook_of_its_own():
    tree = ast.parse((ROOT / "benchmarks" / "search_quality.py").read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not {"RungDecider", "ParetoASHA", "make_scheduler", "make_sampler", "heapq"} & (names | attributes)
    assert "apply" not in attributes  # initial_design.apply / warm_start.apply: the engine's
    assert "build_engine" in names and "simulate" in names


def test_the_two_benchmark_modules_do_not_import_each_other():
    syne = ast.parse((ROOT / "benchmarks" / "search_quality_syne.py").read_text())
    imported = {node.module for node in ast.walk(syne) if isinstance(node, ast.ImportFrom)}
    assert "benchmarks.search_quality" not in imported
    assert TrueFront is search_quality.TrueFront  # both read the measures from benchmarks.front_quality


def test_a_multi_objective_tpe_search_goes_on_after_early_stopping_prunes(tmp_path):
    """Optuna's TPE ranks PRUNED trials by their last intermediate value, asking a multi-objective study for
    its single direction, which raises: every proposal after the first pruned trial failed. A
    multi-objective study's curves now reach Optuna only when a trial completes, never for a pruned one."""
    table = load_table(_unseen_table(tmp_path / "t.csv.gz"))
    objectives = {"top1": "max", "flops": "min"}
    spec = search_quality.table_spec(table, "tpe-pruned", "tpe", 3, 2, objectives, 0, "pareto-ungated")
    clock = SimulatedClock()
    _, _, engine = _engine(tmp_path, table, spec, clock)
    run = simulate(engine, _evaluate(table), workers=2, clock=clock)
    assert run.stopped_by == "searcher"
    assert any(stopped for _, _, stopped in run.ended)  # pruned trials, and TPE proposed after them
    trials = engine.searcher.study.trials  # a replay keeps Optuna in memory
    states = optuna.trial.TrialState
    pruned = [t for t in trials if t.state == states.PRUNED and t.user_attrs.get(STATUS_ATTR) == "pruned"]
    complete = [t for t in trials if t.user_attrs.get(STATUS_ATTR) == "completed"]  # duplicates: no curve
    assert pruned and all(not t.intermediate_values for t in pruned)
    # a pruned configuration run again resumes after the epoch it was pruned at: its curve is the epochs it ran
    for t in complete:
        first = min(t.intermediate_values) if "retry_of" in t.user_attrs else 1
        assert first >= 1 + ("retry_of" in t.user_attrs)
        assert sorted(t.intermediate_values) == list(range(first, table.epochs + 1))
    assert complete
