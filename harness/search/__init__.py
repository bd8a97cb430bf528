"""The search engine, one room per Ray Tune seam (see ARCHITECTURE.md, "The engine room").

``driver`` runs a search (the Tuner's wiring), ``session`` holds what its hooks share, ``watch``
watches it from the driver; ``propose/`` is the searcher (Optuna's ask/tell behind Ray Tune's
``Searcher``), ``stop/`` early stopping and stop rules, ``record/`` what reaches the store, ``worker/``
what runs on Ray's workers, ``cluster/`` where it runs. ``adapter`` is the one module that touches
private fields of Ray or Optuna; ``legacy`` maps old module names for saved experiments.

Importing this package imports nothing heavy: the CLI reads ``cluster.ray_setup`` to check its
arguments without loading Ray.
"""
