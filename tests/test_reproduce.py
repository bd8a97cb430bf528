"""``archsearch reproduce coatnet-layouts`` at tiny scale: a real grid study, summary and report."""

from __future__ import annotations

import pytest
import ray
from click.testing import CliRunner

from harness.cli import main
from harness.reproduce import LAYOUTS, PAPER_CLAIMS, coatnet_layouts_spec, markdown_summary, summarize
from search_space.validation import load_spec


def test_layout_specs_are_matched_grids():
    for protocol in ("generalisation", "capacity"):
        spec = load_spec(coatnet_layouts_spec("tiny", protocol, seeds=3))
        assert spec.search.sampler == "grid" and spec.search.n_trials == len(LAYOUTS) * 3
        assert set(spec.variants) == set(LAYOUTS)
    generalisation = coatnet_layouts_spec("tiny", "generalisation", 1)
    capacity = coatnet_layouts_spec("tiny", "capacity", 1)
    for spec in (generalisation, capacity):  # no augmentation, no regularisation, BatchNorm recalibrated
        assert spec["data"]["augment"] == {"random_crop": False, "hflip": False}
        assert spec["training"]["weight_decay"] == 0.0 and spec["training"]["label_smoothing"] == 0.0
        assert spec["training"]["recalibrate_batchnorm"] is True
        assert spec["data"]["name"] == "mnist5k" and spec["data"]["image_size"] == 64
    assert capacity["data"]["train_size"] > generalisation["data"]["train_size"]
    with pytest.raises(ValueError, match="unknown scale"):
        coatnet_layouts_spec("huge", "capacity", 1)


@pytest.mark.slow
def test_tiny_layout_study_runs_and_reports(tmp_path):
    import shutil

    from sqlalchemy import create_engine, text

    from harness.reproduce import reproduce_coatnet_layouts
    from harness.store import Store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    options = {
        "scale": "tiny", "seeds": 2, "protocols": ("generalisation",), "dataset": "synthetic", "data_dir": None,
        "address": None, "output": tmp_path / "out", "command": "test", "results_dir": tmp_path / "ray",
    }  # fmt: skip
    name = "coatnet-layouts-generalisation-tiny"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        written = reproduce_coatnet_layouts(url, **options)
        # A new sitting: three runs were interrupted and Ray's experiment state is gone (another
        # machine, a cleaned results dir). Only those three run again, as a continuation study.
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("UPDATE archsearch_trials SET status = 'interrupted' WHERE number IN (1, 4, 7)"))
            conn.execute(text("UPDATE archsearch_studies SET status = 'interrupted'"))
        engine.dispose()
        shutil.rmtree(tmp_path / "ray")
        # What the next sitting has left, as --plan with this store says it: the 7 finished runs, not the 3.
        planned = CliRunner().invoke(main, ["reproduce", "coatnet-layouts", "--scale", "tiny", "--seeds", "2",
                                            "--protocol", "generalisation", "--dataset", "synthetic", "--store", url,
                                            "--plan"])  # fmt: skip
        assert f"in the store {url}: 7 of 10 runs have finished; the next `reproduce` with it runs the other 3" in (
            planned.output
        ), planned.output
        again = reproduce_coatnet_layouts(url, **options)
        third = reproduce_coatnet_layouts(url, **options)  # nothing left: runs nothing more
    finally:
        ray.shutdown()
    with Store.open(url, create=False) as store:
        assert store.study_names() == [name, f"{name}.2"]
        continued = store.trials(f"{name}.2")
        assert len(continued) == 3 and (continued["status"] == "completed").all()
    runs = __import__("pandas").read_csv(again[1], comment="#")
    assert set(runs["study"]) == {name, f"{name}.2"}
    assert (runs[runs["status"] == "completed"].groupby(["variant", "seed"]).size() == 1).all()
    assert runs["status"].eq("completed").sum() == 10 and len(third) == len(again)
    assert {p.suffix for p in written} == {".md", ".html", ".png", ".csv", ".json"}
    assert any(p.name.endswith("loss-vs-accuracy.png") for p in written)
    with Store.open(url, create=False) as store:
        trials = store.trials(name)
        rows, claims, _ = summarize(store, [name, f"{name}.2"], "generalisation")
    assert len(trials) == 10 and (trials["status"] == "completed").sum() == 7
    # Matched size: the built models' parameter counts agree within 5% across layouts.
    params = trials.groupby("config.name")["params"].first()
    assert set(params.index) == set(LAYOUTS)
    assert params.max() / params.min() - 1 <= 0.10 and (abs(params / params["CCTT"] - 1) <= 0.05).all()
    assert {r.variant for r in rows} == set(LAYOUTS) and all(r.n == 2 for r in rows)
    assert [c["claim"] for c in claims] == [f"{a} {rel} {b}" for a, rel, b in PAPER_CLAIMS["generalisation"]]
    assert {c["verdict"] for c in claims} == {"inconclusive (fewer than 3 seeds)"}  # 2 seeds decide nothing
    assert all(c["test"] == "paired t (2 seeds)" for c in claims)  # every layout ran seeds 0 and 1
    assert all(0.0 <= r.low <= r.high <= 100.0 for r in rows)  # accuracy intervals within [0, 100]
    text = written[0].read_text()
    assert "Paper's ranking" in text and all(c["claim"] in text for c in claims)
    assert markdown_summary("x", "generalisation", rows, claims, "cmd").count("|") > 20


