"""``archsearch reproduce --plan`` shows what will run (issue 45 item 6): seeds per variant, the
honest range in the header, no bare ``None``, the scale (the default said so); ``--seeds`` never
lowers a pre-registered count and says why; ``--only`` runs a subset as its own grid study whose
verdicts cover the claims both of whose sides ran, Holm still counting the registered family."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.reproduce import planning
from harness.reproduce.analysis import summarize_runs
from harness.reproduce.records import recompute, write_records
from harness.reproduce.registry import plan
from harness.reproduce.studies import select_variants, subset_name, variant_config
from harness.store import mask_url
from search_space.sampling import grid_points
from search_space.validation import load_spec
from trials.status import TrialStatus

STEP_TIMES = planning._step_times  # the real timer, before the autouse fixture stands in for it


@pytest.fixture(autouse=True)
def _untimed(monkeypatch):
    """The plan times a few training steps per variant; the tests read its shape, not the time."""
    steps = lambda configs, batch: {name: planning.Timing((0.01,)) for name in configs}  # noqa: E731
    monkeypatch.setattr(planning, "_step_times", steps)


def _plan(*args: str) -> str:
    result = CliRunner().invoke(main, ["reproduce", *args, "--plan"])
    assert result.exit_code == 0, result.output
    return result.output


def _table(output: str) -> dict[str, list[str]]:
    """variant -> its row's cells, from the first plan table in ``output``."""
    rows, header = {}, None
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == "variant":
            if header:
                break
            header = cells
        elif header and len(cells) == len(header) and not line.startswith("-"):
            rows[cells[0]] = cells
    return rows


def test_the_plan_shows_each_variants_seeds_and_the_header_says_the_range():
    output = _plan("coatnet-layouts", "--scale", "cpu")
    first = output.splitlines()[0]
    assert "7-30 seeds per variant (CCTT, CTTT 30)" in first and "81 runs" in first and "scale cpu" in first
    assert output.splitlines()[1].split()[:3] == ["variant", "seeds", "params"]
    rows = _table(output)
    assert rows["CCTT"][1] == "30" and rows["CTTT"][1] == "30" and rows["VIT-REL"][1] == "7"
    assert re.fullmatch(r"\d{3},\d{3}", rows["CTTT"][2])  # params in full, with separators
    capacity = next(line for line in output.splitlines() if line.startswith("coatnet-layouts-capacity"))
    assert "7 seeds per variant" in capacity and "metric: final training loss" in capacity
    assert "None" not in output and "level" not in capacity
    assert "note: CCTT and CTTT run 30 seeds each, pre-registered" in output


def test_no_bare_none_at_a_scale_that_estimates_no_time():
    output = _plan("cait-class-attention", "--scale", "paper")
    assert "None" not in output
    assert "estimated wall time here: not estimated at this scale" in output


def test_the_default_scale_is_named_in_the_help_and_in_the_plans_header():
    help_text = " ".join(CliRunner().invoke(main, ["reproduce", "--help"]).output.split())
    assert "[default: tiny]" in help_text and "decides nothing (the default" in help_text
    output = _plan("cait-depth")
    assert "scale tiny (the default, no --scale given): a smoke run that decides nothing" in output.splitlines()[0]
    assert "scale tiny (the default" not in _plan("cait-depth", "--scale", "tiny")


