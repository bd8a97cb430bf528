"""Orchestration: the command line, the SQL store, Ray Tune dispatch and the reproductions (see ARCHITECTURE.md)."""

__version__ = "0.1.0"
