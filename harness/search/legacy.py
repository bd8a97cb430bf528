"""Old module names of classes that Ray pickled into saved experiments, mapped to where they live now.

Ray Tune pickles the searcher, the scheduler, the callbacks and the stoppers into an experiment
(``tuner.pkl``, ``searcher-state-*.pkl``) by module and class name. When a class moves, an experiment
saved before the move must still resume: :func:`alias_legacy_modules` registers each old module name
as a module whose attributes are those of the new modules listed for it (one old module may have been
split into several). Called on ``--resume``, before ``Tuner.restore`` unpickles anything.
"""

from __future__ import annotations

import importlib
import sys
import types

# old module -> the modules its pickled classes now live in (first match wins for a name)
LEGACY_MODULES: dict[str, tuple[str, ...]] = {
    "harness.searcher": ("harness.search.propose.searcher",),
    "search_space.grid_sampler": ("harness.search.propose.samplers",),
    "harness.optuna_searcher": ("harness.search.propose.searcher",),
    "harness.samplers": ("harness.search.propose.samplers",),
    "harness.early_stopping": ("harness.search.stop.early_stopping",),
    "harness.stop_rules": ("harness.search.stop.rules",),
    "harness.interrupts": ("harness.search.interrupts", "harness.search.watch"),
    "harness.trackers": ("harness.search.record.trackers",),
    "harness.trainable": ("harness.search.worker.trainable",),
    "harness.tune_callbacks": (
        "harness.search.record.store_writer",
        "harness.search.record.progress",
        "harness.search.stop.hopeless",
    ),
    # trials/ grouped by job (issue 58): a trial config or a status pickled before the move
    "trials.trial_config": ("trials.config.trial_config",),
    "trials.data_config": ("trials.config.data_config",),
    "trials.synthetic": ("trials.data.synthetic",),
    "trials.train": ("trials.training.train",),
    "trials.optimiser": ("trials.training.optimiser",),
    "trials.divergence": ("trials.training.divergence",),
    "trials.evaluation": ("trials.training.evaluation",),
    "trials.batchnorm": ("trials.training.batchnorm",),
    "trials.checkpoint": ("trials.training.checkpoint",),
    "trials.predictions": ("trials.training.predictions",),
    "trials.gpu": ("trials.devices.gpu",),
    "trials.mps": ("trials.devices.mps",),
    "trials.cpus": ("trials.devices.cpus",),
    "trials.distributed": ("trials.devices.distributed",),
    "trials.rank": ("trials.devices.rank",),
    "trials.sync_batchnorm": ("trials.devices.sync_batchnorm",),
    "trials.torch_internals": ("trials.devices.torch_internals",),
    "trials.compile_cache": ("trials.compilation.compile_cache",),
    "trials.compile_artifacts": ("trials.compilation.compile_artifacts",),
    "trials.compiled_forward": ("trials.compilation.compiled_forward",),
    "trials.measure": ("trials.measurement.measure",),
    "trials.flops": ("trials.measurement.flops",),
    "trials.timing": ("trials.measurement.timing",),
}


def alias_legacy_modules() -> None:
    """Make every old module name importable, as a view of the modules that hold its classes now.

    A name that is a real module today (importable) is left alone.
    """
    for old, new_modules in LEGACY_MODULES.items():
        if old in sys.modules:
            continue
        modules = [importlib.import_module(name) for name in new_modules]
        if len(modules) == 1:
            sys.modules[old] = modules[0]
            continue
        view = types.ModuleType(old, f"Legacy view of {', '.join(new_modules)} (see harness.search.legacy).")
        for module in reversed(modules):  # the first module listed wins a shared name
            view.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
        sys.modules[old] = view