def test_a_replicate_seed_fixes_the_data_so_variants_pair_by_seed():
    from search_space.sampling import build_trial_config

    spec = load_spec(coatnet_layouts_spec("tiny", "generalisation", seeds=3))
    one = build_trial_config(spec, {"variant": "CCTT", "seed": 2})
    other = build_trial_config(spec, {"variant": "CTTT", "seed": 2})
    assert one["data"]["seed"] == other["data"]["seed"] == one["seed"] == 2
    assert build_trial_config(spec, {"variant": "CCTT", "seed": 1})["data"]["seed"] == 1


def test_summary_states_the_test_margin_and_power(tmp_path):
    from harness.reproduce import VariantSummary

    rows = [VariantSummary("A", 1e6, 1e9, "top1", 99.0, 97.0, 100.0, 5, clipped=True)]
    claims = [
        {"claim": "A > B", "verdict": "holds", "difference": 2.5, "low": 1.0, "high": 4.0, "margin": None,
         "test": "paired t (5 seeds)", "p": 0.003, "p_t": 0.003, "power": "5 seeds resolve differences of 1.2 or more"},
        {"claim": "A ~ B", "verdict": "inconclusive (a variant did not complete)"},
    ]  # fmt: skip
    text = markdown_summary("s", "generalisation", rows, claims, "archsearch reproduce coatnet-layouts --output out")
    assert "| A > B | holds | 2.500 | [1.000, 4.000] | - | paired t (5 seeds) | 0.003 |" in text
    assert "[97.000, 100.000] *" in text and "clipped to the metric's possible range [0, 100]" in text
    assert "no significant difference is never read as agreement" in text


def test_cait_study_plans():
    from harness.reproduce import plan

    (depth,) = plan("cait-depth", "tiny", 2, (), "synthetic", None)
    spec = load_spec(depth.spec)
    # The DeiT baseline of CaiT's Table 1: class token from layer 0, no class attention, no talking heads.
    assert (spec.base_model["ca_depth"], spec.base_model["cls_insert_layer"], spec.base_model["talking_heads"]) == (
        0, 0, False,
    )  # fmt: skip
    schemes = {name.split("-", 1)[1]: v for name, v in spec.variants.items()}
    assert schemes["none"]["layer_scale"] == "off" and schemes["layerscale"]["layer_scale"] == "paper"
    assert schemes["rezero"]["residual"] == "rezero"  # ReZero proper: no LayerNorm, gain at 0
    assert spec.search.n_trials == len(spec.variants) * 2
    assert " - " in depth.protocol.claims[0][0]  # the primary claim is the depth x scheme interaction
    assert depth.protocol.failure_rule and "Fisher" in "\n".join(depth.protocol.markdown())
    (split,) = plan("cait-class-attention", "tiny", 1, (), "synthetic", None)
    spec = load_spec(split.spec)
    assert {(v["depth"], v["ca_depth"]) for v in spec.variants.values()} >= {(4, 0), (2, 2), (3, 1), (4, 1), (4, 2)}
    # late insertion: the last self-attention block of 4, as CaiT's 10-11 of 12
    assert any(v["ca_depth"] == 0 and v["cls_insert_layer"] == 3 for v in spec.variants.values())


