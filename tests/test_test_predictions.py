"""Per-image test predictions (issue 48, deliverable 3): kept from the one test pass, stored per trial,
written beside a reproduction's runs file, and the seed x image bootstrap computed from them.

A trial whose data has a test split keeps the predicted class of every test image from the pass that
gives ``test_top1`` (their accuracy is that number exactly); the store keeps them in their own table
(SQLite and PostgreSQL), the store writer takes them from Ray Tune's last result; a reproduction writes
them to ``<name>.predictions.csv.gz``, and the test-split table's ``95% CI, seeds x images`` column is
recomputed from that file. Runs from before predictions were kept say so; nothing is made up.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as scipy_stats
from sqlalchemy import create_engine, text

from harness.reproduce.analysis import pairs_on_test_split
from harness.reproduce.predictions import (
    BOOTSTRAP_RESAMPLES,
    NO_PREDICTIONS,
    read_sidecar,
    seed_image_interval,
    sidecar_path,
)
from harness.reproduce.records import recompute_test_pairs, write_records
from harness.reproduce.studies import Protocol
from harness.reproduce.summary import _test_split_pairs, markdown_summary
from harness.search.record.trial_end import record_outcome
from harness.search.result_keys import NUMBER_KEY, PREDICTIONS_KEY, STATUS_KEY
from harness.store import Store
from search_space.validation import load_spec
from trials.errors import DataError
from trials.training.predictions import PredictionsError, TestPredictions

PRESETS = Path(__file__).resolve().parent.parent / "search_space" / "presets"

# -- the trial: one pass, predictions whose accuracy is test_top1 --------------------------------------


def test_a_tiny_mnist5k_trial_keeps_predictions_whose_accuracy_is_its_test_top1_exactly():
    from trials.config.data_config import DataConfig
    from trials.data.loading import _mnist5k_splits
    from trials.runner import run_trial

    result = run_trial(
        {
            "model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2},
            "data": {"name": "mnist5k", "train_size": 256, "batch_size": 64, "image_size": 32},
            "training": {"epochs": 1, "lr": 1e-3, "warmup_epochs": 0},
            "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        }
    )
    assert result.status == "completed", result.error
    kept = result.test_predictions
    assert kept is not None and kept.count == 1000 and kept.classes == 10
    assert kept.top1() == result.final["test_top1"]  # exactly: the same top-1 indices, the same pass
    test_labels = _mnist5k_splits(DataConfig(name="mnist5k", seed=0, train_size=256))[2].labels.numpy()
    assert np.array_equal(kept.labels, test_labels)  # in the split's order
    again = TestPredictions.decode(kept.encode())
    assert np.array_equal(again.predictions, kept.predictions) and np.array_equal(again.labels, kept.labels)
    assert len(kept.encode()["predictions"]) == 1336  # one byte an image, in base64
    assert "test_predictions" not in result.final and "test_predictions" not in result.to_dict()


class _Data:
    def __init__(self, test, num_classes):
        self.test, self.num_classes = test, num_classes


class _Trainer:
    """What test_metrics reads of a trainer: its data and one evaluate, counted."""

    def __init__(self, logits, labels):
        self.data = _Data([(logits[:3], labels[:3]), (logits[3:], labels[3:])], 4)
        self.passes = 0

    def evaluate(self, source, keep=None):
        from trials.training import evaluation

        self.passes += 1
        return evaluation.evaluate(lambda x: x, source, 4, torch.device("cpu"), keep)


def test_the_predictions_come_from_the_one_test_pass_that_gives_test_top1():
    from trials.runner import test_metrics, test_predictions

    logits = torch.tensor([[0, 5, 0, 0], [9, 1, 0, 0], [0, 0, 0, 2], [1, 1, 3, 0], [0, 4, 0, 0.0]])
    labels = torch.tensor([1, 0, 2, 2, 3])
    trainer = _Trainer(logits, labels)
    first, second = test_metrics(trainer), test_metrics(trainer)
    assert trainer.passes == 1 and first == second  # evaluated once, kept
    kept = test_predictions(trainer)
    assert kept.predictions.tolist() == [1, 0, 3, 2, 1] and kept.labels.tolist() == [1, 0, 2, 2, 3]
    assert kept.top1() == first["test_top1"] == 60.0


def test_stored_predictions_are_checked_as_they_are_read():
    good = TestPredictions.from_arrays([1, 2], [1, 0], 3).encode()
    for damaged, words in (
        ({**good, "predictions": "not*base64"}, "not base64"),
        ({**good, "classes": 2}, "outside the 2 classes"),
        ({**good, "labels": TestPredictions.from_arrays([1], [1], 3).encode()["labels"]}, "2 predictions for 1"),
        ({k: v for k, v in good.items() if k != "labels"}, "has no 'labels'"),
    ):
        with pytest.raises(PredictionsError, match=words):
            TestPredictions.decode(damaged)
    wide = TestPredictions.from_arrays([999, 0], [999, 1], 1000)  # > 256 classes: two bytes an index
    assert TestPredictions.decode(wide.encode()).predictions.tolist() == [999, 0]


# -- the store, on SQLite and PostgreSQL -----------------------------------------------------------------


def test_predictions_round_trip_through_the_store_writer_and_the_store(store_url):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 1000, 300)
    kept = TestPredictions.from_arrays(np.where(rng.random(300) < 0.7, labels, 0), labels, 1000)
    with Store.open(store_url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        spec = load_spec(PRESETS / "quickstart.yaml").model_dump(mode="json")
        # Ray Tune's last result of a completed trial, as the worker reports it (harness.search.worker.trainable)
        result = {STATUS_KEY: "completed", "final_test_top1": kept.top1(), "final_top1": 50.0,
                  PREDICTIONS_KEY: kept.encode()}  # fmt: skip
        record_outcome(store, "s", spec, {NUMBER_KEY: 0}, result, build=lambda spec, params: {"seed": 0})
        pruned = {"top1": 10.0, "epoch": 1, PREDICTIONS_KEY: kept.encode()}  # a pruned trial ran no test pass
        record_outcome(store, "s", spec, {NUMBER_KEY: 1}, pruned, build=lambda spec, params: {"seed": 1})
        read = store.test_predictions("s")
        assert list(read) == [0]
        assert np.array_equal(read[0].predictions, kept.predictions) and np.array_equal(read[0].labels, labels)
        assert read[0].top1() == store.trials("s").set_index("number").loc[0, "test_top1"]
        assert "test_predictions" not in store.trials("s").columns  # the final metrics stay numbers
        assert store.delete_study("s")["test_predictions"] == 1


def test_a_damaged_predictions_row_is_left_out_and_noted(store_url):
    kept = TestPredictions.from_arrays([1, 2, 0], [1, 2, 2], 3)
    with Store.open(store_url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        for number in (0, 1):
            store.finish_trial("s", number, status="completed", config={}, test_predictions=kept)
        engine = create_engine(store_url.replace("postgresql://", "postgresql+psycopg://"))
        with engine.begin() as conn:
            conn.execute(text("UPDATE archsearch_test_predictions SET predictions = 'AA*A' WHERE trial_id = "
                              "(SELECT id FROM archsearch_trials WHERE number = 1)"))  # fmt: skip
        engine.dispose()
        assert list(store.test_predictions("s")) == [0]
        (problem,) = store.damaged_rows("s")
        assert problem.trial == 1 and problem.column == "test_predictions" and "not base64" in str(problem)


# -- the bootstrap -------------------------------------------------------------------------------------


def _loops(correct_a, correct_b, resamples, seed, level=0.95, paired=True):
    """The seed x image bootstrap written out with loops, from the docstring's protocol alone."""
    rng = np.random.default_rng(seed)
    n_a, n_b, images = len(correct_a), len(correct_b), len(correct_a[0])
    differences = []
    for _ in range(resamples):
        seeds_a = rng.integers(0, n_a, n_a)
        seeds_b = seeds_a if paired else rng.integers(0, n_b, n_b)
        drawn = rng.integers(0, images, images)
        total_a = sum(int(correct_a[s][i]) for s in seeds_a for i in drawn)
        total_b = sum(int(correct_b[s][i]) for s in seeds_b for i in drawn)
        differences.append(100.0 * (total_a / (n_a * images) - total_b / (n_b * images)))
    mean = sum(differences) / resamples
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (resamples - 1))
    estimate = 100.0 * (np.mean(correct_a) - np.mean(correct_b))
    half = scipy_stats.t.ppf(0.5 + level / 2, min(n_a, n_b) - 1) * sd
    return estimate - half, estimate + half