def test_seeds_set_the_other_variants_and_never_lower_a_pre_registered_count_saying_why():
    output = _plan("coatnet-layouts", "--scale", "cpu", "--protocol", "generalisation", "--seeds", "3")
    rows = _table(output)
    assert [rows[v][1] for v in ("VIT-REL", "CCCC", "CCCT", "CCTT", "CTTT")] == ["3", "3", "3", "30", "30"]
    assert "3-30 seeds per variant (CCTT, CTTT 30), 69 runs" in output.splitlines()[0]
    notes = [line for line in output.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "never lowers a pre-registered count" in notes[0] and "under-powered" in notes[0]
    assert "--only CCCC,CCCT,VIT-REL" in notes[0]  # the way to run without the pair
    report = json.loads(
        CliRunner()
        .invoke(main, ["reproduce", "coatnet-layouts", "--scale", "cpu", "--protocol", "generalisation",
                       "--seeds", "3", "--plan", "--format", "json"])
        .output
    )  # fmt: skip
    assert {v["name"]: v["seeds"] for v in report["variants"]} == {
        "VIT-REL": 3, "CCCC": 3, "CCCT": 3, "CCTT": 30, "CTTT": 30,
    }  # fmt: skip
    assert report["scale"] == "cpu" and report["studies"][0]["runs"] == 69
    # At as many seeds as the pair's or more, every variant runs them: nothing to say.
    many = _plan("coatnet-layouts", "--scale", "cpu", "--protocol", "generalisation", "--seeds", "31")
    assert "31 seeds per variant" in many and "note:" not in many


def test_only_plans_a_subset_as_its_own_study_and_names_the_claims_it_runs():
    output = _plan("coatnet-layouts", "--scale", "cpu", "--protocol", "generalisation", "--only", "CTTT,CCTT")
    assert set(_table(output)) == {"CCTT", "CTTT"}
    assert output.splitlines()[0].startswith("coatnet-layouts-generalisation-cpu-mnist5k-only-CCTT_CTTT:")
    assert "claims run: CCTT > CTTT\n" in output
    assert "Holm's correction still counts all 5" in output
    # The registered parts of the named pair are the subset: kept under their names (shared with a full run).
    assert "part coatnet-layouts-generalisation-cpu-mnist5k-part1: 30 runs" in output
    assert "part3" not in output
    (run,) = plan("coatnet-layouts", "cpu", 7, ("generalisation",), "mnist5k", None, ("CCTT", "CTTT"))
    assert len(grid_points(load_spec(run.spec))) == run.spec["search"]["n_trials"] == 60


def test_only_refuses_an_unknown_variant_naming_it_and_creates_nothing(tmp_path: Path):
    runner = CliRunner()
    for args in (["--plan"], ["--store", f"sqlite:///{tmp_path / 'store.db'}", "--output", str(tmp_path / "out")]):
        result = runner.invoke(main, ["reproduce", "cait-depth", "--scale", "cpu", "--only", "d12-none,d99", *args])
        assert result.exit_code == 2, result.output
        assert "--only d99: " in result.output and "has no variant 'd99'" in result.output
        assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "out").exists()


def test_a_subset_name_is_a_valid_study_name_however_the_variants_are_named():
    from harness.search.cluster.ray_setup import check_study_name

    assert subset_name("cait-class-attention", ["6+0 cls@5", "6+2"]) == "cait-class-attention-only-6-0-cls-5_6-2"
    long = subset_name("cait-residual-schemes-cpu-mnist5k", [f"d12-scheme-number-{i}+ln" for i in range(12)])
    assert len(long) <= 128
    for name in (long, subset_name("x", ["6+0 cls@5"])):
        check_study_name(name)


