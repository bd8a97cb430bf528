"""What one trial does: build a model from a config, measure it, train and evaluate it.

Runs with torch alone (no Ray, no database) so that a trial can run anywhere.
"""