def _correct(rng, seeds, images, accuracy):
    easy = rng.random(images)  # an image's difficulty, shared by every run: the split's own structure
    return [(easy + rng.normal(0, 0.3, images)) < accuracy + 0.0 for _ in range(seeds)]


@pytest.mark.parametrize("paired", [True, False])
def test_the_bootstrap_matches_an_independent_computation_and_narrows_with_more_images(paired):
    rng = np.random.default_rng(7)
    a, b = _correct(rng, 4, 60, 0.8), _correct(rng, 4 if paired else 3, 60, 0.6)
    low, high = seed_image_interval(np.array(a), np.array(b), paired=paired, resamples=300, seed=5)
    expected = _loops(a, b, 300, 5, paired=paired)
    assert (low, high) == pytest.approx(expected, abs=1e-9)
    assert low < 100 * (np.mean(a) - np.mean(b)) < high
    assert seed_image_interval(np.array(a), np.array(b), paired=paired, resamples=300, seed=6) != (low, high)

    widths = []
    for images in (200, 5000):
        rng = np.random.default_rng(3)
        difficulty = rng.random(images)
        a = np.array([difficulty + rng.normal(0, 0.1, images) < 0.85 for _ in range(6)])
        b = np.array([difficulty + rng.normal(0, 0.1, images) < 0.80 for _ in range(6)])
        low, high = seed_image_interval(a, b, paired=paired, resamples=BOOTSTRAP_RESAMPLES)
        widths.append(high - low)
    assert widths[1] < widths[0] / 2  # 25 times the images: about a fifth of the width


