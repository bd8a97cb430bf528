"""Issue 48's controls, pre-registered on 2026-11-27 before any of their runs (deliverables 1 and 2).

Three studies of their own, on fresh seeds (1000-1006 at the cpu scale: no committed runs file holds
them): ``cait-init-control`` (LayerScale and prenorm with T-Fixup's Xavier beside T-Fixup+LN, the
committed ``LayerScale >= T-Fixup+LN`` re-decided under the same endpoint, margin and rule),
``cait-depth-rezero-ln`` (cait-depth's ReZero claim against CaiT's ReZero, LayerNorm kept) and
``cait-class-attention-matched`` (4+2 vs 6+0 at equal parameters). Each is its own grid study and Holm
family, so the committed studies' protocols, claims and verdicts are untouched
(tests/test_committed_reproductions.py holds those); ``--plan`` lists the variants, their seeds and
the claims.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.reproduce import planning
from harness.reproduce.registry import plan
from harness.reproduce.studies import FRESH_SEEDS, select_variants
from search_space.sampling import build_trial_config, grid_points
from search_space.validation import load_spec

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproductions"
CONTROLS = {
    "cait-init-control": "cait-residual-schemes",
    "cait-depth-rezero-ln": "cait-depth",
    "cait-class-attention-matched": "cait-class-attention",
}


@pytest.fixture(autouse=True)
def _untimed(monkeypatch):
    steps = lambda configs, batch: {name: planning.Timing((0.01,)) for name in configs}  # noqa: E731
    monkeypatch.setattr(planning, "_step_times", steps)


def _one(study: str, scale: str = "cpu", seeds: int = 7):
    (run,) = plan(study, scale, seeds, (), "mnist5k", None)
    return run


def _committed_seeds() -> set[int]:
    """Seeds of the committed runs the controls must not reuse: every study's but the controls' own."""
    seeds = set()
    for path in DOCS.glob("*.runs.csv"):
        if path.name.startswith(tuple(f"{control}-" for control in CONTROLS)):
            continue
        rows = list(csv.reader(path.read_text().splitlines()[1:]))
        column = rows[0].index("seed")
        seeds |= {int(row[column]) for row in rows[1:]}
    return seeds


@pytest.mark.parametrize("study", CONTROLS)
def test_each_control_runs_every_variant_on_the_same_fresh_seeds(study):
    run = _one(study)
    spec = load_spec(run.spec, check_paths=False)
    points = grid_points(spec)
    fresh = set(range(FRESH_SEEDS, FRESH_SEEDS + 7))
    for variant in run.spec["variants"]:
        assert {p["seed"] for p in points if p["variant"] == variant} == fresh, variant
    assert not fresh & _committed_seeds()  # no seed of a run whose result was seen
    assert run.protocol.first_seed == FRESH_SEEDS and "seeds 1000-1006, fresh" in "\n".join(run.protocol.markdown())
    assert "Pre-registered on 2026-11-27" in run.protocol.notes[0]
    parts = [p for part in run.run_specs for p in grid_points(load_spec(part, check_paths=False))]
    assert sorted((p["variant"], p["seed"]) for p in parts) == sorted((p["variant"], p["seed"]) for p in points)


@pytest.mark.parametrize("study", CONTROLS)
def test_each_control_is_its_own_study_with_the_committed_ones_recipe_and_endpoint(study):
    run, committed = _one(study), _one(CONTROLS[study])
    assert run.spec["name"] != committed.spec["name"] and not run.spec["name"].startswith(committed.spec["name"])
    for key in ("data", "training"):
        assert run.spec[key] == committed.spec[key], key
    for field in ("kind", "metric", "margin", "large_margin", "epochs", "lr", "image_size", "failure_rule"):
        assert getattr(run.protocol, field) == getattr(committed.protocol, field), field
    assert run.protocol.recipe == committed.protocol.recipe
    assert not set(run.protocol.claims) & set(committed.protocol.claims)  # new claims, a family of their own


def test_the_init_control_re_decides_layerscale_against_t_fixup_with_the_init_matched():
    run, committed = _one("cait-init-control"), _one("cait-residual-schemes")
    assert ("d12-layerscale", ">=", "d12-t-fixup+ln") in committed.protocol.claims
    assert run.protocol.claims[0] == ("d12-layerscale-xavier", ">=", "d12-t-fixup+ln")  # the primary claim
    assert run.protocol.claims[1] == ("d12-prenorm-xavier", ">=", "d12-t-fixup+ln")
    spec = load_spec(run.spec, check_paths=False)
    models = {v: build_trial_config(spec, {"variant": v, "seed": FRESH_SEEDS})["model"] for v in run.spec["variants"]}
    assert models["d12-layerscale-xavier"]["init"] == models["d12-prenorm-xavier"]["init"] == "xavier"
    assert models["d12-layerscale"].get("init") is None and models["d12-t-fixup+ln"]["keep_norm"] is True
    for name in ("d12-layerscale", "d12-t-fixup+ln"):  # the same variants as the committed study's
        assert run.spec["variants"][name] == committed.spec["variants"][name]
    assert run.spec["base_model"] == committed.spec["base_model"]
    # two parts at the cpu scale, the primary claim's pair first; --only that pair keeps its part
    assert [p["params"]["variant"]["choice"] for p in run.parts] == [
        ["d12-layerscale-xavier", "d12-t-fixup+ln"],
        ["d12-prenorm-xavier", "d12-layerscale"],
    ]
    only = select_variants(run, ("d12-layerscale-xavier", "d12-t-fixup+ln"))
    assert [p["name"] for p in only.run_specs] == ["cait-init-control-cpu-mnist5k-part1"]
    assert only.protocol.claims_run == (run.protocol.claims[0],)


def test_the_rezero_control_uses_cait_s_rezero_and_cait_depth_s_model():
    run, committed = _one("cait-depth-rezero-ln"), _one("cait-depth")
    assert run.protocol.claims == (("d12-layerscale", ">=", "d12-rezero+ln"),)
    assert run.spec["variants"]["d12-rezero+ln"] == {"depth": 12, "residual": "rezero", "keep_norm": True}
    assert run.spec["variants"]["d12-layerscale"] == committed.spec["variants"]["d12-layerscale"]
    assert committed.spec["variants"]["d12-rezero"] == {"depth": 12, "residual": "rezero"}  # as registered, run


def test_the_class_attention_control_is_parameter_matched():
    run = _one("cait-class-attention-matched")
    assert run.protocol.claims == (("4+2", ">", "6+0"),)
    described = {v["name"]: v["params"] for v in planning.describe(run, timed=False)["variants"]}
    assert abs(described["4+2"] - described["6+0"]) / described["6+0"] < 0.001
    assert f"{described['4+2']:,}" in run.protocol.notes[1] and f"{described['6+0']:,}" in run.protocol.notes[1]


@pytest.mark.parametrize("study", CONTROLS)
def test_the_plan_lists_the_variants_their_fresh_seeds_and_the_claims(study):
    result = CliRunner().invoke(main, ["reproduce", study, "--scale", "cpu", "--plan"])
    assert result.exit_code == 0, result.output
    run = _one(study)
    assert "7 seeds per variant (seeds 1000-1006, fresh" in result.output.splitlines()[0]
    for variant in run.spec["variants"]:
        assert any(line.split()[:2] == [variant, "7"] for line in result.output.splitlines()), variant
    assert "claims: " + "; ".join(" ".join(c) for c in run.protocol.claims) in result.output


def test_seeds_other_than_the_default_keep_the_fresh_start():
    run = _one("cait-init-control", "tiny", 2)
    assert {p["seed"] for p in grid_points(load_spec(run.spec, check_paths=False))} == {FRESH_SEEDS, FRESH_SEEDS + 1}
    assert not run.parts  # parts are the cpu scale's registered design
