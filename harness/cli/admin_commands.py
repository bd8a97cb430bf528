"""Commands that change or leave the store's studies as files: ``export`` (a stored trial as a trial
YAML that ``archsearch trial`` trains again) and the write half of ``studies`` (``--delete``,
``--rename``), which :mod:`.read_commands` hands over to :func:`manage_studies`.

The export keeps what decides the model and its training (``model``, ``data``, ``training``, ``measure``, ``seed``,
``precision``) and drops where the original run was placed (``cpus``, ``gpu_memory_fraction``, ``device``): those
were Ray's choices for that worker, and carried over they would pin a retrain to a share of a GPU or a CPU count it
no longer has. Data paths (``data.data_dir``) stay as stored: the export is meant to run where the study ran. The
CPU threads the trial ran with are kept as ``threads`` (a CPU result depends on them), and so is a data-parallel
trial's rank count, as ``distributed: {workers: N}``: its ranks split each global batch, but each draws its own
dropout and drop-path, so one process trains the same model to other numbers. On the same code and CPU,
``archsearch trial`` of the export trains to the stored numbers bit for bit.
With ``--weights W.pt`` the trial's final model weights, read from the checkpoint its search kept
(``search.keep_checkpoints: front``, :mod:`harness.search.checkpoints`), go to ``W.pt``, which the
YAML names as ``init_from`` (relative to the YAML): ``archsearch trial`` then fine-tunes them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click
import yaml

from dashboards.files import OutputRefused, OutputSet, check_output, write_output
from harness.cli.common import UsageError, open_store, store_option
from harness.output import format_number, printable
from harness.search.cluster.ray_setup import (
    SearchError,
    check_study_name,
    experiment_path,
    is_uri,
    storage_location,
)
from harness.search.experiment_guard import check_identity, check_purgeable, purge_experiment
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.lazy import lazy_import
from trials.status import TrialStatus

store_package = lazy_import("harness.store")  # SQLAlchemy
checkpoints = lazy_import("harness.search.checkpoints")  # torch, for --weights
warm_start = lazy_import("harness.search.propose.warm_start")  # Optuna's side: how a stored trial was placed

# Where the original run was placed: dropped from an export (see the module docstring).
YAML_EXTENSIONS = (".yaml", ".yml")  # export -o: a trial YAML
WEIGHTS_EXTENSIONS = (".pt", ".pth", ".ckpt")  # export --weights: torch.save's file
PLACEMENT_KEYS = ("cpus", "gpu_memory_fraction", "device", "distributed")


def exported_config(
    config: dict,
    study: str,
    number: int,
    *,
    epochs: int | None = None,
    steps: int | None = None,
    threads: int | None = None,
    ranks: int = 1,
) -> tuple[dict, list[str]]:
    """(the trial YAML's content, the keys of the stored config it dropped) for a stored config.

    ``epochs`` replaces the budget and clears a stored ``steps`` (which would otherwise win:
    ``TrainingConfig`` trains ``steps`` when given); ``steps`` sets a step budget. ``threads``: the
    CPU threads the trial ran with (recorded with it), kept because a CPU result depends on them; ``ranks``: its
    data-parallel ranks, kept (as ``distributed.workers``) where more than one, for the same reason."""
    dropped = [key for key in PLACEMENT_KEYS if key in config]
    exported = {key: value for key, value in config.items() if key not in PLACEMENT_KEYS}
    exported["name"] = f"{study}-trial{number}"
    if threads is not None:
        exported["threads"] = threads
    if ranks > 1:
        exported["distributed"] = {"workers": ranks}
    training = dict(exported.get("training") or {})
    if epochs is not None:
        training["epochs"] = epochs
        training.pop("steps", None)
    if steps is not None:
        training["steps"] = steps
    if epochs is not None or steps is not None:
        exported["training"] = training
    return exported, dropped


@click.command("export")
@click.argument("study")
@click.argument("number", type=int)
@click.option(
    "-o", "--output", "output", required=True, help="Trial YAML to write, named .yaml or .yml (- for standard output)."
)
@click.option(
    "--epochs",
    type=click.IntRange(min=1),
    default=None,
    help="Train this many epochs (clears a stored --steps budget).",
)
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Train this many optimiser steps instead.")
@click.option(
    "--weights",
    "weights",
    default=None,
    help="Also write the trial's final model weights here (its kept checkpoint); the YAML starts from them.",
)
@click.option(
    "--results-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="With --weights: where its search kept results (default ./ray_results).",
)
@store_option
def export_command(
    study: str,
    number: int,
    output: str,
    epochs: int | None,
    steps: int | None,
    weights: str | None,
    results_dir: str | None,
    store_url: str | None,
) -> None:
    """Write trial NUMBER of STUDY as a trial YAML that `archsearch trial` trains again: the same
    model (same params and FLOPs), data, training and seed; the original run's placement (cpus,
    GPU share, device, ranks) left out.

    Any trial with a stored config exports, an infeasible one too (with a warning: it was never
    trained, and breaks the study's constraints).

    With --weights W.pt, the trial's final model weights (from the checkpoint its search kept:
    `search.keep_checkpoints: front` keeps the front's) are written to W.pt and the YAML names them
    as `init_from` (relative to the YAML): `archsearch trial` then fine-tunes the trained model,
    with a fresh optimiser and schedule, instead of training it from scratch.

    Long because it checks every option of the command in the order the user reads them, each refusal one line
    naming its option.
    """
    if epochs is not None and steps is not None:
        raise UsageError("--epochs and --steps: give one budget, not both")
    if results_dir is not None and weights is None:
        raise UsageError("--results-dir goes with --weights (where the search kept the trial's checkpoint)")
    store_files = store_package.sqlite_files(store_package.resolve_store_url(store_url))
    try:  # looked at before anything is read or written: never the store, never a device or a link
        target = check_output(
            output, reads=store_files, option="--output", extensions=YAML_EXTENSIONS, writes="a trial YAML"
        )
        weights_target = _weights_output(weights, target, store_files)
    except OutputRefused as error:
        raise UsageError(str(error)) from None
    with open_store(store_url, create=False, read_only=True) as store:
        try:
            study_record = store.study(study)
            record = store.trial_records(study, [number]).get(number)
            experiment = None
            if weights is not None:  # where the study's search kept its checkpoints: the entry it owns
                experiment = experiment_path(storage_location(results_dir)[0], _owned_entry(store, study))
        except (store_package.StoreError, SearchError) as error:
            raise UsageError(str(error)) from None
        url = store.url
    damaged = [p for p in store.damaged_rows(study) if p.trial == number]
    if record is None and damaged:  # the trial is there, but a column of it does not parse: that one line
        raise UsageError(printable(str(damaged[0])))
    if record is None:
        raise UsageError(f"study {study!r} has no trial {number} (see: archsearch trials {study})")
    status, config, measured = record["status"], record["config"], record["measurement"]
    if not isinstance(config.get("model"), dict) or not config["model"]:
        raise UsageError(f"trial {number} of study {study!r} ({status}) has no stored model config: nothing to export")
    threads = ran_with_threads(record)
    ranks, _ = warm_start.placement(record)
    exported, dropped = exported_config(config, study, number, epochs=epochs, steps=steps, threads=threads,
                                        ranks=ranks)  # fmt: skip
    initial = None  # (the weights' bytes, the epoch they were saved after)
    if weights_target is not None:
        initial = _final_weights(study, number, record, experiment, study_record.get("spec"))
        exported["init_from"] = _init_from_path(weights_target, target)
    try:
        load_trial_config(dict(exported))  # what `archsearch trial` will read: refused now, not then
    except ConfigError as error:
        raise UsageError(f"trial {number} of study {study!r}: its stored config no longer loads: {error}") from None
    cost = ", ".join(
        f"{key} {format_number(measured[key], 'count')}" for key in ("params", "flops") if measured.get(key) is not None
    )
    header = [
        f"archsearch export: trial {number} of study {study} ({status}{', ' + cost if cost else ''}) from {url}",
        "Kept: the model, data (paths as stored), training, measure, seed and precision of the stored trial"
        + (f", the {threads} CPU thread(s) it ran with (a CPU result depends on them)" if threads else "")
        + (f", its {ranks} data-parallel ranks (each draws its own dropout and drop-path)" if ranks > 1 else "")
        + ".",
        "Left out, the original run's placement: "
        + (", ".join(dropped) if dropped else "none was in the stored config")
        + " (add device/cpus here to place this run).",
    ]
    if epochs is not None or steps is not None:
        budget = f"{epochs} epochs" if epochs is not None else f"{steps} steps"
        header.append(f"Budget changed on export to {budget} (the trial trained {_budget(config)}).")
    if initial is not None:
        header.append(
            f"Starts from the trial's final weights (after epoch {initial[1]}), init_from"
            + (" (relative to this file)" if target is not None else "")
            + ": a fine-tune; the optimiser and the schedule start fresh."
        )
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(exported, sort_keys=False, allow_unicode=True)
    with OutputSet() as outputs:  # the weights and the YAML that names them land together, or neither
        if initial is not None:
            try:
                outputs.write(weights_target, initial[0])
            except OSError as error:
                raise UsageError(printable(f"cannot write {weights}: {error.strerror or error}")) from None
        try:
            path = outputs.write(target, text) if target is not None else write_output(None, text)
            outputs.commit()
        except OSError as error:
            raise UsageError(printable(f"cannot write {output}: {error.strerror or error}")) from None
    if status == TrialStatus.INFEASIBLE:
        click.echo(
            f"warning: trial {number} was infeasible (never trained; it breaks the study's constraints)", err=True
        )
    # The note goes to stderr when standard output is the YAML.
    where = "standard output" if path is None else printable(str(path))
    said = f"trial {number} of study {study} written to {where}" + (f" ({cost})" if cost else "")
    if initial is not None:
        said += f"; its final weights (epoch {initial[1]}) to {printable(str(weights_target))}"
    click.echo(said, err=path is None)


def _weights_output(weights: str | None, yaml_target: Path | None, reads: list) -> Path | None:
    """The file ``--weights`` goes to, looked at as every output is: a file path (the weights are
    binary: never standard output), never the YAML the export writes, nor a file the command reads."""
    if weights is None:
        return None
    target = check_output(
        weights, reads=reads, option="--weights", extensions=WEIGHTS_EXTENSIONS, writes="the weights are a torch file"
    )
    if target is None:
        raise OutputRefused(
            f"--weights {printable(weights)}: the weights are binary; give a file path, not standard output"
        )
    if yaml_target is not None and os.path.abspath(target) == os.path.abspath(yaml_target):
        raise OutputRefused(
            f"--weights {printable(weights)}: is the --output file too; give the weights a file of their own"
        )
    return target


def _init_from_path(weights: Path, yaml_target: Path | None) -> str:
    """``init_from`` as the YAML names it: relative to the YAML's directory (the two files move
    together), absolute when the YAML goes to standard output."""
    absolute = os.path.abspath(weights)
    if yaml_target is None:
        return absolute
    return os.path.relpath(absolute, os.path.dirname(os.path.abspath(yaml_target)))


def _final_weights(study: str, number: int, record: dict, experiment: str, spec: dict | None) -> tuple[bytes, int]:
    """(trial ``number``'s final model weights as the bytes of a state dict, the epoch they were saved
    after), from the checkpoint its search kept under ``experiment``; refused in one line without one."""
    keep = ((spec or {}).get("search") or {}).get("keep_checkpoints")
    if is_uri(experiment):
        raise UsageError(f"--weights reads a trial's checkpoint from a directory; {experiment} is not one")
    checkpoint = checkpoints.kept_checkpoint(experiment, number)
    if checkpoint is None:
        why = " (the study kept its Pareto front's alone)" if keep == "front" else ""
        raise UsageError(
            f"trial {number} of study {study!r} has no kept checkpoint under {experiment}{why}; to fine-tune a "
            "search's trials, run it with `search.keep_checkpoints: front` (its front's final weights are kept)"
        )
    try:
        state, epoch = checkpoints.final_weights(checkpoint)
    except ValueError as error:
        raise UsageError(f"trial {number} of study {study!r}: {error}") from None
    stored = [e.get("epoch") for e in record.get("epochs") or [] if isinstance(e.get("epoch"), (int, float))]
    if stored and epoch != int(max(stored)):
        raise UsageError(
            f"trial {number} of study {study!r}: its kept checkpoint is of epoch {epoch}, but its record ends at "
            f"epoch {int(max(stored))}: not its final weights"
        )
    return checkpoints.state_bytes(state), epoch


THREADS_IN_DEVICE = re.compile(r", (\d+) threads\)$")  # "cpu (x86_64, 1 threads)": a trial's measured device


def ran_with_threads(record: dict) -> int | None:
    """The CPU threads a stored trial ran with: recorded in its final facts (``threads``), or, for a
    trial of an older archsearch, read from its measured device (``cpu (x86_64, 1 threads)``)."""
    recorded = (record.get("final") or {}).get("threads")
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and recorded >= 1:
        return int(recorded)
    device = (record.get("measurement") or {}).get("device")
    found = THREADS_IN_DEVICE.search(device) if isinstance(device, str) else None
    return int(found.group(1)) if found else None


def _budget(config: dict) -> str:
    training = config.get("training") or {}
    if training.get("steps"):
        return f"{training['steps']} steps"
    return f"{training.get('epochs', 'the default number of')} epochs"


def manage_studies(
    store_url: str | None,
    delete: str | None,
    rename: tuple[str, str] | None,
    yes: bool,
    purge_results: bool,
    results_dir: str | None,
) -> None:
    """``studies --delete NAME --yes [--purge-results]`` or ``studies --rename OLD NEW``; refused in
    one line (exit 2) where something is wrong, with nothing changed."""
    if delete is not None and rename is not None:
        raise UsageError("--delete and --rename: one at a time")
    if purge_results and delete is None:
        raise UsageError("--purge-results goes with --delete")
    if yes and delete is None:  # a confirmation of nothing: said, not silently ignored
        raise UsageError("--yes confirms --delete NAME: give the study to delete")
    if delete is not None:
        _delete(store_url, delete, yes, purge_results, results_dir)
    elif rename is not None:
        _rename(store_url, *rename)


def _delete(store_url: str | None, name: str, yes: bool, purge_results: bool, results_dir: str | None) -> None:
    if not yes:  # no prompt: CI and scripts have no terminal to answer it
        raise UsageError(f"--delete {name} removes the study and its trials for good: add --yes to confirm")
    with open_store(store_url, create=False) as store:
        try:
            store.study(name)
            experiment, identity = _owned_experiment(store, name, results_dir)
            if purge_results:
                check_purgeable(experiment)  # before any row goes: a refusal leaves everything
                check_identity(experiment, identity)  # the directory the study created, not one put there since
            deleted = store.delete_study(name)
        except (store_package.StoreError, SearchError) as error:
            raise UsageError(str(error)) from None
    summary = f"deleted study {name}: {deleted['trials']} trials, {deleted['epochs']} epochs"
    summary += ", and its Optuna study" if deleted["optuna_studies"] else " (Optuna had no study of that name)"
    if purge_results:
        try:
            removed = purge_experiment(experiment)
        except (SearchError, OSError) as error:
            raise UsageError(f"study {name} deleted, but its results were not removed: {error}") from None
        summary += f"; removed {experiment}" if removed else f"; no results under {experiment}"
    else:
        summary += f"; results under {experiment} left (--purge-results removes them)"
    click.echo(summary)


def _owned_experiment(store, name: str, results_dir: str | None) -> tuple[str, str | None]:
    """(the absolute experiment dir study ``name`` owns, its recorded identity). A study records its
    results dir as an absolute path when it creates it: that is where it is, from any working
    directory; ``--results-dir`` naming another place is refused, naming both. An older study, which
    recorded none, is looked for under ``--results-dir`` (default ``./ray_results``)."""
    root, identity = store.study_results(name)
    given, chosen = storage_location(results_dir)
    if root is None:
        return experiment_path(given, _owned_entry(store, name)), None
    if chosen and not is_uri(given) and not is_uri(root) and Path(given) != Path(root):
        raise SearchError(
            "--results-dir", f"study {name}'s results are under {root} (recorded when it was created), not {given}"
        )
    return experiment_path(root, _owned_entry(store, name)), identity


def _owned_entry(store, name: str) -> str:
    """The results-dir entry study ``name`` owns (recorded when it was created; renames leave it),
    refused before any path is built from it when it is not a legal study name (a damaged row)."""
    return check_study_name(store.study_experiment(name), f"study {name!r}'s recorded results entry")


def _rename(store_url: str | None, old: str, new: str) -> None:
    try:
        check_study_name(new, "--rename")
    except SearchError as error:
        raise UsageError(str(error)) from None
    with open_store(store_url, create=False) as store:
        try:
            store.study(old)
            entry = _owned_entry(store, old)
            root = store.study_results(old)[0]
            store.rename_study(old, new)
        except (store_package.StoreError, SearchError) as error:
            raise UsageError(str(error)) from None
    where = f"in {experiment_path(root, entry)}" if root else f"under the entry {entry} of the results dir"
    click.echo(
        f"renamed study {old} to {new}; its results stay {where} "
        f"(the study keeps it: --resume {new} and --delete {new} --purge-results act on it)"
    )
