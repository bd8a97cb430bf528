"""Declarative search spaces: schema, validation, constraints, presets and the cost model.

Never imports torch at import time: spaces are validated and priced before any GPU is used.
"""
