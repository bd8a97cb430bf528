"""The reproductions' registry, per-seed runs files and verdicts files (issue 33).

One registry of studies is read by the CLI, ``--plan`` and these tests; every scale of every study
builds; a summary's verdicts are decided from its runs table alone, so the verdicts file beside a
committed summary recomputes from the runs file beside it.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import tiny_search_spec

from harness.reproduce.analysis import summarize_runs
from harness.reproduce.records import read_runs, recompute, write_records
from harness.reproduce.registry import CLUSTER_SCALES, STUDIES, plan
from harness.reproduce.run import _finished_points
from harness.store import Store
from search_space.sampling import grid_points
from search_space.validation import load_spec

RECIPE_KEYS = {"lr", "warmup_epochs", "weight_decay", "label_smoothing", "epochs", "batch_size", "augmentation",
               "train_images", "image_size"}  # fmt: skip


def _every_run():
    for study in STUDIES.values():
        for scale in study.scales:
            cluster = scale in CLUSTER_SCALES and study.cluster_protocols
            for protocol in (cluster or study.protocols) or (None,):
                yield study.name, scale, protocol


@pytest.mark.parametrize(("study", "scale", "protocol"), list(_every_run()))
def test_every_scale_of_every_study_builds_a_valid_grid_with_its_recipe(study, scale, protocol, tmp_path):
    # A cluster scale trains on the user's ImageFolder (tests/test_cluster_scale.py builds one and runs it).
    data = ("imagefolder", str(tmp_path)) if scale in CLUSTER_SCALES else ("mnist5k", None)
    (run,) = plan(study, scale, 3, (protocol,) if protocol else (), *data)
    spec = load_spec(run.spec, check_paths=False)
    assert len(grid_points(spec)) == spec.search.n_trials
    assert set(run.protocol.recipe) >= RECIPE_KEYS
    assert run.protocol.recipe["epochs"] == run.protocol.epochs
    assert "- Recipe (every value as the runs resolve it" in "\n".join(run.protocol.markdown())


def test_the_cli_offers_exactly_the_registry():
    from harness.cli.run_commands import reproduce_command

    params = {p.name: p for p in reproduce_command.params}
    assert list(params["study"].type.choices) == list(STUDIES)
    assert set(params["protocols"].type.choices) == {p for s in STUDIES.values() for p in s.protocols}


def test_cpu_studies_default_to_7_seeds_and_the_named_comparison_runs_30():
    from harness.reproduce.studies import default_seeds

    assert default_seeds("cpu") == 7
    (run,) = plan("coatnet-layouts", "cpu", 7, ("generalisation",), "mnist5k", None)
    spec = load_spec(run.spec)
    counts = pd.DataFrame(grid_points(spec)).groupby("variant")["seed"].agg(list)
    assert counts["CCTT"] == list(range(30)) == counts["CTTT"]
    assert all(counts[v] == list(range(7)) for v in ("CCCC", "CCCT", "VIT-REL"))
    assert spec.search.n_trials == 2 * 30 + 3 * 7
    assert run.protocol.more_seeds == {"CCTT": 30, "CTTT": 30}
    text = "\n".join(run.protocol.markdown())
    assert "7 seeds per variant, CCTT 30, CTTT 30" in text and "82% power at 30" in text
    # run in three parts, each its own grid study of at most 30 runs, together exactly the grid
    parts = [load_spec(part) for part in run.parts]
    assert [p.name for p in parts] == [f"{spec.name}-part{k}" for k in (1, 2, 3)]
    assert [p.search.n_trials for p in parts] == [30, 30, 21]
    pooled = sorted((q["variant"], q["seed"]) for p in parts for q in grid_points(p))
    assert pooled == sorted((q["variant"], q["seed"]) for q in grid_points(spec))
    (other,) = plan("coatnet-layouts", "cpu", 5, ("generalisation",), "mnist5k", None)
    assert other.parts == ()  # another number of seeds than the registered design: one grid study


def _runs(seed: int = 0) -> pd.DataFrame:
    """A study's runs table: A better than B by about 1 point, C equal to B, 8 seeds each."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(8):
        base = 90.0 + rng.normal(0, 1)
        for variant, shift in (("A", 1.0), ("B", 0.0), ("C", 0.02)):
            value = base + shift + rng.normal(0, 0.2)
            rows.append({"variant": variant, "seed": s, "status": "completed", "value": value, "left_out": "",
                         "top1": value, "test_top1": value, "params": 1e6, "flops": 1e9,
                         "number": len(rows)})  # fmt: skip
    rows.append({"variant": "B", "seed": 8, "status": "diverged", "value": np.nan, "left_out": "", "top1": np.nan,
                 "params": 1e6, "flops": 1e9, "number": len(rows)})  # fmt: skip
    return pd.DataFrame(rows)


CLAIMS = [("A", ">", "B"), ("C", "~", "B"), ("B", ">=", "A")]


