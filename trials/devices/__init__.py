"""Where a trial runs: CPU counts, CUDA and MPS packing, data-parallel ranks, and torch's private names (one file)."""
