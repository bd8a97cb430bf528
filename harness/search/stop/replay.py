"""A study's early-stopping rule as :mod:`dashboards.fidelity` replays it on completed curves.

``dashboards`` sits below ``harness`` and cannot import the rule, so it is built here, from the stored
spec, by the code the search runs (:mod:`.early_stopping`: the mode, the rung objectives, the deciders
its schedulers wrap, at the one rung schedule ``EarlyStopping.rungs``), and handed down as a
:class:`dashboards.fidelity.RungRule`. The entry point ``archsearch.rung_rules`` (``pyproject.toml``)
registers :func:`rung_rule`, so ``Study.fidelity()`` finds it without naming ``harness``.

Mode ``single`` is ASHA's percentile cutoff on the metric alone (:class:`dashboards.fidelity.PercentileDecider`,
which its scheduler runs too). A study without early stopping is replayed under the rule its spec
would get with ``search.early_stopping`` on at its defaults, said so in the rule's description.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from dashboards.fidelity import FidelityError, PercentileDecider, RungRule
from harness.search.stop.early_stopping import RungDecider, early_stopping_mode, rung_objectives
from harness.search.stop.rank_gate import RankGatedDecider, architecture_key
from search_space.spec import TRAINING_FIELDS, EarlyStopping, SearchSpec


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
    # The one rung schedule (EarlyStopping.rungs) both modes' schedulers judge at, and what they rank on.
    rungs = es.rungs(int(search_spec.training.get("epochs", 10)))
    objectives = rung_objectives(search_spec)

    def decider(at: Sequence[int]) -> RungDecider | PercentileDecider:
        if mode == "pareto":
            return RungDecider(objectives, list(at), es.reduction_factor)
        return PercentileDecider(es.metric, objectives[es.metric], list(at), es.reduction_factor)

    def gated(at: Sequence[int]) -> RankGatedDecider:
        return RankGatedDecider(decider(at), es.metric, objectives[es.metric], list(at))

    def group_of(params: Mapping[str, Any]) -> Hashable:
        return architecture_key(params, TRAINING_FIELDS)

    return RungRule(mode, es.metric, objectives, tuple(rungs), es.reduction_factor, decider, default,
                    gated if es.rank_gate else None, group_of if es.rank_gate else None)  # fmt: skip
