"""``--scale imagenet`` (issue 48, deliverable 5): the protocols that would decide CoAtNet's layout
claim and CaiT Table 1 on a user's cluster, proven here on a tiny ImageFolder: the plan (tokens,
matching within 2%, seeds from the power calculation, GPU-hours), one training step of every variant,
the pilot's rule, and a summary from a real tiny run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.reproduce import cluster_scale, planning, power, studies
from harness.reproduce.registry import plan
from harness.reproduce.studies import DEFAULT_SEEDS
from search_space.cost_model import estimate_params
from search_space.sampling import build_trial_config, grid_points
from search_space.validation import load_spec

ROOT = Path(__file__).resolve().parents[1]


def make_image_folder(root: Path, classes: int = 2, train: int = 2, val: int = 1) -> Path:
    """A tiny ImageFolder: ``classes`` class folders of random PNGs (and one JPEG) under train/ and val/."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("val", val)):
        for c in range(classes):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (176, 192, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / (f"{i}.jpg" if i == 0 and c == 0 else f"{i}.png"))
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("imagefolder"))


# -- power --------------------------------------------------------------------------------------


def test_the_power_agrees_with_statsmodels_and_with_a_simulation():
    from statsmodels.stats.power import TTestPower

    for n, difference, sd, alpha in ((8, 0.3, 0.17, 0.01), (30, 0.74, 1.36, 0.05), (5, 1.0, 1.0, 0.05)):
        ours = power.paired_t_power(n, difference, sd, alpha)
        theirs = TTestPower().power(effect_size=difference / sd, nobs=n, alpha=alpha, alternative="two-sided")
        assert ours == pytest.approx(theirs, abs=1e-6)
    # A simulation of the paired t-test itself (no noncentral t anywhere).
    from scipy import stats

    rng = np.random.default_rng(1)
    draws = rng.normal(0.3, 0.17, size=(20000, 8))
    p = stats.ttest_1samp(draws, 0.0, axis=1).pvalue
    assert (p < 0.01).mean() == pytest.approx(power.paired_t_power(8, 0.3, 0.17, 0.01), abs=0.015)


def test_seeds_are_the_fewest_that_reach_the_power_and_the_imagenet_default_is_the_calculations():
    n = power.seeds_for(0.3, power.paired_sd(0.12), power.holm_strictest(5))
    assert n == 8 == DEFAULT_SEEDS["imagenet"] == cluster_scale.powered_seeds(5)
    assert (
        power.paired_t_power(n, 0.3, power.paired_sd(0.12), 0.01)
        >= 0.8
        > power.paired_t_power(n - 1, 0.3, power.paired_sd(0.12), 0.01)
    )
    assert power.paired_sd(0.12) == pytest.approx(0.12 * math.sqrt(2))
    with pytest.raises(ValueError):
        power.seeds_for(0.0, 1.0, 0.05)


def test_each_claims_power_is_its_verdicts_test_against_the_papers_difference_tost_exactly():
    """Issue 59 (4): power per claim as the verdict decides it, checked by simulating the decision itself."""
    from scipy import stats

    sd, n, alpha, margin = 0.17, 8, 0.01, 0.3
    rng = np.random.default_rng(2)
    for relation, true in ((">", 0.25), (">=", -0.1), (">>", 2.4), ("~", 0.05)):
        draws = rng.normal(true, sd, size=(40000, n))
        mean, se = draws.mean(axis=1), draws.std(axis=1, ddof=1) / math.sqrt(n)
        critical = stats.t.ppf(1 - alpha / 2, n - 1)
        if relation == "~":
            held = (mean - critical * se > -margin) & (mean + critical * se < margin)
        else:
            threshold = {">": 0.0, ">=": -margin, ">>": 2.0}[relation]
            held = mean - critical * se > threshold
        ours = power.claim_power(relation, true, sd, n, alpha, margin, 2.0)
        assert held.mean() == pytest.approx(ours, abs=0.01), relation
    # The referee's numbers: TOST at 8 seeds is 78%, not 80%; LayerScale >= Fixup at depth 12 (-0.2) ~10%.
    assert round(100 * power.tost_power(8, 0.0, power.paired_sd(0.12), 0.3, 0.01)) == 78
    assert cluster_scale.paper_difference(("d12-layerscale", ">=", "d12-fixup+ln")) == pytest.approx(-0.2)
    assert power.claim_power(">=", -0.2, power.paired_sd(0.12), 8, 0.01, 0.3, 2.0) < 0.2
    assert power.seeds_for_claim(">", -0.1, 0.17, 0.01, 0.3, 2.0, most=50) is None  # the wrong side: never


