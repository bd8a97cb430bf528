"""The read-only study seam (``dashboards.reader.StudyReader``, ``StudyCounts``) and the public Python
API over it (``dashboards.load_study``), with the manual's example (docs/fronts-and-reports.md, linked from
the README) run as written."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards import StudyCounts, StudyReader, load_study
from dashboards.study import StudyNotFound
from harness.store import Store
from search_space.sampling import build_trial_config
from search_space.validation import load_spec
from tests.conftest import tiny_search_spec
from trials.config.trial_config import TrialConfig, load_trial_config

ROOT = Path(__file__).parents[1]


def _fill(url: str, name: str = "quickstart") -> dict:
    """A study of the tiny spec: three completed trials (depth 1 on the front alone: best top1, least
    FLOPs... but for trial 2's lower FLOPs), one failed, epochs for each, a verification of trial 0."""
    spec = load_spec(tiny_search_spec(name), check_paths=False)
    with Store.open(url) as store:
        store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives))
        rows = ((0, 1, 60.0, 2e6), (1, 2, 55.0, 3e6), (2, 1, 50.0, 1e6))
        for number, depth, top1, flops in rows:
            store.finish_trial(
                name,
                number,
                status="completed",
                config=build_trial_config(spec, {"depth": depth}),
                measurement={"flops": flops, "params": 1000 * depth, "throughput": 100.0},
                final={"top1": top1},
                epochs=[
                    {"epoch": 1, "top1": top1 - 5, "train_loss": 1.0},
                    {"epoch": 2, "top1": top1, "train_loss": 0.5},
                ],
            )
        store.finish_trial(name, 3, status="failed", config=build_trial_config(spec, {"depth": 2}), error="boom")
        store.record_verified(
            name, 0, {"throughput": 90.0, "throughput_min": 85.0, "throughput_max": 95.0, "rounds": 3}
        )
    return spec.model_dump(mode="json")


def test_the_store_is_a_study_reader(store_url):
    """Structurally: dashboards names the protocol, never the concrete class."""
    with Store.open(store_url) as store:
        assert isinstance(store, StudyReader)
    assert not isinstance("sqlite:///x.db", StudyReader)


def test_study_counts_are_typed_with_no_pseudo_status(store_url):
    _fill(store_url)
    with Store.open(store_url, create=False) as store:
        counts = store.study_counts("quickstart")
        by_status = store.counts("quickstart")
    assert isinstance(counts, StudyCounts)
    assert (counts.by_status["completed"], counts.by_status["failed"], counts.epochs, counts.total) == (3, 1, 6, 4)
    assert "epochs" not in counts.by_status and "epochs" not in by_status
    assert by_status == counts.by_status
    with pytest.raises(AttributeError):  # frozen: a snapshot of a read
        counts.total = 0  # type: ignore[misc]


def test_reading_a_study_whose_driver_is_dead_leaves_it_as_it_is(store_url):
    code = (
        "from harness.store import Store\n"
        f"s = Store.open({store_url!r}); s.create_study('orphan', {{}}, {{'top1': 'max'}}); s.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)  # its driver exits: gone
    with Store.open(store_url, create=False) as store:  # a writable store: reads still never write
        shown = store.studies().set_index("name").loc["orphan"]
        store.trials("orphan")
        store.study_counts("orphan")
        with load_study("orphan", store=store) as study:
            study.trials()
            study.front()
        assert shown["status"] == "interrupted" and "stopped before the search ended" in shown["message"]
        assert store.study("orphan")["status"] == "running"  # shown so, not recorded
        assert store.mark_interrupted() == ["orphan"]  # the explicit call records it
        assert store.study("orphan")["status"] == "interrupted"


def test_load_study_reads_the_front_trials_curves_hypervolume_spec_and_configs(store_url, monkeypatch):
    spec = _fill(store_url)
    monkeypatch.setenv("ARCHSEARCH_STORE", store_url)  # store=None: resolved as the CLI resolves --store
    with load_study("quickstart") as study:
        assert study.objectives == {"top1": "max", "flops": "min"}
        assert study.spec == spec and study.counts.total == 4
        front = study.front()
        assert front["number"].tolist() == [0, 2]  # best first on top1; trial 1 is dominated by 0
        assert front.loc[0, "throughput_verified"] == 90.0 and bool(front.loc[0, "on_verified_front"])
        assert "config.model.depth" in front.columns
        assert study.front("top1:max,params:min")["number"].tolist() == [0]
        assert len(study.trials()) == 4 and study.trials("failed")["number"].tolist() == [3]
        assert sorted(study.trials(["completed", "failed"])["number"]) == [0, 1, 2, 3]
        curves = study.learning_curves([1])
        assert curves["number"].unique().tolist() == [1] and curves["epoch"].tolist() == [1, 2]
        assert len(study.learning_curves()) == 6
        progress = study.hypervolume_progress()
        assert len(progress) == 4 and progress["hypervolume"].is_monotonic_increasing
        config = study.trial_config(1)
        assert isinstance(config, TrialConfig) and config.model.depth == 2
    with Store.open(store_url, create=False) as store:  # the stored config, read back as run_trial reads it
        assert config == load_trial_config(store.trial_records("quickstart", [1])[1]["config"])


def test_load_study_takes_a_url_and_refuses_an_unknown_study_without_writing(tmp_path):
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    _fill(url)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with load_study("quickstart", store=url) as study:
        study.front(), study.trials(), study.hypervolume_progress(), study.trial_config(0)
    with pytest.raises(StudyNotFound, match="known studies: quickstart"):
        load_study("nope", store=url)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_run_search_and_load_study_take_the_same_kinds_of_store_and_refuse_other_types(tmp_path):
    """Issue 57 (6): a URL, a path or an open Store reach the same store from both; any other type is a
    TypeError naming the argument, before anything is created (``Store`` once raised AttributeError:
    'Store' object has no attribute 'strip'; ``name=123`` said '123' is not a valid study name)."""
    from harness import run_search
    from harness.store import Store

    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    _fill(url)
    with Store.open(url) as store:
        for given in (url, path, store):
            with load_study("quickstart", store=given) as study:
                assert len(study.trials()) > 0
    spec = {"name": "typed"}  # never read: the arguments are refused first
    for arguments, named in (
        ({"store": 123}, "store"), ({"store": b"sqlite:///x.db"}, "store"), ({"store": url, "name": 123}, "name"),
        ({"store": url, "results_dir": 123}, "results_dir"),
        ({"spec": 5, "store": url}, "spec"), ({"spec": b"spec.yaml", "store": url}, "spec"),
        ({"spec": ["spec.yaml"], "store": url}, "spec"), ({"store": url, "address": 5}, "address"),
        ({"store": url, "resume": "no"}, "resume"), ({"store": url, "verbose": 1}, "verbose"),
    ):  # fmt: skip
        with pytest.raises(TypeError, match=f"run_search: {named} must be"):
            run_search(**{"spec": spec, **arguments})
    with pytest.raises(TypeError, match="load_study: store must be"):
        load_study("quickstart", store=123)
    with pytest.raises(TypeError, match="load_study: name must be"):
        load_study(123, store=url)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]  # nothing created by a refusal


