"""The keys a Ray Tune trial's config and results carry for archsearch, shared by both sides.

The driver's searcher puts :data:`NUMBER_KEY` into each config it dispatches; the worker's
trainable reports :data:`STATUS_KEY` with the final result. They live apart from the searcher so
that a worker reads them without importing Optuna.
"""

NUMBER_KEY = "archsearch_number"  # the Optuna trial number: the store's key for the trial
STATUS_KEY = "archsearch_status"  # set on the final report of a trial that ran its whole budget