def test_the_registered_reestimation_rule_raises_seeds_with_the_first_parts_spread_and_never_lowers_them(folder):
    claims = (("CCCC", "~", "CCCT"), ("CCTT", ">", "CTTT"))
    planned = cluster_scale.study_seeds(8, claims)
    assert cluster_scale.reestimated_seeds(planned, claims, observed_sd=0.05) == planned  # never fewer
    wider = cluster_scale.reestimated_seeds(planned, claims, observed_sd=0.25)
    assert planned < wider <= cluster_scale.SEED_CAP
    assert cluster_scale.reestimated_seeds(planned, claims, observed_sd=5.0) == cluster_scale.SEED_CAP
    (run,) = plan("coatnet-layouts", "imagenet", 8, (), "imagefolder", str(folder))
    assert any(cluster_scale.REESTIMATION_RULE in n for n in run.protocol.notes)  # registered with the plan
    assert not any("shows which" in n for n in run.protocol.notes)


def test_the_small_and_cpu_notes_state_the_power_the_function_computes():
    """The cpu note's numbers (82% at 30 seeds, 79% at 28) and the small scale's, recomputed."""
    from harness.reproduce.studies import SCALES

    assert round(100 * power.paired_t_power(30, 0.74, 1.36, 0.05)) == 82
    assert round(100 * power.paired_t_power(28, 0.74, 1.36, 0.05)) == 79
    note = SCALES["small"]["focus_power"]
    assert SCALES["small"]["focus_seeds"] == {"CCTT": 30, "CTTT": 30}
    assert f"{round(100 * power.paired_t_power(30, 1.0, 1.06, 0.01))}% power" in note
    assert f"{round(100 * power.paired_t_power(30, 0.39, 1.06, 0.01))}% power" in note
    assert f"({round(100 * power.paired_t_power(30, 0.39, 1.06, 0.05))}% at 5%)" in note
    assert f"need {power.seeds_for(0.39, 1.06, 0.01)} seeds" in note
    detectable = next(d / 100 for d in range(50, 150) if power.paired_t_power(30, d / 100, 1.06, 0.01) >= 0.8)
    assert f"{detectable:g} points with 80%" in note
    (run,) = plan("coatnet-layouts", "small", 10, ("generalisation",), "mnist5k", None)
    assert run.protocol.more_seeds == {"CCTT": 30, "CTTT": 30} and note in run.protocol.notes


def test_the_measured_throughput_is_the_committed_benchmark_rows():
    rows = json.loads((ROOT / "benchmarks/results/gpu-h100-a.json").read_text())["a"]
    for family, measured in cluster_scale.THROUGHPUT.items():
        (row,) = [r for r in rows if r["model"] == measured.model and r["side"] == "archsearch"
                  and r["compile"] == "eager" and r.get("softmax", "input dtype") == "input dtype"]  # fmt: skip
        assert row["train img/s"] == measured.images_per_s and row["GMACs/img"] * 1e9 == pytest.approx(measured.macs)
        assert row["dtype"] == "bfloat16" and row["batch"] == 128, family


