"""An additive model of top-1 from a configuration's parameters and FLOPs (issue 60): Bayesian ridge regression on
one-hot parameters and log FLOPs.

It is the surrogate of :mod:`benchmarks.known_cost_ehvi`'s searchers and the model behind
:func:`benchmarks.blind_oracle.informed_order`, which asks what a model of the *rest* of a table predicts for
each configuration. Additive, as NAS-Bench-Macro-style spaces of independent per-layer choices are; numpy only.
"""

from __future__ import annotations

import numpy as np

from benchmarks.table import Table

RIDGE = 1.0  # the prior precision of the standardised weights


def features(table: Table) -> np.ndarray:
    """A constant, standardised log FLOPs and one column per parameter value (one-hot)."""
    columns = [np.ones(len(table))]
    log_flops = np.log(table.cost["flops"].astype(float))
    columns.append((log_flops - log_flops.mean()) / (log_flops.std() or 1.0))
    for name in table.param_names:
        for value in sorted({str(p[name]) for p in table.params}):
            columns.append(np.array([1.0 if str(p[name]) == value else 0.0 for p in table.params]))
    return np.column_stack(columns)


def fit_predict(x: np.ndarray, y: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bayesian ridge regression of ``y`` on ``x``: the predictive mean and sd at ``candidates`` (the noise
    variance estimated from the residuals, so that the sd never collapses to the weights' alone)."""
    centre, scale = float(y.mean()), float(y.std()) or 1.0
    target = (y - centre) / scale
    precision = x.T @ x + RIDGE * np.eye(x.shape[1])
    covariance = np.linalg.inv(precision)
    weights = covariance @ x.T @ target
    residual = target - x @ weights
    noise = max(float(residual @ residual + RIDGE * weights @ weights) / len(y), 1e-4)
    mean = candidates @ weights
    variance = noise * (1.0 + np.einsum("ij,jk,ik->i", candidates, covariance, candidates))
    return mean * scale + centre, np.sqrt(variance) * scale


def leave_one_out_ridge(table: Table, top1: np.ndarray) -> tuple[np.ndarray, float]:
    """Each configuration's top-1 as Bayesian ridge regression on the table's *other* configurations predicts it
    (the one-hot parameters and log FLOPs of :func:`features`; the closed-form
    leave-one-out of a ridge fit, ``y - e / (1 - h)``), and the root mean square of those leave-one-out errors:
    what a model of the rest says about each configuration, and how far off such a model is."""
    candidates = np.flatnonzero(np.isfinite(top1))
    x, y = features(table)[candidates], top1[candidates]
    centre, scale = float(y.mean()), float(y.std()) or 1.0
    target = (y - centre) / scale
    inverse = np.linalg.inv(x.T @ x + RIDGE * np.eye(x.shape[1]))
    leverage = np.einsum("ij,jk,ik->i", x, inverse, x)
    error = (target - x @ (inverse @ x.T @ target)) / (1.0 - leverage)
    predicted = np.full(len(top1), np.nan)
    predicted[candidates] = (target - error) * scale + centre
    return predicted, float(np.sqrt(np.mean(error**2))) * scale