def _protocol():
    from harness.reproduce.studies import Protocol

    return Protocol(
        study="s", kind="accuracy", dataset="mnist5k", image_size=32, train_size=100, epochs=1, seeds=8, lr=1e-3,
        metric="final test top-1", level=None, margin=1.0, large_margin=5.0, claims=tuple(CLAIMS), ranking="A > B",
    )  # fmt: skip


def test_the_verdicts_file_recomputes_from_the_runs_file_and_an_edited_number_breaks_it(tmp_path):
    protocol = _protocol()
    runs = _runs()
    _, verdicts, metric = summarize_runs(runs, protocol, metric="final test top-1", margin=1.0, large_margin=5.0)
    runs_path, verdicts_path = write_records(tmp_path, "s", runs, verdicts, metric)
    committed = json.loads(verdicts_path.read_text())
    assert [v["claim"] for v in committed] == ["A > B", "C ~ B", "B >= A"]
    first = committed[0]
    assert set(first) == {"claim", "a", "b", "kind", "margin", "n", "diff_mean", "ci", "p_t", "p_exact", "p_holm",
                          "verdict"}  # fmt: skip
    assert (first["a"], first["kind"], first["b"], first["n"]) == ("A", ">", "B", 8)
    assert first["verdict"] == "holds" and first["p_exact"] == pytest.approx(1 / 256)  # every seed the same sign
    assert recompute(runs_path, protocol) == committed
    read, words = read_runs(runs_path)
    assert words == "final test top-1" and len(read) == len(runs) and read["status"].tolist() == runs["status"].tolist()
    # A referee edits one committed number: the recomputation no longer matches.
    lines = runs_path.read_text().splitlines()
    header = lines[1].split(",")
    row = lines[2].split(",")
    row[header.index("value")] = str(float(row[header.index("value")]) + 3.0)
    runs_path.write_text("\n".join([lines[0], lines[1], ",".join(row), *lines[3:]]) + "\n")
    assert recompute(runs_path, protocol) != committed


def test_a_loss_decision_at_its_floor_is_inconclusive():
    """A capacity claim resting on a difference smaller than the margin, where a loss sits within the
    margin of 0 (the referee's 'CCCT > CCCC does not hold' at 0.008 vs 0.015 with a 0.01 margin)."""
    from harness.reproduce.studies import Protocol

    rows = []
    for s in range(7):
        for variant, loss in (("CCCC", 0.007), ("CCCT", 0.015)):
            rows.append({"variant": variant, "seed": s, "status": "completed", "value": loss + 1e-4 * s,
                         "left_out": "", "params": 1e6, "flops": 1e9, "number": len(rows)})  # fmt: skip
    protocol = Protocol(
        study="c", kind="capacity", dataset="mnist5k", image_size=64, train_size=3000, epochs=4, seeds=7, lr=1e-3,
        metric="final train loss", level=None, margin=0.01, large_margin=5.0, claims=(("CCCT", ">", "CCCC"),),
        ranking="",
    )  # fmt: skip
    _, (verdict,), _ = summarize_runs(pd.DataFrame(rows), protocol, metric="loss", margin=0.01, large_margin=5.0)
    assert verdict["verdict"].startswith("inconclusive (floor: CCCC at 0.0073, within the 0.01 margin of 0")
    assert "unadjusted: does not hold" in verdict["verdict"]


def test_a_margin_other_than_the_registered_one_is_printed_as_a_deviation():
    from harness.reproduce.summary import markdown_summary

    protocol = _protocol()
    rows, verdicts, _ = summarize_runs(_runs(), protocol, metric="m", margin=2.0, large_margin=5.0)
    text = markdown_summary(
        "s", protocol, rows, verdicts, "cmd", deviations=["margin 2 instead of the pre-registered 1"]
    )
    assert "## Deviations from the pre-registration\n\n- margin 2 instead of the pre-registered 1" in text
    assert text.index("## Deviations") < text.index("## Results")
    assert "Test split: 1,000 fixed images" in text and "binomial standard error" in text


def test_a_protocol_for_a_study_with_one_protocol_is_refused_naming_the_option():
    """Found by the adversarial pass of issue 34: `reproduce cait-depth --protocol capacity --plan`
    planned cait-depth and exited 0, as if the option meant something."""
    from click.testing import CliRunner

    from harness.cli import main

    result = CliRunner().invoke(main, ["reproduce", "cait-depth", "--protocol", "capacity", "--plan"])
    assert result.exit_code == 2 and "--protocol capacity: cait-depth has one protocol" in result.output
    with pytest.raises(ValueError, match="has one protocol"):
        plan("cait-depth", "tiny", 2, ("generalisation",), "synthetic", None)


def test_a_part_interrupted_before_its_first_run_is_pooled_as_nothing(tmp_path):
    """A part whose search was interrupted before any trial is in the store with no trials: a
    continuation finds no finished runs in it, and the summary does not try to read its runs."""
    spec = load_spec(tiny_search_spec("empty-part"))
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.create_study("empty-part", spec.model_dump(mode="json"), dict(spec.objectives))
        assert _finished_points(store, ["empty-part"]) == set()
        assert store.study_counts("empty-part").total == 0