def test_the_loader_rates_are_the_committed_benchmark_rows_of_the_studies_own_pipelines(folder):
    """Issue 59 (5): the per-core loader rates the plan reads are benchmarks/results/loader_rate.json's rows,
    and each row measured the recipe its family's studies train with now (a changed recipe fails here until
    ``python -m benchmarks.loader_rate`` is run again)."""
    from benchmarks.loader_rate import augment_of, study_data

    result = json.loads((ROOT / "benchmarks/results/loader_rate.json").read_text())
    rows = {row["pipeline"]: row for row in result["rows"]}
    for rate in (*cluster_scale.LOADER_RATE.values(), cluster_scale.EVAL_LOADER_RATE):
        assert rows[rate.pipeline]["img/s per core"] == rate.images_per_s > 0 and f"'{rate.pipeline}'" in rate.source
    assert result["torch_threads"] == 1 and result["loader_processes"] == 0 and "time.process_time" in result["rate"]
    for family, rate in cluster_scale.LOADER_RATE.items():
        data = study_data(family, folder)
        assert rows[rate.pipeline]["recipe"] == augment_of(data), family
        assert data.resolved_image_size == cluster_scale.IMAGE_SIZE == rows["validation"]["recipe"]["image_size"]
    assert rows["cait train"]["recipe"]["randaugment"] == [2, 9]
    assert rows["coatnet train"]["recipe"]["randaugment"] is None


def test_a_variant_trains_at_the_slower_of_its_gpu_and_its_loader():
    """The min() rule, both ways: a model the GPU runs faster than 7 loader processes decode is loader-bound,
    a model 20x CoAtNet-0's MACs GPU-bound; the hours follow the slower rate, validation's too."""
    gpu, loader = cluster_scale.THROUGHPUT["coatnet"], cluster_scale.LOADER_RATE["coatnet"]
    processes = cluster_scale.loader_processes()
    assert processes == 7  # 8 CPUs per trial, one for the training process (auto_loader_processes' rule)
    feeding = processes * loader.images_per_s
    eval_feeding = processes * cluster_scale.EVAL_LOADER_RATE.images_per_s
    small = gpu.macs / 10  # the GPU would train it at 10x the reference's rate: the loader cannot keep up
    rates = cluster_scale.rates(small, "coatnet")
    assert rates.limit == "loader" and rates.train == feeding < rates.gpu == pytest.approx(10 * gpu.images_per_s)
    hours = cluster_scale.gpu_hours(small, "coatnet", 1_281_167, 50_000, 100, 2)
    eval_rate = min(10 * gpu.images_per_s * 3, eval_feeding)
    assert hours == pytest.approx(2 * 100 * (1_281_167 / feeding + 50_000 / eval_rate) / 3600)
    note = rates.note("CCTT")
    assert note == (f"training rate CCTT: loader-bound: 7 loader processes x {loader.images_per_s:,.0f} img/s/core = "
                    f"{feeding:,.0f} img/s < GPU {10 * gpu.images_per_s:,.0f} img/s at 160 px")  # fmt: skip
    large = gpu.macs * 20  # a twentieth of the reference's rate: far below what the loader delivers
    rates = cluster_scale.rates(large, "coatnet")
    assert rates.limit == "gpu" and rates.train == pytest.approx(gpu.images_per_s / 20) and rates.train < feeding
    hours = cluster_scale.gpu_hours(large, "coatnet", 1_281_167, 50_000, 100, 1)
    assert hours == pytest.approx(100 * (1_281_167 + 50_000 / 3) / (gpu.images_per_s / 20) / 3600)
    said = f"training rate X: GPU-bound: GPU {gpu.images_per_s / 20:,.0f} img/s at 160 px <= 7 loader processes x "
    assert rates.note("X").startswith(said)


def test_the_loader_processes_are_the_ones_a_trial_with_those_cpus_gets(monkeypatch):
    """The plan's count is ``auto_loader_processes``' on an accelerator (which this machine's cores would bound)."""
    from trials.data import bundle

    monkeypatch.setattr(bundle, "usable_cpus", lambda: 64)  # a cluster node's cores, not this machine's
    for cpus in (1, 2, 8, 16):
        monkeypatch.setitem(cluster_scale.TRIAL_RESOURCES, "cpus", cpus)
        assert cluster_scale.loader_processes() == bundle.auto_loader_processes(cpus, accelerator=True), cpus


