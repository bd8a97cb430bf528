"""Early stopping that asks the fidelity first: a rung prunes only where the study's own trials show
that ranks at that rung carry to the end.

MO-ASHA and ASHA stop a trial that trails the first 1/rf at a rung. That is only as good as the rung's
ranking: on a table where epoch 1 ranks the configurations against their final order at Kendall's tau
-0.17, MO-ASHA pruned 60-80% of the true front (issue 60). :class:`RankGatedDecider` wraps a rung
decider and lets it stop a trial at a rung only while the rank transfer measured on this study's
completed trials, tau between the rung's value and the final one with its 95% bootstrap interval (as
``archsearch fidelity`` computes it: :func:`dashboards.fidelity.rank_correlations`), has its lower bound
at or above :data:`dashboards.fidelity.TAU_RELIABLE`, over at least :data:`dashboards.fidelity.MIN_TRIALS`
completed trials, **and** the rule, asked at that rung against every trial recorded there, would stop none of
the members of the completed trials' final front (the trials no other completed trial beats on every objective
at the end: ``archsearch fidelity``'s "front members kept by the stopping rule", asked online). Until then the
rung records every trial (so that later decisions compare with it) and stops none: the trial waits for a later
rung, whose transfer may hold, or runs to the end.

Why both. tau is measured on the metric alone, over trials of every cost, and the cost explains most of it: on a
held-out table where the larger learning rate leads until late and the smaller one ends 1.5 points ahead
(``tests/test_search_quality.py``'s ``_lr_flip_table``), tau over the first 5-11 completed trials held at epochs
1, 3 and 9 (1.00, and 0.96 [0.83, 1.00]) while MO-ASHA, which ranks trials against others of a similar cost,
stopped a median 40% of the front (10 seeds). The front check asks what the rule decides, on the study's own
trials.

Twins, configurations that differ only in training hyperparameters (the same architecture at another
learning rate), never decide each other's fate: a rung compares a trial with the trials of other
architectures only (``group``, passed to the inner decider), because at an early rung the faster-starting
learning rate leads and the one that ends ahead is pruned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dashboards.fidelity import MIN_TRIALS, SEED, TAU_RELIABLE, Correlation, rank_correlations
from dashboards.fidelity import _number as finite_number
from dashboards.multiobjective import non_dominated
from harness.search.session import SessionBound

GATE_RESAMPLES = 500  # bootstrap resamples per check: recomputed only when a trial completes


@dataclass(frozen=True)
class RankTransfer:
    """What a rung's gate knows: the completed trials with a value there, and their tau with its interval."""

    rung: int
    trials: int
    tau: Correlation | None  # None below MIN_TRIALS
    front: int = 0  # the completed trials' final front members (counted only where tau holds)
    front_stopped: int = 0  # of those, the ones the rule would stop at this rung

    @property
    def tau_holds(self) -> bool:
        return self.tau is not None and math.isfinite(self.tau.low) and self.tau.low >= TAU_RELIABLE

    @property
    def open(self) -> bool:
        return self.tau_holds and self.front_stopped == 0

    def text(self) -> str:
        if self.tau is None:
            return f"rung {self.rung}: not pruning yet ({self.trials} of {MIN_TRIALS} completed trials to measure tau)"
        if not self.tau_holds:
            return (f"rung {self.rung}: not pruning ({self.tau.text()} over {self.trials} completed trials; lower "
                    f"bound < {TAU_RELIABLE})")  # fmt: skip
        evidence = f"{self.tau.text()} over {self.trials} completed trials; lower bound >= {TAU_RELIABLE}"
        if self.open:
            return f"rung {self.rung}: pruning ({evidence}; it keeps all {self.front} of their front members)"
        return (f"rung {self.rung}: not pruning ({evidence}, but it would stop {self.front_stopped} of their "
                f"{self.front} front members)")  # fmt: skip