def test_residual_schemes_study_plans_table_1_on_the_deit_baseline():
    from harness.reproduce import plan
    from harness.reproduce.studies import RENORMALISED_SCHEMES, TABLE_1_SCHEMES

    (run,) = plan("cait-residual-schemes", "cpu", 5, (), "mnist5k", None)
    spec = load_spec(run.spec)
    assert (spec.base_model["ca_depth"], spec.base_model["cls_insert_layer"], spec.base_model["talking_heads"]) == (
        0, 0, False,
    )  # fmt: skip
    versions = sorted((v["residual"], v.get("keep_norm", False)) for v in spec.variants.values())
    # every scheme; the three whose papers drop LayerNorm also as CaiT ran them, with it (Table A.1)
    assert versions == sorted([*((s, False) for s in TABLE_1_SCHEMES), *((s, True) for s in RENORMALISED_SCHEMES)])
    assert set(RENORMALISED_SCHEMES) == {"rezero", "fixup", "t-fixup"}
    assert {v["depth"] for v in spec.variants.values()} == {12}
    assert spec.search.n_trials == len(spec.variants) * 5
    assert run.protocol.claims[0] == ("d12-layerscale", ">", "d12-prenorm")
    # the claims are on CaiT's versions; the originals are reported beside them
    assert {c[2] for c in run.protocol.claims[1:]} == {"d12-fixup+ln", "d12-t-fixup+ln", "d12-rezero+ln", "d12-scalar"}
    assert run.protocol.failure_rule and "Fisher" in "\n".join(run.protocol.markdown())


