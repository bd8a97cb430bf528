"""Several studies read together: ``pareto A B`` and ``report A B`` say what differs between them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from dashboards.compare import differences_line, differing_spec_keys, spec_differences
from harness.cli import main
from harness.store import Store
from search_space.sampling import build_trial_config
from search_space.validation import load_spec
from tests.conftest import tiny_search_spec


def _spec(name: str, dataset: str = "synthetic", **training) -> dict:
    spec = tiny_search_spec(name)
    spec["data"]["name"] = dataset
    spec["training"].update(training)
    return spec


def _labels(specs: dict) -> dict[str, dict[str, str]]:
    return {d.label: d.values for d in spec_differences(specs)}


def test_the_same_specs_differ_in_nothing_and_print_no_line():
    specs = {"a": _spec("a"), "b": json.dumps(_spec("b"))}  # stored as JSON text on some backends
    assert spec_differences(specs) == []
    assert differences_line(spec_differences(specs)) is None
    assert spec_differences({"a": _spec("a")}) == []  # one study: nothing to compare


def test_dataset_image_size_budget_and_objectives_are_named():
    other = _spec("b", "mnist5k", epochs=20)
    other["data"]["image_size"] = 28
    other["objectives"] = {"top1": "max", "throughput": "max"}
    found = _labels({"a": _spec("a"), "b": other})
    assert found["dataset"] == {"a": "synthetic", "b": "mnist5k"}
    assert found["image size"] == {"a": "32", "b": "28"}
    assert found["budget"] == {"a": "1", "b": "20"}
    assert found["objectives"] == {"a": "top1:max,flops:min", "b": "top1:max,throughput:max"}
    line = differences_line(spec_differences({"a": _spec("a"), "b": other}))
    assert line == (
        "studies differ: dataset synthetic (a) vs mnist5k (b); image size 32 vs 28; budget 1 vs 20 epochs; "
        "objectives top1:max,flops:min vs top1:max,throughput:max: their fronts are not comparable as one"
    )


def test_family_and_epochs_against_steps_keep_their_units():
    steps = _spec("b")
    steps["training"] = {"steps": 500, "lr": 1e-3}
    steps["family"] = "coatnet"
    found = _labels({"a": _spec("a"), "b": steps, "c": _spec("c")})
    assert found["family"] == {"a": "cait", "b": "coatnet", "c": "cait"}
    assert found["budget"] == {"a": "1 epochs", "b": "500 steps", "c": "1 epochs"}
    line = differences_line(spec_differences({"a": _spec("a"), "b": steps, "c": _spec("c")}))
    assert "family cait (a, c) vs coatnet (b)" in line and "budget 1 epochs (a, c) vs 500 steps (b)" in line


def test_the_spec_table_lists_only_the_dotted_keys_that_differ():
    rows = dict(differing_spec_keys({"a": _spec("a"), "b": _spec("b", "digits", epochs=3)}))
    assert rows == {"data.name": {"a": "synthetic", "b": "digits"}, "training.epochs": {"a": "1", "b": "3"}}
    assert "name" not in rows  # the spec's own name differs by construction


def _two_studies(url: str) -> None:
    """Study ``syn`` on synthetic data and ``dig`` on digits, two completed trials each."""
    with Store.open(url) as store:
        for name, dataset, base in (("syn", "synthetic", 90.0), ("dig", "digits", 40.0)):
            spec = load_spec(_spec(name, dataset), check_paths=False)
            store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives))
            for number, depth in enumerate((1, 2)):
                store.finish_trial(
                    name,
                    number,
                    status="completed",
                    config=build_trial_config(spec, {"depth": depth}),
                    measurement={"flops": 1e6 * depth, "params": 1000 * depth},
                    final={"top1": base + depth},
                    epochs=[{"epoch": 1, "top1": base + depth, "train_loss": 1.0}],
                )


def test_pareto_of_two_datasets_warns_in_one_line_on_stderr(store_url):
    _two_studies(store_url)
    result = CliRunner().invoke(main, ["pareto", "syn", "dig", "--store", store_url, "--format", "json"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: studies differ")]
    assert len(warnings) == 1 and "synthetic (syn)" in warnings[0] and "digits (dig)" in warnings[0]
    assert {row["study"] for row in json.loads(result.stdout)} <= {"syn", "dig"}  # stdout stays JSON
    table = CliRunner().invoke(main, ["pareto", "syn", "dig", "--store", store_url])
    assert table.exit_code == 0 and table.output.index("studies differ") < table.output.index("number")
    alone = CliRunner().invoke(main, ["pareto", "syn", "--store", store_url])
    assert alone.exit_code == 0 and "studies differ" not in alone.output


def test_report_of_two_studies_has_the_differences_and_one_combined_scatter(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _two_studies(url)
    out, pngs = tmp_path / "report.html", tmp_path / "png"
    result = CliRunner().invoke(main, ["report", "syn", "dig", "--store", url, "-o", str(out), "--png", str(pngs)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    combined = html[html.index('<section id="several-studies">') : html.index('<section id="study-1">')]
    assert "studies differ: dataset synthetic (syn) vs digits (dig)" in combined
    table = re.search(r'<table class="spec-differences">(.*?)</table>', combined, re.S).group(1)
    assert "data.name" in table and "synthetic" in table and "digits" in table and "training.epochs" not in table
    assert combined.count('<figure class="combined interactive">') == 1 and "coloured by study" in combined
    assert '"name":"study = syn"' in combined and '"name":"study = dig"' in combined  # one trace per study
    assert (pngs / "studies-pareto.png").stat().st_size > 0
    single = tmp_path / "single.html"
    assert CliRunner().invoke(main, ["report", "syn", "--store", url, "-o", str(single)]).exit_code == 0
    assert "several-studies" not in single.read_text()


def test_a_section_off_in_one_spec_shows_as_off_once_not_as_not_recorded_twice():
    """Issue 45 item 9: the spec table showed `search.early_stopping` and each `search.early_stopping.*`
    key, the latter as "not recorded" for the study that had no early stopping."""
    off = {"name": "a", "search": {"early_stopping": None, "n_trials": 4}}
    on = {"name": "b", "search": {"early_stopping": {"metric": "top1", "grace_period": 1}, "n_trials": 4}}
    rows = dict(differing_spec_keys({"a": off, "b": on}))
    assert set(rows) == {"search.early_stopping.metric", "search.early_stopping.grace_period"}
    assert rows["search.early_stopping.metric"] == {"a": "null (search.early_stopping)", "b": "top1"}
    assert "not recorded" not in str(rows)
