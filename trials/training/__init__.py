"""The training loop and what it needs: the optimiser and schedule, divergence checks, evaluation, checkpoints."""