def test_residual_schemes_plan_lists_the_schemes_on_the_command_line():
    import json

    from click.testing import CliRunner

    from harness.cli import main

    args = ["reproduce", "cait-residual-schemes", "--scale", "cpu", "--plan", "--format", "json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    names = [v["name"] for v in plan["variants"]]
    schemes = ("prenorm", "rezero", "rezero+ln", "fixup", "fixup+ln", "t-fixup", "t-fixup+ln", "scalar", "layerscale")
    assert names == [f"d12-{s}" for s in schemes]
    # the whole recipe as the runs resolve it (defaults included), not a restatement
    recipe = plan["protocol"]["recipe"]
    assert recipe["warmup_epochs"] == 1.0 and recipe["weight_decay"] == 0.05 and recipe["label_smoothing"] == 0.1
    assert (recipe["lr"], recipe["epochs"], recipe["batch_size"], recipe["image_size"]) == (1e-3, 20, 64, 32)
    assert recipe["augmentation"] == "none" and recipe["train_images"] == 1000 and recipe["grad_clip"] is None


@pytest.mark.slow
@pytest.mark.parametrize("study", ["cait-depth"])
def test_tiny_cait_studies_run_and_report(tmp_path, study):
    """One CaiT study end to end (Ray, the store, per-image predictions, the summary and report): every
    CaiT study takes this same path, so it runs once, for the study with the interaction claim and the
    failure rule; each study's own spec, variants and claims are checked without training
    (tests/test_readme_claims.py builds every scale's spec; tests/test_reproduce_plan.py plans each)."""
    from harness.reproduce import reproduce

    url = f"sqlite:///{tmp_path / 'store.db'}"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        written = reproduce(
            study, url, scale="tiny", seeds=1, output=tmp_path / "out", command="test", results_dir=tmp_path / "ray"
        )
    finally:
        ray.shutdown()
    summary = written[0].read_text()
    assert "Paper's ranking" in summary and "| variant | completed | diverged | failed |" in summary
    from harness.store import Store

    with Store.open(url, create=False) as store:  # mnist5k's test split reaches the store through Ray Tune
        trials = store.trials(f"{study}-tiny-mnist5k")
        kept = store.test_predictions(f"{study}-tiny-mnist5k")  # and each run's per-image predictions with it
    assert trials["test_top1"].notna().all() and trials["test_top1"].between(0, 100).all()
    assert sorted(kept) == sorted(trials["number"]) and all(p.count == 1000 for p in kept.values())
    top1 = trials.set_index("number")["test_top1"]
    assert all(p.top1() == top1[n] for n, p in kept.items())
    assert (tmp_path / "out" / f"{study}-tiny-mnist5k.predictions.csv.gz").is_file()
    assert "-variants.png)" in summary and all(p.exists() for p in written)
    assert written[1].exists()


def test_accuracy_is_read_at_the_level_on_log_loss_and_runs_that_never_reach_it_are_listed():
    import math

    import pandas as pd

    from harness.reproduce import accuracy_at_level

    curves = pd.DataFrame(
        [
            # trial 0 crosses 0.1 between epochs 2 (loss 0.4, 80%) and 3 (loss 0.025, 95%)
            *({"number": 0, "epoch": e, "train_loss": 9.0, "train_eval_loss": loss, "top1": a}
              for e, loss, a in [(1, 1.0, 60.0), (2, 0.4, 80.0), (3, 0.025, 95.0)]),
            # trial 1 never gets below 0.3: listed, not clamped to its last accuracy
            *({"number": 1, "epoch": e, "train_loss": 9.0, "train_eval_loss": loss, "top1": a}
              for e, loss, a in [(1, 1.2, 55.0), (2, 0.5, 70.0), (3, 0.3, 75.0)]),
        ]
    )  # fmt: skip
    trials = pd.DataFrame({"number": [0, 1], "status": ["completed", "completed"]})
    level, values, missed = accuracy_at_level(curves, trials, 0.1)
    t = (math.log(0.1) - math.log(0.4)) / (math.log(0.025) - math.log(0.4))  # halfway on log-loss
    assert level == 0.1 and values == {0: pytest.approx(80.0 + t * 15.0)} and missed == [1]
    assert t == pytest.approx(0.5)  # the eval-mode loss was read, not the running one (9.0)


def _record(store, study: str, variant: str, seed: int, number: int, **final) -> None:
    store.finish_trial(
        study, number, status="completed", config={"name": variant, "seed": seed},
        measurement={"params": 1000, "flops": 1e6}, final=final,
        epochs=[{"epoch": 1, "train_loss": final.get("train_loss", 0.5), "top1": final.get("top1", 50.0)}],
    )  # fmt: skip


def test_the_depth_study_counts_failures_tests_the_interaction_and_corrects_for_its_family(tmp_path):
    from harness.reproduce import StudyNumbers, markdown_summary, plan
    from harness.store import Store

    (run,) = plan("cait-depth", "tiny", 5, (), "synthetic", None)
    accuracy = {  # LayerScale helps more at depth 4 than at depth 2; d4-none fails to learn on 3 seeds
        "d2-none": [80, 81, 80, 82, 81], "d2-rezero": [79, 80, 80, 81, 80], "d2-layerscale": [81, 82, 81, 83, 82],
        "d4-none": [10, 11, 84, 85, 84], "d4-rezero": [86, 87, 86, 88, 87], "d4-layerscale": [90, 91, 90, 92, 91],
    }  # fmt: skip
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create_study(run.protocol.study, run.spec, {"top1": "max"})
        number = 0
        for variant, values in accuracy.items():
            for seed, top1 in enumerate(values):
                loss = 2.29 if top1 < 20 else 0.3  # a failure sits at ln(10) = 2.303
                _record(store, run.protocol.study, variant, seed, number, top1=float(top1), train_loss=loss)
                number += 1
        numbers = StudyNumbers()
        rows, verdicts, metric = summarize(store, run.protocol.study, run.protocol, numbers=numbers)
    assert metric == "final validation top-1"  # synthetic keeps no test split
    assert numbers.failures["d4-none"] == (2, 5) and numbers.failures["d4-layerscale"] == (0, 5)
    by_variant = {r.variant: r for r in rows}
    assert by_variant["d4-none"].n == 3 and by_variant["d4-none"].excluded == 2  # never averaged in
    interaction = verdicts[0]
    assert interaction["claim"] == "d4-layerscale - d4-none > d2-layerscale - d2-none"
    assert interaction["p_holm"] >= interaction["p"]  # Holm over the study's four claims
    assert any("fails less often" in claim for claim, _ in numbers.fisher)
    text = markdown_summary(run.protocol.study, run.protocol, rows, verdicts, "cmd", numbers=numbers)
    assert text.index("Protocol (pre-registered") < text.index("## Results")
    assert "| d4-none | 2 | 5 |" in text and "Fisher's exact test" in text


def test_a_much_better_claim_that_the_ceiling_decides_is_not_reported_as_a_result(tmp_path):
    from harness.reproduce import plan
    from harness.store import Store

    (run,) = plan("coatnet-layouts", "tiny", 5, ("capacity",), "synthetic", None)
    claims = [("A", ">>", "B")]
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create_study("c", run.spec, {"top1": "max"})
        for seed in range(5):  # B is at 97%: a 5-point lead is impossible, whatever A does
            _record(store, "c", "A", seed, 2 * seed, top1=99.0 + 0.1 * seed)
            _record(store, "c", "B", seed, 2 * seed + 1, top1=97.0 + 0.1 * (seed % 2))
        _, verdicts, _ = summarize(store, "c", "accuracy", claims)
    assert verdicts[0]["verdict"].startswith("inconclusive (ceiling: B at 97")
    assert "does not hold" in verdicts[0]["verdict"]  # the unadjusted result is still shown


@pytest.mark.slow
def test_the_plan_shows_matched_layouts_real_attention_grids_and_the_protocol():
    """`archsearch reproduce coatnet-layouts --plan --format json`: CCCC..CTTT within 5% of each other in
    params and FLOPs, every last-stage grid at least 2x2, ViT-REL at least 16 tokens, the protocol."""
    import json

    from click.testing import CliRunner

    from harness.cli import main

    result = CliRunner().invoke(
        main, ["reproduce", "coatnet-layouts", "--scale", "cpu", "--protocol", "generalisation", "--plan",
               "--format", "json"]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    variants = {v["name"]: v for v in plan["variants"]}
    assert set(variants) == set(LAYOUTS)
    conv_attention = [variants[name] for name in ("CCCC", "CCCT", "CCTT", "CTTT")]
    for key in ("params", "flops"):
        values = [v[key] for v in conv_attention]
        assert max(values) / min(values) <= 1.05 * 1.05 and all(
            abs(v / variants["CCTT"][key] - 1) <= 0.05 for v in values
        )
    assert all(min(v["grids"][-1]) >= 2 for v in conv_attention)
    ((side, _),) = variants["VIT-REL"]["grids"]
    assert side * side >= 16
    protocol = plan["protocol"]
    assert (protocol["dataset"], protocol["image_size"], protocol["seeds"]) == ("mnist5k", 64, 7)  # cpu's default
    assert protocol["more_seeds"] == {"CCTT": 30, "CTTT": 30} and len(plan["studies"][0]["parts"]) == 3
    assert protocol["level"] == 0.05 and protocol["epochs"] >= 1 and len(protocol["claims"]) == 5
    assert plan["estimated_wall_time_s"] > 0 and all(v["estimated_run_s"] > 0 for v in plan["variants"])


def test_the_loss_accuracy_figure_reads_the_eval_mode_loss_on_a_log_axis_with_the_level():
    import pandas as pd

    from dashboards.figures import loss_vs_accuracy

    curves = pd.DataFrame(
        {"number": [0, 0, 1, 1], "epoch": [1, 2, 1, 2], "train_loss": [9.0] * 4,
         "train_eval_loss": [1.0, 0.01, 2.0, 0.3], "top1": [50.0, 90.0, 40.0, 70.0]}
    )  # fmt: skip
    figure = loss_vs_accuracy(curves, {0: "A", 1: "B"}, level=0.05)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log" and "eval mode" in ax.get_xlabel()
    assert any(line.get_label() == "level 0.05" for line in ax.get_lines())
    assert max(max(line.get_xdata()) for line in ax.get_lines()[:2]) == 2.0  # eval-mode losses, not 9.0


def test_the_claims_pairs_on_the_test_split_are_shown_as_exploratory_and_paired_by_seed():
    """Where the pre-registered metric is not the test number, the summary adds the claims' pairs on
    the final test top-1 (paired by seed, two-sided, no verdict); an accuracy study does not."""
    import pandas as pd

    from harness.reproduce import pairs_on_test_split, plan

    (run,) = plan("coatnet-layouts", "tiny", 7, ("generalisation",), "synthetic", None)
    rows = []
    for seed in range(7):  # A is ahead on 6 seeds by 1-2 points; seed 6 of B diverged (no test number)
        rows.append({"variant": "CCTT", "seed": seed, "status": "completed", "test_top1": 95.0 + (seed % 2)})
        status = "diverged" if seed == 6 else "completed"
        rows.append({"variant": "CTTT", "seed": seed, "status": status, "test_top1": 94.0 - (seed % 3 == 0)})
    runs = pd.DataFrame(rows)
    claims = [("CCTT", ">", "CTTT"), ("CCTT", "~", "CTTT"), ("CTTT", ">", "VIT-REL")]
    (pair,) = pairs_on_test_split(runs, claims)  # one pair, once; VIT-REL has no runs
    assert (pair.a, pair.b, pair.n) == ("CCTT", "CTTT", 6) and (pair.a_ahead, pair.b_ahead) == (6, 0)
    expected = [1 + (s % 2) + (s % 3 == 0) for s in range(6)]
    assert pair.diff_mean == pytest.approx(sum(expected) / 6)
    from scipy import stats

    assert pair.p_t == pytest.approx(stats.ttest_1samp(expected, 0.0).pvalue)  # two-sided
    assert pair.low < pair.diff_mean < pair.high
    assert pair.p_exact == pytest.approx(2 / 64)  # two-sided sign-flip at 6 seeds: the floor, 2/2^6
    text = markdown_summary("s", run.protocol, [], [], "cmd", test_pairs=[pair])
    assert "Exploratory, not pre-registered" in text and "| CCTT - CTTT | " in text and "| 6 | 6 / 0 |" in text
    assert "Exploratory" not in markdown_summary("s", "accuracy", [], [], "cmd", test_pairs=[pair])


def _stop_once_running(
    exe: str, args: list[str], cwd, url: str, study: str, group_sigterm: bool = False, group_sigkill: bool = False
) -> str:
    """Start ``archsearch ARGS`` in ``cwd``, SIGINT it once ``study`` has a run in progress that has reported
    an epoch (so it has a checkpoint to resume from), or SIGTERM its whole process group as a batch scheduler
    does, or SIGKILL it (the OOM killer, a lost node: nothing is recorded); its stderr (after checking it
    exited 130, 143 or by SIGKILL)."""
    import os
    import signal
    import subprocess
    import time

    from harness.store import Store

    driver = subprocess.Popen([exe, *args], cwd=cwd, start_new_session=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None:
        time.sleep(0.2)
        try:
            with Store.open(url, create=False) as store:
                counts = store.study_counts(study) if study in store.study_names() else None
        except Exception:
            continue
        if counts is not None and counts.by_status["running"] >= 1 and counts.epochs >= 1:
            break
    assert driver.poll() is None, f"{study} ended before it could be interrupted"
    if group_sigterm or group_sigkill:
        os.killpg(driver.pid, signal.SIGKILL if group_sigkill else signal.SIGTERM)  # Ray's processes get it too
    else:
        driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=180)
    assert driver.returncode == (-signal.SIGKILL if group_sigkill else 143 if group_sigterm else 130), err[-2000:]
    return err


@pytest.mark.slow
def test_a_stopped_reproduction_says_to_rerun_reproduce_and_that_command_finishes_it(tmp_path):
    """A reproduction stopped with Ctrl-C said "resume with: archsearch search --resume STUDY", which
    would run the rest but write no summary (and, in a new sitting, has no Ray state to resume). It
    now says to rerun its own ``reproduce`` command with its store, on screen and in the study's
    message, and that very command, run as printed, continues it: in a new sitting as a continuation
    study, and a continuation stopped in its turn is resumed from Ray's state (no third study, no run
    trained twice), then the summary is written."""
    import os
    import shlex
    import shutil
    import subprocess
    import sys

    from harness.store import Store

    exe = os.path.join(os.path.dirname(sys.executable), "archsearch")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    name = "coatnet-layouts-generalisation-tiny-only-CCTT_CTTT"  # --only runs those variants as their own study
    command = ["reproduce", "coatnet-layouts", "--scale", "tiny", "--seeds", "2", "--only", "CCTT,CTTT",
               "--protocol", "generalisation", "--dataset", "synthetic", "--output", "out", "--store", url]  # fmt: skip
    err = _stop_once_running(exe, command, tmp_path, url, name)
    said = [line for line in err.splitlines() if "resume with: " in line]
    assert len(said) == 1 and "archsearch search --resume" not in err, err[-2000:]
    assert said[0].startswith("search interrupted by SIGINT"), said[0]  # a stop, as a search's: not an "Error:"
    rerun = said[0].split("resume with: ", 1)[1].strip()
    assert rerun.startswith("archsearch reproduce coatnet-layouts --scale tiny --seeds 2 --only CCTT,CTTT")
    assert rerun.endswith(f"--output out --store {url}")
    with Store.open(url, create=False) as store:
        study = store.study(name)
    assert study["status"] == "interrupted" and study["status_message"].endswith(f"resume with: {rerun}")

    shutil.rmtree(tmp_path / "ray_results")  # a new sitting: Ray's state of the first one is gone
    # This one ended by a batch scheduler: SIGTERM to the process group, exit 143 (not Ray's shutdown's 1).
    err = _stop_once_running(exe, shlex.split(rerun)[1:], tmp_path, url, f"{name}.2", group_sigterm=True)
    assert "search interrupted by SIGTERM" in err and f"resume with: {rerun}" in err, err[-2000:]
    again = subprocess.run([exe, *shlex.split(rerun)[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "out" / f"{name}.md").is_file()
    with Store.open(url, create=False) as store:
        assert store.study_names() == [name, f"{name}.2"]  # the continuation resumed, not a third study
        finished = sum(store.counts(n).get("completed", 0) for n in store.study_names())
        continued, planned = store.trials(f"{name}.2"), store.study(f"{name}.2")["spec"]["search"]["n_trials"]
    assert finished == 4  # each of the 4 runs once: none lost, none repeated
    assert (continued["status"] == "completed").all() and len(continued) == planned  # its stopped run resumed


@pytest.mark.slow
def test_a_continuation_whose_driver_was_killed_is_recorded_interrupted_and_the_next_sitting_runs_it_once(tmp_path):
    """A sitting whose driver was SIGKILLed leaves its study and the run it trained ``running``. The next
    ``reproduce`` in a new sitting (no Ray state to resume) starts a continuation of the runs it lacks; the
    killed sitting stayed ``running``, its run too, in the store for ever. It is now recorded
    ``interrupted`` (study and run, with why) before the continuation starts, and every run of the study
    is finished exactly once across the three sittings."""
    import os
    import shutil
    import subprocess
    import sys

    from harness.store import Store

    exe = os.path.join(os.path.dirname(sys.executable), "archsearch")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    name = "coatnet-layouts-generalisation-tiny-only-CCTT_CTTT"
    command = ["reproduce", "coatnet-layouts", "--scale", "tiny", "--seeds", "2", "--only", "CCTT,CTTT",
               "--protocol", "generalisation", "--dataset", "synthetic", "--output", "out", "--store", url]  # fmt: skip
    _stop_once_running(exe, command, tmp_path, url, name)
    shutil.rmtree(tmp_path / "ray_results")  # a new sitting
    _stop_once_running(exe, command, tmp_path, url, f"{name}.2", group_sigkill=True)
    with Store.open(url, create=False) as store:
        assert store.study(f"{name}.2")["status"] == "running" and store.counts(f"{name}.2")["running"] >= 1
    shutil.rmtree(tmp_path / "ray_results")  # and another: the killed sitting cannot be resumed from Ray's state
    again = subprocess.run([exe, *command], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    with Store.open(url, create=False) as store:
        names = store.study_names()
        killed, counts = store.study(f"{name}.2"), {n: store.counts(n) for n in names}
        left = store.trials(f"{name}.2")
    assert names == [name, f"{name}.2", f"{name}.3"]
    assert killed["status"] == "interrupted" and "stopped before the search ended" in killed["status_message"]
    assert all(c["running"] == 0 for c in counts.values()), counts
    stopped = left[left["status"] == "interrupted"]
    assert len(stopped) >= 1 and stopped["error"].str.contains("stopped before the search ended").all()
    assert sum(c["completed"] for c in counts.values()) == 4  # each of the 4 runs once: none lost, none repeated
    assert (tmp_path / "out" / f"{name}.md").is_file()
