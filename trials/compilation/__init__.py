"""torch.compile for a trial: the compiled forward, its per-node cache and its per-cluster artifacts."""
