"""Where a search runs: joining a Ray cluster (its token, a pre-flight check) and the local Ray, the
resources and storage checked before anything is written."""
