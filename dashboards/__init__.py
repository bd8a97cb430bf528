"""Pareto queries and figures over the store."""
