"""A study's trial checkpoints in its Ray Tune experiment dir: which trial each trial dir holds, what
stays when the study completes (``search.keep_checkpoints``), and a kept trial's final weights.

Ray names a trial dir after its trainable, its Tune id and a digest of its parameters; archsearch
numbers trials by Optuna's number, which the searcher puts into every config it dispatches
(:data:`harness.search.result_keys.NUMBER_KEY`). Ray writes each trial's config as ``params.json``
in its dir (Tune's ``JsonLoggerCallback``, which every search installs): a trial dir's number is
read from there, never parsed from the dir's name. A dir whose number cannot be read is nobody's
front member: its checkpoints go with the others'.

Nothing here follows a symbolic link: a trial dir, a checkpoint dir or a ``params.json`` that is
a link is skipped (removal included) and never read.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from harness.search.cluster.ray_setup import is_uri
from harness.search.result_keys import NUMBER_KEY
from harness.search.worker.trainable import CHECKPOINT_FILE, load_checkpoint
from trials.lazy import lazy_import

torch = lazy_import("torch")

PARAMS_FILE = "params.json"  # ray.air.constants.EXPR_PARAM_FILE
MAX_PARAMS_BYTES = 1_000_000  # a trial's config is a page of JSON; anything larger is not Ray's


# Ray names a trial dir after its config, whose first key is the trial number: ``..._archsearch_number=7,...``
NUMBER_IN_DIR_NAME = re.compile(rf"_{NUMBER_KEY}=(\d+)(?:[,_]|$)")


def trial_number(trial_dir: str | Path) -> int | None:
    """The archsearch trial number of a Ray trial dir, from the config Ray wrote into it, or where that
    ``params.json`` is not written yet (Ray's logger writes it after the trial's first results; a pruned
    trial's retry may look sooner) from the dir's name; None when neither carries one."""
    path = Path(trial_dir) / PARAMS_FILE
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_PARAMS_BYTES:
            named = NUMBER_IN_DIR_NAME.search(Path(trial_dir).name) if not path.exists() else None
            return int(named.group(1)) if named else None
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # unreadable, not UTF-8, not JSON
        return None
    number = config.get(NUMBER_KEY) if isinstance(config, dict) else None
    if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
        return number
    return None


def _real_dirs(parent: Path, pattern: str = "*") -> list[Path]:
    return sorted(p for p in parent.glob(pattern) if p.is_dir() and not p.is_symlink())


def trial_dirs(experiment: str | Path) -> dict[int | None, list[Path]]:
    """The experiment's trial dirs by trial number (None: the dirs whose number cannot be read). A
    number has several dirs only where Ray ran it as several Tune trials."""
    found: dict[int | None, list[Path]] = {}
    root = Path(experiment)
    if is_uri(str(experiment)) or root.is_symlink() or not root.is_dir():
        return found
    for directory in _real_dirs(root):
        found.setdefault(trial_number(directory), []).append(directory)
    return found


def prune_checkpoints(experiment: str | Path, keep: Collection[int] = ()) -> int:
    """Remove the trial checkpoints of a completed study (nothing is left to resume) but those of the
    trials numbered in ``keep`` (``search.keep_checkpoints: front``: the front's); Ray's small
    experiment state stays. Local or shared directories only; returns the bytes freed."""
    freed = 0
    for number, directories in trial_dirs(experiment).items():
        if number is not None and number in keep:
            continue
        for directory in directories:
            for checkpoint in _real_dirs(directory, "checkpoint_*"):
                freed += sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file() and not f.is_symlink())
                shutil.rmtree(checkpoint, ignore_errors=True)
    return freed


def kept_checkpoint(experiment: str | Path, number: int) -> Path | None:
    """The last checkpoint dir (one holding ``trainer.pt``) of trial ``number``, or None. Where Ray
    ran the number as several Tune trials, the most recently written checkpoint of them all."""
    found = []
    for directory in trial_dirs(experiment).get(number, []):
        for checkpoint in _real_dirs(directory, "checkpoint_*"):
            state = checkpoint / CHECKPOINT_FILE
            if state.is_file() and not state.is_symlink():
                found.append((state.stat().st_mtime, checkpoint.name, checkpoint))
    return max(found)[2] if found else None


def final_weights(checkpoint: str | Path) -> tuple[dict[str, Any], int]:
    """(the model's state dict, the epoch it was saved after) of a trial checkpoint, loaded onto the
    CPU with ``weights_only=True`` (:func:`harness.search.worker.trainable.load_checkpoint`): a
    tampered checkpoint on a shared results dir cannot run code. Raises ValueError when the file
    is not a trial checkpoint."""
    try:
        state = load_checkpoint(checkpoint)
    except Exception as error:  # a damaged or foreign file: torch raises several kinds
        raise ValueError(f"{Path(checkpoint) / CHECKPOINT_FILE} does not load as a trial checkpoint: {error}") from None
    model, epoch = (state.get("model"), state.get("epoch")) if isinstance(state, dict) else (None, None)
    if not isinstance(model, dict) or not all(isinstance(v, torch.Tensor) for v in model.values()):
        raise ValueError(f"{Path(checkpoint) / CHECKPOINT_FILE} holds no model state dict")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise ValueError(f"{Path(checkpoint) / CHECKPOINT_FILE} does not say which epoch it was saved after")
    return model, epoch


def state_bytes(state: dict[str, Any]) -> bytes:
    """A state dict as the bytes of the file ``torch.save`` writes (``init_from`` loads it)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()