def test_the_readme_quotes_the_h100_hours_the_plan_computes_now():
    """The H100-hours and rates quoted in docs/reproducing.md ("Larger scales", which docs/reproductions/README.md
    links) are regenerated from the code: a change of rates or recipe that moves them fails here until the page is
    updated."""
    text = " ".join((ROOT / "docs/reproducing.md").read_text().split())
    totals, gpu, loader = [], {"cait": [], "coatnet": []}, {}
    studied = (("coatnet-layouts", ("generalisation",)), ("cait-depth", ()), ("cait-residual-schemes", ()))
    for study, protocols in studied:
        (run,) = plan(study, "imagenet", DEFAULT_SEEDS["imagenet"], protocols, "imagefolder", "/nonexistent")
        notes = cluster_scale.cost(run, None)["notes"]
        (line,) = [n for n in notes if n.startswith("estimated GPU-hours at ImageNet-1k")]
        totals.append(line.rsplit("= ", 1)[1].removesuffix(" H100-hours"))
        rates = [n for n in notes if n.startswith("training rate ")]
        assert rates and all(": loader-bound: " in n for n in rates), study  # as the page says
        for rate in cluster_scale.cost(run, None)["rates"].values():
            gpu[run.family].append(rate["gpu_img_s"])
            loader[run.family] = rate["loader_img_s"]
    for family, words in (("cait", "CaiT {} img/s vs GPU {}-{}"), ("coatnet", "CoAtNet {} vs {}-{}")):
        quoted = words.format(*(f"{x:,.0f}" for x in (loader[family], min(gpu[family]), max(gpu[family]))))
        assert quoted in text, quoted
    assert f"the H100-hours ({totals[0]}, {totals[1]} and {totals[2]} for coatnet-layouts, cait-depth and" in text


# -- the plan -----------------------------------------------------------------------------------


def test_the_imagenet_scale_needs_an_image_folder_and_says_so_in_one_line(folder):
    runner = CliRunner()
    for args in ([], ["--dataset", "mnist5k"], ["--dataset", "imagefolder"]):
        result = runner.invoke(main, ["reproduce", "cait-depth", "--scale", "imagenet", *args, "--plan"])
        assert result.exit_code == 2, result.output
        assert "give --dataset imagefolder --data-dir DIR" in result.output
        assert len(result.output.strip().splitlines()) == 1
    capacity = runner.invoke(main, ["reproduce", "coatnet-layouts", "--scale", "imagenet", "--protocol", "capacity",
                                    "--dataset", "imagefolder", "--data-dir", str(folder), "--plan"])  # fmt: skip
    assert capacity.exit_code == 2 and "use --protocol generalisation" in capacity.output
    with pytest.raises(ValueError, match="unknown scale 'huge'"):
        plan("cait-class-attention", "huge", 8, (), "imagefolder", str(folder))


@pytest.fixture(scope="module")
def coatnet_plan(folder) -> tuple[str, dict]:
    args = ["reproduce", "coatnet-layouts", "--scale", "imagenet", "--dataset", "imagefolder", "--data-dir",
            str(folder), "--plan"]  # fmt: skip
    runner = CliRunner()
    table = runner.invoke(main, args)
    assert table.exit_code == 0, table.output
    report = runner.invoke(main, [*args, "--format", "json"])
    assert report.exit_code == 0, report.output
    return table.output, json.loads(report.output)