def _seed_correlated(correlation: float, seeds: int = 7, images: int = 400):
    """Runs of A and B whose per-seed accuracies share a seed effect: ``correlation`` of the seed-level
    variation is common to a seed's two runs (its data order), the rest each run's own."""
    rng = np.random.default_rng(11)
    difficulty = rng.random(images)
    shared = rng.normal(0, 0.08, seeds)
    own_a, own_b = rng.normal(0, 0.08, seeds), rng.normal(0, 0.08, seeds)
    w, r = math.sqrt(correlation), math.sqrt(1 - correlation)
    a = np.array([difficulty < 0.75 + w * shared[k] + r * own_a[k] for k in range(seeds)])
    b = np.array([difficulty < 0.70 + w * shared[k] + r * own_b[k] for k in range(seeds)])
    return a, b


def test_a_paired_interval_narrows_as_the_seeds_correlation_grows_and_is_narrower_than_an_unpaired_one():
    """Issue 59: resampling A's and B's seeds independently in a paired design ignores the correlation a
    seed's two runs share; drawn in pairs it cancels in A - B, as in the paired t-test over seeds."""
    paired, unpaired = [], []
    for correlation in (0.0, 0.5, 0.9):
        a, b = _seed_correlated(correlation)
        low, high = seed_image_interval(a, b, paired=True)
        paired.append(high - low)
        low, high = seed_image_interval(a, b, paired=False)
        unpaired.append(high - low)
    assert paired[0] > paired[1] > paired[2]
    assert paired[2] < unpaired[2] / 2  # strongly correlated seeds: pairing removes most of the spread
    assert all(p < u for p, u in zip(paired[1:], unpaired[1:], strict=True))  # drawn apart, it is not used


def test_the_calibrated_interval_is_the_t_interval_over_seeds_where_the_images_add_nothing():
    """Every image alike within a run (a run's accuracy is its per-image rate): resampling images adds
    almost nothing, and the interval is close to the paired t-interval over seeds, not the narrower
    percentile interval a 7-seed bootstrap gives."""
    from dashboards.stats import difference

    a, b = _seed_correlated(0.5, images=4000)
    low, high = seed_image_interval(a, b)
    per_seed = difference(dict(enumerate(100 * a.mean(axis=1))), dict(enumerate(100 * b.mean(axis=1))))
    t_interval = per_seed.interval()
    assert (high - low) == pytest.approx(t_interval.high - t_interval.low, rel=0.25)


def test_a_paired_bootstrap_refuses_unequal_seeds():
    with pytest.raises(ValueError, match="one run of each variant per seed"):
        seed_image_interval(np.ones((3, 5)), np.ones((2, 5)), paired=True)


# -- the runs file's sidecar, and runs without predictions -----------------------------------------------

CLAIMS = (("A", ">", "B"),)


def _protocol(kind="accuracy"):
    return Protocol(
        study="s", kind=kind, dataset="mnist5k", image_size=32, train_size=100, epochs=1, seeds=6, lr=1e-3,
        metric="final test top-1", level=None, margin=1.0, large_margin=5.0, claims=CLAIMS, ranking="A > B",
    )  # fmt: skip


