"""What a trial is, as validated data: the trial config, the data config, and the rules that load them (no torch)."""