def test_the_coatnet_plan_has_real_attention_grids_matched_layouts_powered_seeds_and_gpu_hours(coatnet_plan):
    output, report = coatnet_plan
    (study,) = report["studies"]
    assert report["scale"] == "imagenet" and study["protocol"]["image_size"] == 160
    variants = {v["name"]: v for v in study["variants"]}
    assert set(variants) == {"VIT-REL", "CCCC", "CCCT", "CCTT", "CTTT"}
    # 8 seeds power the '>' claims at the margin; TOST's `CCCC ~ CCCT` has 78% power there, exactly, so 9.
    seeds = cluster_scale.study_seeds(8, tuple(studies.PAPER_CLAIMS["generalisation"]))
    assert seeds == 9 and power.tost_power(8, 0.0, power.paired_sd(0.12), 0.3, 0.01) < 0.8
    for name, v in variants.items():
        assert v["seeds"] == seeds
        if name == "VIT-REL":
            assert v["grids"] == [[10, 10]]  # 100 tokens at patch 16
        else:
            assert v["grids"][2:] == [[10, 10], [5, 5]]  # S3 and S4 attend over 100 and 25 tokens
            assert abs(v["flops"] / variants["CCTT"]["flops"] - 1) <= 0.02
        assert abs(v["params"] / variants["CCTT"]["params"] - 1) <= 0.02
    assert variants["CCTT"]["params"] == estimate_params(
        __import__("trials.models", fromlist=["resolve_config"]).resolve_config(
            {"preset": "coatnet_0", "image_size": 160}
        )
    )  # CoAtNet-0 itself is the reference
    protocol = study["protocol"]
    assert protocol["margin"] == 0.3 and protocol["level"] == 1.0 and protocol["seeds"] == seeds
    assert any("ASSUMED to be 0.12 points" in n for n in protocol["notes"])
    tost = power.tost_power(seeds, 0.0, power.paired_sd(0.12), 0.3, 0.01)
    said = f"`CCCC ~ CCCT`: no difference (equivalence) -> {tost:.0%} ({seeds} seeds"
    assert any(said in n for n in protocol["notes"])
    assert study["pilot"]["runs"] == 15 and sum(p["runs"] for p in study["parts"]) == 5 * seeds
    hours = study["gpu_hours"]
    assert set(hours) >= {"ImageNet-1k", "ImageNet-100"} and any(k.startswith("your folder") for k in hours)
    assert 10 * hours["ImageNet-100"]["total"] == pytest.approx(hours["ImageNet-1k"]["total"], rel=0.02)
    assert "estimated GPU-hours at ImageNet-1k, 1,281,167 training images: pilot" in output
    assert "H100-hours" in output and "an estimate, not a measurement" in output
    # Both rates of every variant, and which one limits (issue 59 item 5).
    for name, rates in study["training_rates"].items():
        line = next(line for line in output.splitlines() if line.startswith(f"note: training rate {name}: "))
        assert f"GPU {rates['gpu_img_s']:,.0f} img/s at 160 px" in line
        assert f"7 loader processes x {cluster_scale.LOADER_RATE['coatnet'].images_per_s:,.0f} img/s/core" in line
        assert line.split(": ")[2] == {"loader": "loader-bound", "gpu": "GPU-bound"}[rates["limit"]]
    assert "data loading assumed never to limit" not in output
    assert "pilot coatnet-layouts-generalisation-imagenet-imagefolder-lr-pilot: 15 runs, first" in output
    assert f"{seeds} seeds per variant, {5 * seeds} runs" in output.splitlines()[0]


ALL_CAIT_STUDIES = ("cait-depth", "cait-residual-schemes", "cait-class-attention", "cait-init-control",
                    "cait-depth-rezero-ln", "cait-class-attention-matched")  # fmt: skip


def test_the_cait_studies_run_table_1_at_depth_12_and_more_on_100_tokens(folder):
    """Issue 59 (3): every CaiT study, the controls and class attention included, plans at the imagenet
    scale with its own claims, the cluster's endpoint and margins, and seeds from the power calculation."""
    for study in ALL_CAIT_STUDIES:
        (run,) = plan(study, "imagenet", 8, (), "imagefolder", str(folder))
        assert run.protocol.image_size == 160 and run.spec["data"]["image_size"] == 160
        base_ca = run.spec["base_model"].get("ca_depth", 0)
        blocks = {v["depth"] + v.get("ca_depth", base_ca) for v in run.spec["variants"].values()}
        assert min(blocks) >= 12, study  # Table 1's depth 12 and more (Table 3's splits of 12 blocks)
        config = studies.variant_config(run, next(iter(run.spec["variants"])))
        assert planning.grids(config) == [[10, 10]]
        assert run.protocol.seeds >= cluster_scale.powered_seeds(len(run.protocol.claims))
        assert run.spec["data"]["augment"]["mixup_alpha"] == 0.8  # DeiT's recipe, as Table 1
        assert run.protocol.metric.startswith("final validation top-1") and run.protocol.first_seed == 0
        assert run.protocol.margin == cluster_scale.MARGIN
        (small,) = plan(study, "small", 8, (), "mnist5k", None)
        assert run.protocol.claims == small.protocol.claims and set(run.spec["variants"]) == set(small.spec["variants"])
        load_spec(run.spec, check_paths=True)
    (depth,) = plan("cait-depth", "imagenet", 8, (), "imagefolder", str(folder))
    assert depth.protocol.seeds == cluster_scale.powered_seeds(4, interaction=True) > 8  # the interaction's spread