def test_an_unknown_study_is_one_line_offering_the_nearest_names_first(tmp_path):
    """``load_study("quickstart")`` where a later demo named its study ``quickstart-<date>-<time>``: names
    are exact (as Optuna's), and the one typed error says which names are near, newest first, then the
    rest, capped; a 100,000-character name is echoed short."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    names = ["quickstart-20250101-120000", "quickstart-20250102-090000", "tour", *(f"other-{i:02d}" for i in range(30))]
    with Store.open(url) as store:
        for name in names:
            store.create_study(name, {"name": name}, {"top1": "max", "flops": "min"})
    with pytest.raises(StudyNotFound) as caught:
        load_study("quickstart", store=url)
    message = str(caught.value)
    assert isinstance(caught.value, LookupError) and "\n" not in message
    assert message.startswith(
        "study 'quickstart' not found (study names are exact); "
        "did you mean 'quickstart-20250102-090000' or 'quickstart-20250101-120000'? known studies: "
    )
    assert message.endswith(" and 13 more") and len(message) < 700
    with pytest.raises(StudyNotFound, match=r"did you mean 'tour'\?"):
        load_study("tuor", store=url)
    with pytest.raises(StudyNotFound) as long:
        load_study("x" * 100_000, store=url)
    assert len(str(long.value)) < 900 and "100,000 characters" in str(long.value)


MANUAL_PAGE = ROOT / "docs" / "fronts-and-reports.md"  # the manual's page the README's tour links for Python


def _readme_example() -> str:
    text = MANUAL_PAGE.read_text()
    section = text.split("\n## From Python: load a study", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the manual's load_study example (docs/fronts-and-reports.md) is gone"
    return match.group(1)


def test_the_readme_example_runs_on_a_real_study(tmp_path, monkeypatch, capsys):
    """Load a study, take its front, pick a member, get its config and train it three times as long."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _fill(url)
    monkeypatch.setenv("ARCHSEARCH_STORE", url)
    namespace: dict = {}
    exec(compile(_readme_example(), "docs/fronts-and-reports.md", "exec"), namespace)
    result, member, config = namespace["result"], namespace["member"], namespace["config"]
    assert member == 0 and config.training.epochs == 1
    assert result.status == "completed", result.error
    assert len(result.epochs) == 3 and result.config["training"]["epochs"] == 3
    ran, stored = result.config["model"], config.to_dict()["model"]  # the runner takes the classes from the data
    assert {k: v for k, v in ran.items() if k != "num_classes"} == {
        k: v for k, v in stored.items() if k != "num_classes"
    }
    assert "completed" in capsys.readouterr().out


@pytest.mark.parametrize("file_name", ["q%41.db", "runs?1.db", "a#b.db", "a b.db"])
def test_a_path_reaches_exactly_that_file_from_the_api_as_from_the_command_line(tmp_path, file_name):
    """A path is a file name taken literally, by one rule (search_space.url_secrets.sqlite_url_of_path):
    load_study(store=Path('q%41.db')) opened qA.db, and a '?' or '#' in a Path was refused."""
    from harness.store.urls import as_store_url

    path = tmp_path / file_name
    _fill(as_store_url(str(path)))
    with load_study("quickstart", store=path) as study:
        assert len(study.trials()) > 0
    assert {p.name for p in tmp_path.iterdir()} <= {file_name + end for end in ("", "-wal", "-shm")}
