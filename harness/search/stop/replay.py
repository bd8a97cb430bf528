"""A study's early-stopping rule as :mod:`dashboards.fidelity` replays it on completed curves.

``dashboards`` sits below ``harness`` and cannot import the rule, so it is built here, from the stored
spec, by the code the search runs (:mod:`.early_stopping`: the mode, and MO-ASHA's scheduler as
``make_scheduler`` builds it, whose rungs, rung objectives and :class:`~.early_stopping.RungDecider` are
replayed), and handed down as a
:class:`dashboards.fidelity.RungRule`. The entry point ``archsearch.rung_rules`` (``pyproject.toml``)
registers :func:`rung_rule`, so ``Study.fidelity()`` finds it without naming ``harness``.

Mode ``single`` is Ray Tune's ASHA on the metric alone (:class:`dashboards.fidelity.PercentileDecider`
replays its cutoff without Ray). A study without early stopping is replayed under the rule its spec
would get with ``search.early_stopping`` on at its defaults, said so in the rule's description.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dashboards.fidelity import FidelityError, PercentileDecider, RungRule, asha_milestones
from harness.search.stop.early_stopping import RungDecider, early_stopping_mode, make_scheduler
from search_space.spec import EarlyStopping, SearchSpec


def rung_rule(spec: Mapping[str, Any]) -> RungRule:
    """The rule the study's spec ran (or, without early stopping, the default it would get)."""
    try:
        search_spec = SearchSpec.model_validate(dict(spec))
    except (ValueError, TypeError) as error:
        raise FidelityError(f"the study's stored spec no longer validates, so its early-stopping rule is unknown: "
                            f"{str(error).splitlines()[0]}") from None  # fmt: skip
    default = search_spec.search.early_stopping is None
    if default:
        search = search_spec.search.model_copy(update={"early_stopping": EarlyStopping()})
        search_spec = search_spec.model_copy(update={"search": search})
    es = search_spec.search.early_stopping
    mode = early_stopping_mode(search_spec)
    max_t = int(search_spec.training.get("epochs", 10))
    # The rungs as the search sets them: MO-ASHA's scheduler built by make_scheduler (its first rung and
    # spacing, whatever rule places them), whose first rung is also where single-metric ASHA starts.
    as_pareto = search_spec.search.model_copy(update={"early_stopping": es.model_copy(update={"mode": "pareto"})})
    scheduler = make_scheduler(search_spec.model_copy(update={"search": as_pareto}))
    rungs, objectives = list(scheduler.decider.rungs), dict(scheduler.decider.objectives)
    if mode == "pareto":

        def pareto(at: Sequence[int]) -> RungDecider:
            return RungDecider(objectives, list(at), es.reduction_factor)

        return RungRule(mode, es.metric, objectives, tuple(rungs), es.reduction_factor, pareto, default)
    grace = rungs[0] if rungs else max_t
    milestones = [m for m in asha_milestones(grace, es.reduction_factor, max_t) if m < max_t]

    def single(at: Sequence[int]) -> PercentileDecider:
        return PercentileDecider(es.metric, objectives[es.metric], at, es.reduction_factor)

    return RungRule(mode, es.metric, objectives, tuple(milestones), es.reduction_factor, single, default)