def test_the_plan_header_names_the_split_the_endpoint_is_measured_on(folder):
    """An ImageFolder keeps no test split: its CaiT plan says validation; mnist5k's cpu plan says test."""
    runner = CliRunner()
    imagenet = runner.invoke(main, ["reproduce", "cait-depth", "--scale", "imagenet", "--dataset", "imagefolder",
                                    "--data-dir", str(folder), "--plan"])  # fmt: skip
    assert imagenet.exit_code == 0, imagenet.output
    assert "metric: final validation top-1" in imagenet.output and "test top-1" not in imagenet.output
    cpu = runner.invoke(main, ["reproduce", "cait-depth", "--scale", "cpu", "--dataset", "mnist5k", "--plan"])
    assert cpu.exit_code == 0, cpu.output
    assert "metric: final test top-1" in cpu.output


# -- the pilot ----------------------------------------------------------------------------------


def _pilot_trials(pilot, top1: dict[tuple[str, float], float | None], status: dict | None = None):
    import pandas as pd

    rows = []
    for (variant, lr), value in top1.items():
        rows.append({"config.name": variant, "config.training.lr": lr, "config.seed": 1000,
                     "status": (status or {}).get((variant, lr), "completed"), "top1": value})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_pilot_rule_best_top1_ties_to_the_lower_lr_failures_last_and_refuses_until_complete(folder):
    (run,) = plan("coatnet-layouts", "imagenet", 8, (), "imagefolder", str(folder), ("CCTT", "CTTT"))
    pilot = run.pilot
    lrs = pilot["params"]["lr"]["choice"]
    assert lrs == [5e-4, 1e-3, 2e-3] and pilot["params"]["seed"]["choice"] == [1000]
    assert pilot["data"]["val_fraction"] == 0.02 and pilot["training"]["epochs"] == 10
    top1 = {("CCTT", 5e-4): 40.0, ("CCTT", 1e-3): 42.0, ("CCTT", 2e-3): 42.0,  # a tie: the lower lr
            ("CTTT", 5e-4): 30.0, ("CTTT", 1e-3): 31.0, ("CTTT", 2e-3): None}  # fmt: skip
    trials = _pilot_trials(pilot, top1, {("CTTT", 2e-3): "diverged"})
    chosen, rows = cluster_scale.choose_lrs(trials, pilot)
    assert chosen == {"CCTT": 1e-3, "CTTT": 1e-3} and len(rows) == 6
    with pytest.raises(ValueError, match=r"refuse to start until its learning-rate pilot .* 5 of its 6 runs"):
        cluster_scale.choose_lrs(trials.iloc[:5], pilot)
    running = _pilot_trials(pilot, top1, {("CCTT", 5e-4): "running"})
    with pytest.raises(ValueError, match="5 of its 6 runs"):
        cluster_scale.choose_lrs(running, pilot)
    # The choice goes into the study's grid (one sub-grid per variant) and its frozen protocol.
    (chosen_run,) = plan("coatnet-layouts", "imagenet", 8, (), "imagefolder", str(folder), ("CCTT", "CTTT"),
                         {pilot["name"]: {"CCTT": 1e-3, "CTTT": 5e-4}})  # fmt: skip
    spec = load_spec(chosen_run.spec, check_paths=False)
    points = grid_points(spec)
    assert {(p["variant"], p["lr"]) for p in points} == {("CCTT", 1e-3), ("CTTT", 5e-4)} and len(points) == 18
    assert any("Chosen: CCTT 0.001, CTTT 0.0005." in n for n in chosen_run.protocol.notes)
    parts = [load_spec(p, check_paths=False) for p in chosen_run.parts]
    pooled = sorted((q["variant"], q["seed"], q["lr"]) for p in parts for q in grid_points(p))
    assert pooled == sorted((q["variant"], q["seed"], q["lr"]) for q in points)
    assert build_trial_config(spec, points[0])["training"]["lr"] in (1e-3, 5e-4)


# -- training on the folder ---------------------------------------------------------------------