class RankGatedDecider:
    """A rung decider (``inner``: MO-ASHA's ``RungDecider`` or ASHA's ``PercentileDecider``) that stops a trial
    only at a rung whose measured rank transfer holds (the module docstring). ``complete`` is told each trial
    that ran to the end, with its final values; ``note`` records a trial the rule does not judge (a retried
    configuration) so that its values still measure the transfer."""

    def __init__(
        self,
        inner: Any,
        metric: str,
        direction: str,
        rungs: Sequence[int],
        *,
        resamples: int = GATE_RESAMPLES,
        on_change: Callable[[RankTransfer], None] | None = None,
    ):
        self.inner = inner
        self.metric = metric
        self.sign = 1.0 if direction == "max" else -1.0
        self.rungs = sorted({int(r) for r in rungs})
        self.resamples = resamples
        self.on_change = on_change
        # per rung, each trial's values there; each completed trial's final values (the metric always finite)
        self.values_at: dict[int, dict[str, dict[str, float]]] = {rung: {} for rung in self.rungs}
        self.final_values: dict[str, dict[str, float]] = {}
        self.groups: dict[str, Hashable] = {}
        # what the front is taken on: the inner rule's objectives (MO-ASHA's), or its one metric (ASHA's)
        self.objectives: dict[str, str] = dict(getattr(inner, "objectives", None) or {metric: direction})
        self.spared = {rung: 0 for rung in self.rungs}  # trials the rule would have stopped, let on
        self.stopped = {rung: 0 for rung in self.rungs}
        self._cache: dict[int, RankTransfer] = {}
        self._said: dict[int, bool | None] = {}

    @property
    def recorded(self) -> Mapping[int, Any]:  # the inner rule's rungs (a scheduler's debug string reads them)
        return self.inner.recorded

    def note(self, trial_id: str, epoch: int, values: Mapping[str, Any], group: Hashable | None = None) -> None:
        if group is not None:
            self.groups[trial_id] = group
        value = finite_number(values.get(self.metric))
        if epoch in self.values_at and value is not None:
            self.values_at[epoch][trial_id] = self._objective_values(values)

    def observe(self, trial_id: str, epoch: int, values: Mapping[str, Any], group: Hashable | None = None) -> bool:
        """True: the trial goes on. The inner rule decides; a stop stands only where the rung's gate is open."""
        self.note(trial_id, epoch, values, group)
        if self.inner.observe(trial_id, epoch, values, group):
            return True
        rung = max((r for r in self.rungs if r <= epoch), default=None)
        if rung is None:
            return False
        transfer = self.transfer(rung)
        self._say(transfer)
        if transfer.open:
            self.stopped[rung] += 1
            return False
        self.spared[rung] += 1
        return True

    def complete(self, trial_id: str, values: Mapping[str, Any]) -> None:
        value = finite_number(values.get(self.metric))
        if value is not None:
            self.final_values[trial_id] = self._objective_values(values)
            self._cache.clear()

    def transfer(self, rung: int) -> RankTransfer:
        """The rung's measured rank transfer, from the completed trials with a value there (cached until the
        next completion)."""
        if rung not in self._cache:
            at_rung = self.values_at.get(rung, {})
            pairs = [(v[self.metric], self.final_values[t][self.metric]) for t, v in at_rung.items()
                     if t in self.final_values]  # fmt: skip
            tau = None
            if len(pairs) >= MIN_TRIALS:
                x, y = zip(*pairs, strict=True)
                tau, _ = rank_correlations(x, y, resamples=self.resamples, seed=SEED)
            transfer = RankTransfer(rung, len(pairs), tau)
            if transfer.tau_holds:
                front, stopped = self._front_check(rung)
                transfer = RankTransfer(rung, len(pairs), tau, front, stopped)
            self._cache[rung] = transfer
        return self._cache[rung]

    def _front_check(self, rung: int) -> tuple[int, int]:
        """The completed trials' final front (on the rule's objectives) and how many of its members the inner
        rule would stop at ``rung``, each judged against every trial recorded there (as the rule judges the last
        to arrive)."""
        completed = [t for t in self.values_at.get(rung, {}) if t in self.final_values]
        rows = [[self.final_values[t].get(name, math.nan) for name in self.objectives] for t in completed]
        finite = [i for i, row in enumerate(rows) if all(math.isfinite(v) for v in row)]
        if not finite:
            return 0, 0
        mask = non_dominated(np.array([rows[i] for i in finite]), list(self.objectives.values()))
        front = [completed[i] for i, kept in zip(finite, mask, strict=True) if kept]
        stopped = sum(bool(self.inner.would_stop(t, self.values_at[rung], self.groups)) for t in front)
        return len(front), stopped

    def _objective_values(self, values: Mapping[str, Any]) -> dict[str, float]:
        """The values the rule ranks on (NaN where missing), all it needs to be asked again later."""
        names = {self.metric, *self.objectives}
        return {name: v if (v := finite_number(values.get(name))) is not None else math.nan for name in names}

    def describe(self) -> list[str]:
        """One line per rung: whether it prunes, on what evidence, and what it stopped and spared."""
        return [f"{self.transfer(rung).text()}; stopped {self.stopped[rung]}, let on {self.spared[rung]} it would "
                "have stopped" for rung in self.rungs]  # fmt: skip

    def _say(self, transfer: RankTransfer) -> None:
        """Tell ``on_change`` when a rung's gate first decides or changes state (not at every trial)."""
        state = transfer.open if transfer.tau is not None else None
        if self.on_change is not None and self._said.get(transfer.rung, "unsaid") != state:
            self._said[transfer.rung] = state
            self.on_change(transfer)


class GateAnnouncer(SessionBound):
    """Says, through the search's session, when a rung starts or stops pruning. The scheduler holding it is
    pickled with Tune's experiment state: like every hook it leaves the session behind (``SessionBound``)
    and is bound again to the driver's when Ray unpickles it within the session."""

    def __init__(self, study: str, session: Any = None):
        self.study = study
        self.session = session

    def __getstate__(self) -> dict[str, Any]:
        return self._unbound_state(dict(self.__dict__))

    def __call__(self, transfer: RankTransfer) -> None:
        self._say(f"[{self.study}] early stopping, {transfer.text()}")


def architecture_key(params: Mapping[str, Any], training_fields: Sequence[str]) -> Hashable:
    """What makes two configurations twins: the same sampled values of everything but the training
    hyperparameters (``training_fields``: the searchable training fields, e.g. ``lr``)."""
    training = set(training_fields)
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k not in training))
