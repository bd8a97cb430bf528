"""A trial's per-image test predictions, kept compact: the predicted class of every test image, in
the split's order, with the split's labels beside them.

Why: every run of a reproduction is scored on the same fixed test images, so the test split's own
sampling error is invisible in the spread over seeds; with each run's predictions (and the labels)
a seed x image bootstrap puts it in an interval (:mod:`harness.reproduce.predictions`).

Both arrays are held as base64 text of little-endian unsigned integers, one per image: one byte
each up to 256 classes, two bytes up to 65,536 (1,000 MNIST digits: 1,336 characters each). The
predicted class is the top-1 index of the single test pass that gives ``test_top1``
(:func:`trials.training.evaluation.evaluate`), so the predictions' accuracy against the labels is exactly
that number. :meth:`TestPredictions.decode` is the one reader: bounded, and every value checked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_CLASSES = 65_536  # two bytes an index
MAX_IMAGES = 10_000_000  # a test split larger than any in use (ImageNet's validation set: 50,000)


class PredictionsError(ValueError):
    """Stored predictions that cannot be read back: what is wrong, in words."""


def _width(classes: int) -> np.dtype:
    return np.dtype("<u1") if classes <= 256 else np.dtype("<u2")


@dataclass(frozen=True, eq=False)
class TestPredictions:
    """The predicted class and the label of each test image, in the split's order."""

    __test__ = False  # not a pytest class, whatever its name

    classes: int
    predictions: np.ndarray  # int64, one per image
    labels: np.ndarray

    @property
    def count(self) -> int:
        return int(self.labels.shape[0])

    def correct(self) -> np.ndarray:
        """Whether each image was classified correctly (bool, one per image)."""
        return self.predictions == self.labels

    def top1(self) -> float:
        """Top-1 accuracy in percent, as :func:`trials.training.evaluation.evaluate` computes it."""
        return 100.0 * float(np.count_nonzero(self.correct())) / max(self.count, 1)

    def labels_sha256(self) -> str:
        """The labels' identity (the split's): equal for runs scored on the same images."""
        return hashlib.sha256(_encode(self.labels, self.classes).encode("ascii")).hexdigest()

    def encode(self) -> dict[str, Any]:
        """``{"classes", "labels", "predictions"}``: what a result and the store carry."""
        return {
            "classes": int(self.classes),
            "labels": _encode(self.labels, self.classes),
            "predictions": _encode(self.predictions, self.classes),
        }

    @classmethod
    def from_arrays(cls, predictions: Any, labels: Any, classes: int) -> TestPredictions:
        """Checked arrays (any integer sequence) as a record."""
        if not isinstance(classes, int) or isinstance(classes, bool) or not 1 <= classes <= MAX_CLASSES:
            raise PredictionsError(f"classes {classes!r} is not a whole number in [1, {MAX_CLASSES:,}]")
        pred = np.asarray(predictions, dtype=np.int64).reshape(-1)
        true = np.asarray(labels, dtype=np.int64).reshape(-1)
        if pred.shape != true.shape:
            raise PredictionsError(f"{pred.shape[0]:,} predictions for {true.shape[0]:,} labels")
        if true.shape[0] > MAX_IMAGES:
            raise PredictionsError(f"{true.shape[0]:,} images, more than {MAX_IMAGES:,}")
        for name, values in (("prediction", pred), ("label", true)):
            if values.size and (values.min() < 0 or values.max() >= classes):
                raise PredictionsError(f"a {name} outside the {classes} classes [0, {classes - 1}]")
        return cls(classes, pred, true)

    @classmethod
    def decode(cls, value: Any) -> TestPredictions:
        """The record from :meth:`encode`'s mapping, every part checked (a :class:`PredictionsError`)."""
        if not isinstance(value, dict):
            raise PredictionsError(f"is {type(value).__name__}, not a mapping of classes, labels, predictions")
        missing = [key for key in ("classes", "labels", "predictions") if key not in value]
        if missing:
            raise PredictionsError(f"has no {missing[0]!r}")
        classes = value["classes"]
        if not isinstance(classes, int) or isinstance(classes, bool) or not 1 <= classes <= MAX_CLASSES:
            raise PredictionsError(f"classes {str(classes)[:20]!r} is not a whole number in [1, {MAX_CLASSES:,}]")
        labels = _decode(value["labels"], classes, "labels")
        predictions = _decode(value["predictions"], classes, "predictions")
        return cls.from_arrays(predictions, labels, classes)


def _encode(values: np.ndarray, classes: int) -> str:
    return base64.b64encode(np.asarray(values).astype(_width(classes)).tobytes()).decode("ascii")


def _decode(text: Any, classes: int, what: str) -> np.ndarray:
    width = _width(classes)
    if not isinstance(text, str):
        raise PredictionsError(f"{what} is {type(text).__name__}, not base64 text")
    if len(text) > 4 * -(-MAX_IMAGES * width.itemsize // 3):  # bounded before any decoding
        raise PredictionsError(f"{what} is longer than {MAX_IMAGES:,} images")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise PredictionsError(f"{what} is not base64 text") from None
    if len(raw) % width.itemsize:
        raise PredictionsError(f"{what} holds {len(raw)} bytes, not whole {width.itemsize}-byte indices")
    return np.frombuffer(raw, dtype=width).astype(np.int64)
