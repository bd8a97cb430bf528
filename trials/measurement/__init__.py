"""What a model costs: parameters, FLOPs (fvcore), throughput and latency, timed the same way everywhere."""
