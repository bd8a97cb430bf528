"""Per-image test predictions of a reproduction's runs: the sidecar beside its runs file, and the
seed x image bootstrap of a difference on the test split.

Every run of a reproduction is scored on the same fixed test images, so the spread over seeds (the
t-interval of the exploratory test-split table) leaves out the test split's own sampling error. A
run completed since schema 0008 keeps the predicted class of each test image (``trials.training.predictions``,
the store's ``archsearch_test_predictions``); with those, :func:`seed_image_interval` resamples the
seeds in pairs (a seed's runs of both variants together) and the test images jointly for both variants
(they share the split), t-calibrated, so the interval includes that error. Runs from before then have
none, and the summary says so (:data:`NO_PREDICTIONS`); nothing is made up for them.

Beside ``<name>.runs.csv`` a reproduction writes ``<name>.predictions.csv.gz`` (when any run has
predictions): one row per such run, ``study``, ``number`` (the runs file's), ``classes``, ``images``,
``labels``, ``predictions`` (base64, ``TestPredictions.encode()``); gzip without a timestamp, so the
same runs give the same bytes. :func:`read_sidecar` validates it against the runs file: every row
names a completed run of it once, decodes, and its accuracy against its labels is that run's
``test_top1`` (the predictions come from the pass that gave it).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dashboards.files import OutputSet, atomic_write
from trials.errors import DataError, capped
from trials.lazy import lazy_import
from trials.status import TrialStatus
from trials.training.predictions import MAX_IMAGES, PredictionsError, TestPredictions

stats = lazy_import("scipy.stats")  # when an interval is computed: the CLI stays light at start-up

PREDICTIONS_SUFFIX = ".predictions.csv.gz"
SIDECAR_COLUMNS = ("study", "number", "classes", "images", "labels", "predictions")
NO_PREDICTIONS = "no per-image predictions (run before 2026-11-27)"
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0
# A sidecar field's largest size: two-byte indices of MAX_IMAGES images, in base64.
_FIELD_LIMIT = 4 * -(-2 * MAX_IMAGES // 3) + 16
TOP1_TOLERANCE = 1e-9  # the runs file's 17 digits against the predictions' own accuracy

Key = tuple[str, int]  # (study, trial number): a run, as the runs file names it


def store_predictions(store, studies: Iterable[str]) -> dict[Key, TestPredictions]:
    """(study, number) -> predictions, for every run of ``studies`` the store keeps them for."""
    found: dict[Key, TestPredictions] = {}
    for study in studies:
        found.update({(study, number): kept for number, kept in store.test_predictions(study).items()})
    return found


def sidecar_path(runs_path: Path) -> Path:
    """``<name>.predictions.csv.gz`` beside ``<name>.runs.csv``."""
    name = runs_path.name
    stem = name[: -len(".runs.csv")] if name.endswith(".runs.csv") else runs_path.stem
    return runs_path.with_name(f"{stem}{PREDICTIONS_SUFFIX}")


def write_sidecar(
    path: Path, runs: pd.DataFrame, predictions: Mapping[Key, TestPredictions], outputs: OutputSet | None = None
) -> Path | None:
    """Write the predictions of the runs in ``runs`` (by study and number, in the runs' order) to
    ``path`` atomically (staged in ``outputs``, when given, to land with the files beside it); with
    none, remove a stale one and write nothing (None)."""
    keys = []
    if "study" in runs and "number" in runs:
        keys = [(str(s), int(n)) for s, n in zip(runs["study"], runs["number"], strict=True)]
    kept = [key for key in keys if key in predictions]
    if not kept:
        path.unlink(missing_ok=True)
        return None
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(SIDECAR_COLUMNS)
    for study, number in kept:
        record = predictions[study, number]
        encoded = record.encode()
        writer.writerow([study, number, encoded["classes"], record.count, encoded["labels"], encoded["predictions"]])
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as packed:
        packed.write(text.getvalue().encode("utf-8"))
    if outputs is not None:
        outputs.write(path, buffer.getvalue())
    else:
        atomic_write(path, buffer.getvalue())
    return path


def read_sidecar(path: Path, runs: pd.DataFrame) -> dict[Key, TestPredictions]:
    """The predictions a runs file's sidecar holds ({} where there is none), each row checked against
    ``runs`` (the runs file, validated): a row that is not a completed run of it, names one twice,
    does not decode, or whose accuracy is not the run's ``test_top1`` is refused with a
    :class:`DataError` naming the file, the line and the run."""
    if not path.is_file():
        return {}
    name = str(path)
    completed: dict[Key, float] = {}
    if "study" in runs and "number" in runs:
        done = runs["status"].astype(str) == TrialStatus.COMPLETED
        tops = runs["test_top1"] if "test_top1" in runs else pd.Series(math.nan, index=runs.index)
        completed = {
            (str(s), int(n)): float(t)
            for s, n, t, d in zip(runs["study"], runs["number"], tops, done, strict=True)
            if d
        }
    csv.field_size_limit(max(csv.field_size_limit(), _FIELD_LIMIT))  # base64 of a large split is one field
    found: dict[Key, TestPredictions] = {}
    line = 1
    try:
        with gzip.open(path, mode="rt", encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            if header is None or tuple(h.strip() for h in header) != SIDECAR_COLUMNS:
                raise DataError(f"{name} line 1: the header is not {','.join(SIDECAR_COLUMNS)}")
            for row in reader:
                line = 1 + reader.line_num
                if not row:
                    continue
                found.update(_sidecar_row(name, reader.line_num, row, completed, found))
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise DataError(f"{name}: not a readable gzip file ({getattr(error, 'strerror', None) or error})") from None
    except csv.Error as error:
        raise DataError(f"{name} line {line}: not CSV ({error})") from None
    except UnicodeDecodeError:
        raise DataError(f"{name}: not UTF-8 text") from None
    return found


def _sidecar_row(
    name: str, line: int, row: Sequence[str], completed: Mapping[Key, float], found: Mapping[Key, TestPredictions]
) -> dict[Key, TestPredictions]:
    where = f"{name} line {line}"
    if len(row) != len(SIDECAR_COLUMNS):
        raise DataError(f"{where}: {len(row)} fields where the header has {len(SIDECAR_COLUMNS)}")
    study, number, classes, images, labels, values = (cell.strip() for cell in row)
    if not number.isdigit() or len(number) > 12 or not classes.isdigit() or len(classes) > 6:
        raise DataError(f"{where}: number {capped(number)!r} or classes {capped(classes)!r} is not a whole number")
    if not images.isdigit() or len(images) > 9:
        raise DataError(f"{where}: images {capped(images)!r} is not a whole number")
    key = (study, int(number))
    run = f"trial {number} of study {capped(study)!r}"
    if key not in completed:
        raise DataError(f"{where}: {run} is not a completed run of the runs file")
    if key in found:
        raise DataError(f"{where}: {run} appears twice")
    try:
        record = TestPredictions.decode({"classes": int(classes), "labels": labels, "predictions": values})
    except PredictionsError as error:
        raise DataError(f"{where}: the predictions of {run} do not read back: {error}") from None
    if record.count != int(images):
        raise DataError(f"{where}: {run} holds {record.count:,} images, not {images}")
    top1 = completed[key]
    if not (math.isfinite(top1) and abs(record.top1() - top1) <= TOP1_TOLERANCE):
        raise DataError(
            f"{where}: the predictions of {run} score {record.top1():.17g}% against their labels, "
            f"not its test_top1 ({top1:.17g}): they are not that run's"
        )
    return {key: record}


def seed_image_interval(
    correct_a: np.ndarray,
    correct_b: np.ndarray,
    *,
    paired: bool = True,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[float, float]:
    """The interval of A - B in mean test top-1 (points) from a two-level bootstrap, t-calibrated.

    ``correct_a``: seeds x images, whether each run of A got each test image right (``correct_b``
    likewise, over the same images in the same order). ``paired``: row k of both is the same seed (one
    data order and split for both variants, as a reproduction runs them), so a resample draws the seeds
    in pairs: a seed's two runs enter together, and the correlation they share cancels in A - B as it
    does in the paired t-test over seeds. Unpaired, each variant's seeds are drawn on their own. Each
    resample, in this order from one ``numpy.random.default_rng(seed)``: the seeds with replacement
    (paired: ``integers(0, n, n)`` once; unpaired: A's ``integers(0, n_a, n_a)``, then B's), then the
    images (``integers(0, N, N)``), the same images for both variants; the difference of the two means
    over the drawn seeds and images.

    The interval is the estimate (the difference of the full means) +- Student's t at ``level`` with
    n - 1 degrees of freedom (n: the fewer seeds of the two, the scarce level) times the resampled
    differences' standard deviation. Why not their percentiles: over 7 seeds a percentile bootstrap is
    too narrow (it resamples a spread that is (n - 1) / n of the sample's, with normal tails where the
    seed level has 6 degrees of freedom); the t-calibration makes it agree with the t-interval over seeds
    where the images add nothing, and wider where they do.
    """
    a, b = np.asarray(correct_a, dtype=float), np.asarray(correct_b, dtype=float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or 0 in (*a.shape, *b.shape):
        raise ValueError(f"seeds x images arrays over the same images, not {a.shape} and {b.shape}")
    if paired and a.shape[0] != b.shape[0]:
        raise ValueError(f"a paired design has one run of each variant per seed, not {a.shape[0]} and {b.shape[0]}")
    if resamples < 2:
        raise ValueError("at least two resamples")
    (n_a, images), n_b = a.shape, b.shape[0]
    seeds = min(n_a, n_b)
    if seeds < 2:
        return -math.inf, math.inf  # one seed: nothing is known of the seed-to-seed spread
    rng = np.random.default_rng(seed)
    differences = np.empty(resamples)
    for r in range(resamples):
        drawn_a = np.bincount(rng.integers(0, n_a, n_a), minlength=n_a)
        drawn_b = drawn_a if paired else np.bincount(rng.integers(0, n_b, n_b), minlength=n_b)
        weight = np.bincount(rng.integers(0, images, images), minlength=images)
        per_image = drawn_a @ a / n_a - drawn_b @ b / n_b  # each image's accuracy difference over the drawn seeds
        differences[r] = 100.0 * float(per_image @ weight) / images
    estimate = 100.0 * (float(a.mean()) - float(b.mean()))
    half = float(stats.t.ppf(0.5 + level / 2, seeds - 1)) * float(differences.std(ddof=1))
    return estimate - half, estimate + half


def correct_by_seed(
    runs_a: Sequence[Key], runs_b: Sequence[Key], predictions: Mapping[Key, TestPredictions]
) -> tuple[np.ndarray | None, np.ndarray | None, str | None]:
    """(A's seeds x images correctness, B's, None) for the runs ``runs_a`` and ``runs_b`` (in seed
    order), or (None, None, why not): none of the runs has predictions, some lack them, or their
    test labels differ (not one split)."""
    held = [predictions.get(key) for key in (*runs_a, *runs_b)]
    if not any(held):
        return None, None, NO_PREDICTIONS
    if not all(held):
        return None, None, f"per-image predictions for {sum(1 for h in held if h)} of {len(held)} runs only"
    first = held[0].labels
    if any(h.labels.shape != first.shape or not np.array_equal(h.labels, first) for h in held):
        return None, None, "the runs' test labels differ (not one split)"
    correct = np.stack([h.correct() for h in held])
    return correct[: len(runs_a)], correct[len(runs_a) :], None
