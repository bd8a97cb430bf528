"""Orchestration: the command line, the SQL store and Ray Tune dispatch."""

__version__ = "0.1.0"
