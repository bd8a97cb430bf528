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
from pathlib import Path

from test_search_quality import EPOCHS, _unseen_table

from benchmarks import search_quality
from benchmarks.front_quality import TrueFront
from benchmarks.table import load_table
from harness.search.engine import build_engine
from harness.search.result_keys import NUMBER_KEY, STATUS_KEY, split_tune_config
from harness.search.session import SearchSession
from harness.search.simulate import SimulatedClock, simulate
from harness.store import Store
from search_space.spec import SearchSpec
from trials.status import TrialStatus

ROOT = Path(__file__).parents[1]


def _engine(tmp_path: Path, table, spec: SearchSpec, clock: SimulatedClock):
    url = f"sqlite:///{tmp_path / 'replay.db'}"
    with Store.open(url) as store:
        store.create_study(spec.name, spec.model_dump(mode="json"), dict(spec.objectives))
    session = SearchSession(spec.name, clock=clock)
    engine = build_engine(
        spec,
        url,
        spec.name,
        session,
        searcher_factory=lambda *args: search_quality.TableSearch(*args, table=table),
        signals=False,
        progress=False,
        quiet=True,
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