def _runs(protocol, values: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {"variant": variant, "seed": seed, "status": TrialStatus.COMPLETED.value, "value": value, "left_out": "",
         "params": 1000.0, "flops": 1e6}
        for variant, per_seed in values.items()
        for seed, value in enumerate(per_seed)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_a_subsets_verdicts_cover_the_claims_both_of_whose_sides_ran_and_holm_counts_the_family(tmp_path: Path):
    (whole,) = plan("coatnet-layouts", "tiny", 5, ("generalisation",), "synthetic", None)
    run = select_variants(whole, ("CCTT", "CTTT"))
    assert run.protocol.claims == whole.protocol.claims  # the registered family, unchanged
    values = {"CCTT": [90.0, 91.0, 92.5, 90.5, 91.2], "CTTT": [88.0, 88.4, 89.0, 88.1, 88.9]}
    runs = _runs(run.protocol, values)
    _, verdicts, _ = summarize_runs(runs, run.protocol, metric="top-1")
    assert [v["claim"] for v in verdicts] == ["CCTT > CTTT"]
    _, alone, _ = summarize_runs(runs, whole.protocol, claims=[("CCTT", ">", "CTTT")], metric="top-1")
    assert verdicts[0]["p_holm"] == pytest.approx(min(1.0, 5 * alone[0]["p_holm"]))  # Holm over all 5
    write_records(tmp_path, run.spec["name"], runs, verdicts, "top-1")
    assert [v["claim"] for v in recompute(tmp_path / f"{run.spec['name']}.runs.csv", run.protocol)] == ["CCTT > CTTT"]
    assert "Holm's correction still counts all 5" in run.protocol.selection_note()


@pytest.mark.parametrize("study", sorted(__import__("harness.reproduce.registry", fromlist=["STUDIES"]).STUDIES))
def test_every_study_plans_at_the_tiny_scale_and_every_variant_builds(study):
    """Each study's own spec, variants and claims, without training: the end-to-end path they all share is
    run once (tests/test_reproduce.py), so each study's part of it is checked here."""
    from harness.reproduce import studies
    from search_space.validation import load_spec
    from trials.models import build_model

    for run in plan(study, "tiny", 2, (), "mnist5k", None):
        spec = load_spec(run.spec, check_paths=False)
        assert spec.search.n_trials == len(run.spec["variants"]) * 2 and run.protocol.claims
        named = {part.strip() for claim in run.protocol.claims for side in (claim[0], claim[2])
                 for part in side.split(" - ")}  # fmt: skip
        assert named <= set(run.spec["variants"]), study
        for variant in run.spec["variants"]:
            build_model(studies.variant_config(run, variant))


def test_the_plan_shows_each_estimate_with_the_range_of_the_steps_it_timed(monkeypatch):
    """Issue 61 (5): the estimate swung 2x between two plans with no range shown. Each run_s and the wall
    time carry the estimate at the fastest and the slowest timed step, in the table and in the JSON."""
    spread = lambda configs, batch: {name: planning.Timing((0.01, 0.02, 0.04)) for name in configs}  # noqa: E731
    monkeypatch.setattr(planning, "_step_times", spread)
    output = _plan("cait-depth", "--scale", "cpu")
    rows = _table(output)
    for cells in rows.values():
        run_s = re.fullmatch(r"([\d,]+) \(([\d,]+)-([\d,]+)\)", cells[-1])
        assert run_s, cells
        middle, low, high = (int(x.replace(",", "")) for x in run_s.groups())
        assert low < middle < high
    wall = re.search(r"estimated wall time here: ([\d,]+) min \(([\d,]+)-([\d,]+)\)", output)
    assert wall, output
    middle, low, high = (int(x.replace(",", "")) for x in wall.groups())
    assert low < middle < high
    report = json.loads(CliRunner().invoke(main, ["reproduce", "cait-depth", "--scale", "cpu", "--plan",
                                                  "--format", "json"]).output)  # fmt: skip
    (study,) = report["studies"]
    for variant in study["variants"]:
        low_s, high_s = variant["estimated_run_s_range"]
        assert low_s < variant["estimated_run_s"] < high_s
        # The median step (0.02 s) is twice the fastest: the run's time less its fixed overhead doubles too.
        overhead = planning.RUN_OVERHEAD_S
        assert variant["estimated_run_s"] - overhead == pytest.approx(2 * (low_s - overhead), rel=0.01)
    low_w, high_w = study["estimated_wall_time_s_range"]
    assert low_w < study["estimated_wall_time_s"] < high_w
    assert report["estimated_wall_time_s_range"] == study["estimated_wall_time_s_range"]
    assert study["estimated_wall_time_s"] >= max(v["estimated_run_s"] for v in study["variants"]) - 0.5


def test_the_wall_time_is_never_less_than_one_run():
    """Runs share the ``concurrency`` slots, but one run takes its own time however many slots stand idle: two
    runs of 100 s at concurrency 4 take 100 s (the plan said 50), eight take 200 s."""
    assert planning.wall_seconds(200.0, 100.0, 4) == 100
    assert planning.wall_seconds(800.0, 100.0, 4) == 200
    assert planning.wall_seconds(300.0, 250.0, 2) == 250  # one long run and a short one


def test_the_steps_are_timed_interleaved_across_variants_a_few_each(monkeypatch):
    """The real timer: every variant gets TIMED_ROUNDS steps after a warm-up, one round of all variants at a
    time (so a neighbour's burst slows them alike), and each range holds its median."""
    (run,) = plan("cait-depth", "tiny", 1, (), "mnist5k", None)
    configs = {name: planning.variant_config(run, name) for name in list(run.spec["variants"])[:2]}
    order: list[int] = []
    step = planning.TrainingStepper.step
    monkeypatch.setattr(planning.TrainingStepper, "step", lambda self: order.append(id(self)) or step(self))
    times = STEP_TIMES(configs, 4)
    assert order[0] != order[1] and order == order[:2] * (planning.TIMED_ROUNDS + 1)
    assert set(times) == set(configs)
    for name, measured in times.items():
        assert len(measured.seconds) == planning.TIMED_ROUNDS >= 3, name
        assert 0 < measured.spread[0] <= measured.median <= measured.spread[1]


def test_the_plan_shows_each_variants_depths_and_widths_as_the_runs_build_them(monkeypatch):
    """Issue 59 (8): size-matching changes widths and block counts between layouts, and --plan now shows them:
    CoAtNet's depths and widths per stage S0..S4, CaiT's self- and class-attention blocks and its width."""
    monkeypatch.setattr(planning, "_step_times", lambda configs, batch: {})
    for study in ("coatnet-layouts", "cait-class-attention-blocks"):
        (run, *_) = plan(study, "cpu", 7, (), "mnist5k", None)
        rows = _table(_plan(study, "--scale", "cpu"))
        report = json.loads(CliRunner().invoke(main, ["reproduce", study, "--scale", "cpu", "--plan", "--format",
                                                      "json"]).output)  # fmt: skip
        planned = {v["name"]: v for v in report["studies"][0]["variants"]}
        for variant in run.spec["variants"]:
            config = variant_config(run, variant)
            if hasattr(config, "dims"):
                depths, widths = list(config.depths), list(config.dims)
            else:
                depths, widths = [config.depth, config.ca_depth], [config.embed_dim]
            assert planned[variant]["depths"] == depths and planned[variant]["widths"] == widths, variant
            cells = rows[variant]
            assert "/".join(map(str, depths)) in cells and "/".join(map(str, widths)) in cells, (variant, cells)
    assert rows["6+2"][4:6] == ["6/2", "64"] and rows["8+0"][4:6] == ["8/0", "64"]


def _stored_runs(url: str, spec: dict, runs: dict[str, list[tuple[str, int, str]]]) -> None:
    """A store holding ``spec``'s grid study (and continuations) with these runs, each ``(variant, seed,
    status)``, written as the search's store writer writes them (config name and seed)."""
    from harness.store import Store

    loaded = load_spec(spec, check_paths=False)
    with Store.open(url) as store:
        for name, trials in runs.items():
            store.create_study(name, loaded.model_dump(mode="json"), dict(loaded.objectives))
            for number, (variant, seed, status) in enumerate(trials):
                config = {"name": variant, "seed": seed}
                store.start_trial(name, number, config, seed=seed)
                if status != "running":
                    store.finish_trial(name, number, status=status, config=config, seed=seed)


def test_the_plan_counts_the_runs_a_store_already_holds_and_the_time_the_rest_needs(store_url):
    """A reproduction too long for one sitting (cait-width-init: about 6 hours here) is run in several: --plan
    with its store says how many runs have finished (the continuations pooled; a diverged or failed run is
    finished, an interrupted one is not: the next `reproduce` runs it again) and how long the rest takes."""
    (run,) = plan("cait-depth", "tiny", 2, (), "synthetic", None)
    name, (first, second, *_) = run.spec["name"], list(run.spec["variants"])
    _stored_runs(store_url, run.spec, {
        name: [(first, 0, "completed"), (first, 1, "diverged"), (second, 0, "interrupted"), (second, 1, "running")],
        f"{name}.2": [(second, 0, "failed")],
    })  # fmt: skip
    if store_url.startswith("postgresql"):  # a password in the URL (trust auth ignores it) is never printed
        store_url = store_url.replace("postgres@", "postgres:s3cret-pw@")
    args = ["cait-depth", "--scale", "tiny", "--seeds", "2", "--dataset", "synthetic", "--store", store_url]
    output = _plan(*args)
    total = run.spec["search"]["n_trials"]
    assert f": 3 of {total} runs have finished; the next `reproduce` with it runs the other {total - 3}" in output
    rows = _table(output)
    assert rows[first][2] == "2" and rows[second][2] == "1" and {rows[v][2] for v in rows} - {"2", "1"} == {"0"}
    report = json.loads(CliRunner().invoke(main, ["reproduce", *args, "--plan", "--format", "json"]).output)
    (study,) = report["studies"]
    assert study["finished_runs"] == 3
    left = sum(v["estimated_run_s"] * (v["seeds"] - v["finished"]) for v in study["variants"])
    assert study["remaining_wall_time_s"] == round(left / run.spec["search"]["concurrency"])
    assert study["remaining_wall_time_s"] < study["estimated_wall_time_s"]
    assert f"in the store {mask_url(store_url)}: 3 of" in output and "s3cret-pw" not in output


def test_the_plan_says_when_every_run_has_finished(tmp_path: Path):
    (run,) = plan("cait-depth", "tiny", 1, (), "synthetic", None)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _stored_runs(url, run.spec, {run.spec["name"]: [(v, 0, "completed") for v in run.spec["variants"]]})
    output = _plan("cait-depth", "--scale", "tiny", "--seeds", "1", "--dataset", "synthetic", "--store", url)
    assert f"all {len(run.spec['variants'])} runs have finished; `reproduce` runs nothing again" in output


def test_the_plan_without_a_store_there_creates_none_and_says_nothing_of_one(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'absent.db'}"
    output = _plan("cait-depth", "--scale", "tiny", "--store", url)
    assert "in the store" not in output and "finished" not in output
    assert not (tmp_path / "absent.db").exists()
    report = json.loads(CliRunner().invoke(main, ["reproduce", "cait-depth", "--scale", "tiny", "--store", url,
                                                  "--plan", "--format", "json"]).output)  # fmt: skip
    assert "finished_runs" not in report["studies"][0]


def test_the_plan_refuses_a_store_whose_study_was_planned_otherwise_as_the_run_would(tmp_path: Path):
    """The store holds the same study run with 3 seeds; a plan of 2 would not be continued from it (running it
    is refused), so its counts would mislead: the plan is refused too, naming the study."""
    (three,) = plan("cait-depth", "tiny", 3, (), "synthetic", None)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _stored_runs(url, three.spec, {three.spec["name"]: [(next(iter(three.spec["variants"])), 2, "completed")]})
    result = CliRunner().invoke(main, ["reproduce", "cait-depth", "--scale", "tiny", "--seeds", "2", "--dataset",
                                       "synthetic", "--store", url, "--plan"])  # fmt: skip
    assert result.exit_code != 0
    assert f"study {three.spec['name']!r} in this store was planned otherwise" in result.output


def test_a_later_sitting_says_how_many_runs_the_store_already_holds_before_it_runs_the_rest(tmp_path: Path):
    """`reproduce` with a store holding part of the study: one note line (runs finished, runs this sitting
    runs) before Ray starts; none for a study none of whose runs has finished."""
    from harness.cli.run_commands import progress_notes

    (run,) = plan("cait-depth", "tiny", 2, (), "synthetic", None)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    first = next(iter(run.spec["variants"]))
    _stored_runs(url, run.spec, {run.spec["name"]: [(first, 0, "completed"), (first, 1, "interrupted")]})
    total = run.spec["search"]["n_trials"]
    assert progress_notes([run], url) == [
        f"1 of {total} runs of {run.spec['name']} have finished in the store {url}; running the other {total - 1}"
    ]
    (other,) = plan("cait-class-attention", "tiny", 2, (), "synthetic", None)
    assert progress_notes([other], url) == []


def test_a_run_whose_store_was_planned_otherwise_is_refused_before_anything_starts(tmp_path: Path):
    (three,) = plan("cait-depth", "tiny", 3, (), "synthetic", None)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _stored_runs(url, three.spec, {three.spec["name"]: [(next(iter(three.spec["variants"])), 2, "completed")]})
    result = CliRunner().invoke(main, ["reproduce", "cait-depth", "--scale", "tiny", "--seeds", "2", "--dataset",
                                       "synthetic", "--store", url, "--output", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2 and "planned otherwise" in result.output
    assert not (tmp_path / "out").exists()


def test_a_database_without_archsearchs_tables_is_no_store_yet_for_the_plan_and_the_dry_run(store_url):
    """An empty database (a fresh PostgreSQL database, an empty SQLite file) opened read-only is "no store there
    yet" (NoStore), as a missing SQLite file is: --plan plans without counting, and `archsearch check` says the
    search would create the store. Before, read-only commands called it unreadable and --plan stopped there."""
    from harness.search.dry_run import store_note
    from harness.store import NoStore, Store

    if store_url.startswith("sqlite"):
        Path(store_url.removeprefix("sqlite:///")).write_bytes(b"")
    with pytest.raises(NoStore, match="no archsearch tables yet"):
        Store.open(store_url, create=False, read_only=True)
    output = _plan("cait-depth", "--scale", "tiny", "--store", store_url)
    assert "in the store" not in output and "finished" not in output
    assert store_note(store_url, "s").endswith("does not exist yet: the search would create it")
