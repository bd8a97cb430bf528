"""Side-by-side speed comparisons (ours vs timm, vs plain Ray Tune, vs Optuna), each printing a table.

Run each from the repository root as a module, e.g. ``python -m benchmarks.models``: the root is
then on ``sys.path``, so no script edits it. This file imports nothing, so ``benchmarks.gpu``
still runs on a GPU machine with torch alone.
"""