def _study(images=400, seeds=6):
    """Runs of A and B on one split, their predictions, and the runs table the store would give."""
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 10, images)
    rows, kept = [], {}
    for seed in range(seeds):
        for variant, accuracy in (("A", 0.9), ("B", 0.85)):
            predicted = np.where(rng.random(images) < accuracy, labels, (labels + 1) % 10)
            record = TestPredictions.from_arrays(predicted, labels, 10)
            number = len(rows)
            kept["s", number] = record
            rows.append({"variant": variant, "seed": seed, "status": "completed", "value": record.top1(),
                         "left_out": "", "top1": record.top1(), "test_top1": record.top1(), "params": 1e6,
                         "flops": 1e9, "study": "s", "number": number})  # fmt: skip
    return pd.DataFrame(rows), kept


def test_the_sidecar_is_written_beside_the_runs_file_and_the_interval_recomputes_from_it(tmp_path):
    runs, kept = _study()
    paths = write_records(tmp_path, "s", runs, [], "final test top-1", kept)
    assert paths[2] == tmp_path / "s.predictions.csv.gz" == sidecar_path(paths[0])
    first = paths[2].read_bytes()
    write_records(tmp_path, "s", runs, [], "final test top-1", kept)
    assert paths[2].read_bytes() == first  # no timestamp: the same runs, the same bytes
    assert "s,0,10,400," in gzip.decompress(first).decode()
    (in_memory,) = pairs_on_test_split(runs, list(CLAIMS), kept)
    (again,) = recompute_test_pairs(paths[0], _protocol())
    assert in_memory.images_note is None and (again.images_low, again.images_high) == (
        in_memory.images_low,
        in_memory.images_high,
    )
    assert again.images_low < again.diff_mean < again.images_high
    assert again.images_high - again.images_low > again.high - again.low  # the split's own error added
    line = _test_split_pairs([again], "generalisation")[-1]
    assert f"| [{again.images_low:.3f}, {again.images_high:.3f}] | 6 |" in line


def test_an_accuracy_studys_summary_puts_the_splits_error_back_beside_its_verdicts(tmp_path):
    """Where the registered metric is the test top-1 itself, the claims' intervals over seeds leave the
    split's error out: the summary shows the seed x image interval beside them, said to decide nothing,
    and names the seeds the study ran (a control's fresh seeds, not 0..n-1)."""
    runs, kept = _study()
    (pair,) = pairs_on_test_split(runs, list(CLAIMS), kept)
    table = _test_split_pairs([pair], "accuracy")
    assert "no verdict" in table[1] and "past 0" in table[1]
    assert f"| [{pair.images_low:.3f}, {pair.images_high:.3f}] | 6 |" in table[-1]
    fresh = dataclasses.replace(_protocol(), first_seed=1000)
    text = markdown_summary("s", fresh, [], [], "archsearch reproduce s", test_pairs=[pair])
    assert "every variant runs seeds 1000..1000+n-1" in text and "seeds 0..n-1" not in text
    assert table[-1] in text
    assert "every variant runs seeds 0..n-1" in markdown_summary("s", _protocol(), [], [], "c", test_pairs=[pair])


def test_a_sidecar_whose_predictions_are_not_the_runs_is_refused(tmp_path):
    runs, kept = _study()
    swapped = {**kept, ("s", 0): kept["s", 1], ("s", 1): kept["s", 0]}  # A's and B's seed-0 runs exchanged
    paths = write_records(tmp_path, "s", runs, [], "final test top-1", swapped)
    with pytest.raises(DataError, match=r"s.predictions.csv.gz line 2: the predictions of trial 0 of study 's' "
                                        r"score .* not its test_top1"):  # fmt: skip
        recompute_test_pairs(paths[0], _protocol())
    paths[2].write_bytes(b"not gzip")
    with pytest.raises(DataError, match="not a readable gzip file"):
        read_sidecar(paths[2], runs)


def test_runs_without_stored_predictions_say_so_in_the_table(tmp_path):
    runs, kept = _study()
    paths = write_records(tmp_path, "s", runs, [], "final test top-1")  # a run from before predictions
    assert len(paths) == 2 and not sidecar_path(paths[0]).exists()
    (pair,) = recompute_test_pairs(paths[0], _protocol())
    assert pair.images_low is None and pair.images_note == NO_PREDICTIONS
    line = _test_split_pairs([pair], "generalisation")[-1]
    assert f"| {NO_PREDICTIONS} | 6 |" in line
    some = {key: value for key, value in kept.items() if key[1] != 3}  # one run lacks them: no interval
    (partial,) = pairs_on_test_split(runs, list(CLAIMS), some)
    assert partial.images_low is None and partial.images_note == "per-image predictions for 11 of 12 runs only"
    write_records(tmp_path, "s", runs, [], "final test top-1", kept)
    write_records(tmp_path, "s", runs, [], "final test top-1")  # a stale sidecar does not outlive its runs
    assert not sidecar_path(paths[0]).exists()