def one_step(spec: dict) -> dict:
    """A test's budget: ``spec`` trained for one optimiser step at batch 2, no cost timing."""
    data = {**spec["data"], "batch_size": 2}
    training = {k: v for k, v in spec["training"].items() if k not in ("epochs", "warmup_epochs")}
    search = {k: v for k, v in spec["search"].items() if k != "resources"}
    return {**spec, "data": data, "training": {**training, "steps": 1, "warmup_steps": 0},
            "measure": {"throughput": False, "latency": False}, "search": search}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("study", ["coatnet-layouts", "cait-depth", "cait-residual-schemes"])
def test_one_training_step_of_every_variant_on_the_folder(folder, study):
    """CoAtNet-0-sized layouts at 160 px take about 3 s a step at batch 2 on one CPU core."""
    import torch

    from trials.runner import run_trial

    (run,) = plan(study, "imagenet", 8, (), "imagefolder", str(folder))
    spec = load_spec(one_step(run.spec))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for variant in run.spec["variants"]:
            point = next(p for p in grid_points(spec) if p["variant"] == variant)
            result = run_trial(build_trial_config(spec, point), progress=False)
            assert result.status.value == "completed", (variant, result.error)
            assert result.config["model"]["image_size"] == 160 and result.config["model"]["num_classes"] == 2
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_tiny_real_run_pilot_first_then_the_study_and_its_summary(folder, tmp_path, monkeypatch):
    """The whole path on the folder, nothing faked: the pilot runs, its choice is written and fixes
    each variant's lr, the study runs at it, the summary is written. A tiny budget (1 epoch of 4
    images), two layouts, two seeds, two pilot lrs, a level every run reaches, no GPU."""
    import pandas as pd
    import ray

    from harness.reproduce.run import reproduce
    from harness.store import Store

    monkeypatch.setattr(cluster_scale, "TRIAL_RESOURCES", {})
    monkeypatch.setattr(cluster_scale, "MEASURE", {"throughput": False, "latency": False})
    monkeypatch.setattr(cluster_scale, "RUN_SD", 0.001)  # so that 2 seeds are "enough": a budget, not a claim
    for key, value in {"epochs": 1, "pilot_epochs": 1, "warmup_epochs": 0, "batch_size": 4,
                       "lrs": (1e-3, 2e-3), "level": 100.0}.items():  # fmt: skip
        monkeypatch.setitem(cluster_scale.COATNET, key, value)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    options = {"scale": "imagenet", "seeds": 2, "protocols": ("generalisation",), "dataset": "imagefolder",
               "data_dir": str(folder), "address": None, "output": tmp_path / "out", "command": "test",
               "results_dir": tmp_path / "ray", "only": ("CCTT", "CTTT")}  # fmt: skip
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        written = reproduce("coatnet-layouts", url, **options)
    finally:
        ray.shutdown()
    name = "coatnet-layouts-generalisation-imagenet-imagefolder-only-CCTT_CTTT"
    with Store.open(url, create=False) as store:
        assert set(store.study_names()) == {f"{name}-lr-pilot", f"{name}-part1"}
        pilot = store.trials(f"{name}-lr-pilot")
        study = store.trials(f"{name}-part1")
    assert len(pilot) == 4 and (pilot["status"] == "completed").all()
    assert set(pilot["config.seed"]) == {1000} and set(pilot["config.training.lr"]) == {1e-3, 2e-3}
    record = json.loads((tmp_path / "out" / f"{name}-lr-pilot.json").read_text())
    assert set(record["chosen"]) == {"CCTT", "CTTT"} and len(record["runs"]) == 4
    assert len(study) == 4 and (study["status"] == "completed").all() and set(study["config.seed"]) == {0, 1}
    for _, trial in study.iterrows():  # every study run at its variant's pilot choice
        assert trial["config.training.lr"] == record["chosen"][trial["config.name"]]
    summary = next(p for p in written if p.suffix == ".md")
    text = summary.read_text()
    assert "Learning rate per variant, from the pilot" in text and "Chosen: CCTT" in text
    assert "`imagefolder` at 160 px" in text and "ASSUMED" in text
    runs = pd.read_csv(next(p for p in written if p.name.endswith(".runs.csv")), comment="#")
    assert set(runs["variant"]) == {"CCTT", "CTTT"} and runs["value"].notna().all()
