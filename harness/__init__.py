"""Orchestration: the command line, and (later) the SQL store and Ray Tune dispatch."""

__version__ = "0.1.0"
