"""The progress line tells the truth (issue 45, item 2): ``done k/N``, an ETA that counts only the
trials still to train, and a first line before any trial has started.

Observed before: the ETA subtracted infeasible and duplicate proposals from ``n_trials``, although
they come on top of it (the searcher stores them and asks again, so ``n_trials`` trials still
train): ``eta 0s`` with 7 of 20 trials to run, ``eta 0s`` for the last 46 s of ``make demo``, and
jumps of 4m55s -> 5m27s -> 40s. The line had no ``done k/N``, and nothing was printed for the
first 30-45 s of a search (Ray start-up, the first compile).

The callback is driven here as Tune drives it, with real store rows and statuses and a simulated
clock handed in (``clock=``), through a search whose searcher stores infeasible and duplicate
proposals between the trials it dispatches; and end to end through the search's real engine under
:func:`harness.search.simulate.simulate`.
"""

from __future__ import annotations

import heapq
import io
import itertools
import re
from dataclasses import dataclass, field

from harness.search.engine import build_engine
from harness.search.record.progress import ProgressCallback, TrialLengths, planned_trials
from harness.search.result_keys import NUMBER_KEY, STATUS_KEY, split_tune_config
from harness.search.session import SearchSession
from harness.search.simulate import SimulatedClock, SimulatedTrial, simulate
from harness.store import Store
from search_space.spec import SearchSpec
from trials.status import TrialStatus

OBJECTIVES = {"top1": "max", "flops": "min"}
STUDY = "truth"
MAX_JUMP = 1.1  # between consecutive lines, the predicted end (line time + ETA) moves by at most this factor


@dataclass
class Line:
    at: float  # simulated seconds
    text: str

    @property
    def done(self) -> tuple[int, int] | None:
        match = re.search(r" done (\d+)/(\d+)", self.text)
        return (int(match[1]), int(match[2])) if match else None

    @property
    def eta(self) -> str | None:
        match = re.search(r"  eta (\S+)", self.text)
        return match[1] if match else None

    def count(self, word: str) -> int:
        return int(re.search(rf"  {word} (\d+)", self.text)[1])


def eta_seconds_of(text: str) -> float | None:
    """``4m05s`` -> 245; ``<1m`` -> 59 (its upper end); ``?`` -> None."""
    if text == "?":
        return None
    if text == "<1m":
        return 59.0
    seconds = 0.0
    for number, unit in re.findall(r"(\d+)([dhms])", text):
        seconds += int(number) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[unit]
    return seconds


@dataclass
class Search:
    """A search as Tune runs it, against the progress callback: ``concurrency`` slots, each trial
    ``length`` simulated seconds; before each dispatch the searcher stores the infeasible and
    duplicate proposals ``rejected[i]`` (for the i-th trial) and asks again. A heartbeat look
    (``on_step_end``) every ``step`` seconds, as Tune's loop steps."""

    store_url: str
    n_trials: int
    concurrency: int
    length: float = 100.0
    rejected: dict[int, tuple[int, int]] = field(default_factory=dict)  # trial index -> (infeasible, duplicate)
    ends: dict[int, TrialStatus] = field(default_factory=dict)  # trial index -> how it ends (default completed)
    step: float = 20.0

    def run(self) -> list[Line]:
        clock = SimulatedClock()
        stream = io.StringIO()
        lines: list[Line] = []
        progress = ProgressCallback(
            self.store_url, STUDY, OBJECTIVES, stream=stream, n_trials=self.n_trials,
            concurrency=self.concurrency, session=SearchSession(STUDY, clock=clock), clock=clock,
        )  # fmt: skip

        def collect() -> None:
            for text in stream.getvalue().splitlines()[len(lines) :]:
                lines.append(Line(clock.now, text))

        with Store.open(self.store_url) as store:
            store.create_study(STUDY, {}, OBJECTIVES)
            number = 0
            dispatched = 0
            running: list[tuple[float, int, int]] = []  # (ends at, trial index, number)

            def dispatch() -> None:
                nonlocal number, dispatched
                while dispatched < self.n_trials and len(running) < self.concurrency:
                    infeasible, duplicate = self.rejected.get(dispatched, (0, 0))
                    for status in [TrialStatus.INFEASIBLE] * infeasible + [TrialStatus.DUPLICATE] * duplicate:
                        store.finish_trial(STUDY, number, status=status, config={"n": number})  # never dispatched
                        number += 1
                    store.start_trial(STUDY, number, {"n": number})
                    progress.on_trial_start(0, [], SimulatedTrial(str(number), {}))
                    heapq.heappush(running, (clock.now + self.length, dispatched, number))
                    number, dispatched = number + 1, dispatched + 1

            progress.setup()
            collect()
            dispatch()
            next_step = self.step
            while running:
                if next_step < running[0][0]:  # Tune's loop steps: the heartbeat looks
                    clock.now = next_step
                    progress.on_step_end(0, [])
                    next_step += self.step
                    collect()
                    continue
                clock.now, index, ended = heapq.heappop(running)
                status = self.ends.get(index, TrialStatus.COMPLETED)
                store.finish_trial(  # StoreCallback records the end first ...
                    STUDY, ended, status=status, config={"n": ended}, final={"top1": 50.0 + ended},
                    measurement={"flops": 1e6 * (1 + ended)},
                )  # fmt: skip
                progress.on_trial_complete(0, [], SimulatedTrial(str(ended), {}))  # ... then this line
                collect()
                dispatch()  # ... then Tune asks the searcher for the successor
            progress._store.close()
        return lines


def _scenario(store_url: str) -> list[Line]:
    """8 trials, 2 at a time, 100 s each (the search ends at 400 s); 6 infeasible and 5 duplicate
    proposals among them, most of them early; one trial pruned, one failed (each counts as done)."""
    search = Search(
        store_url, n_trials=8, concurrency=2,
        rejected={0: (2, 0), 1: (1, 1), 2: (2, 2), 3: (0, 1), 5: (1, 1)},
        ends={2: TrialStatus.PRUNED, 4: TrialStatus.FAILED},
    )  # fmt: skip
    return search.run()


def test_done_counts_the_trials_that_ended_of_n_trials_with_rejected_proposals_on_top(store_url):
    lines = _scenario(store_url)
    at_ends = [line for line in lines[1:] if line.text.startswith(f"[{STUDY}] done ")]
    ends = [line for line in at_ends if line.at % 100 == 0]  # trial ends (heartbeats come between)
    assert [line.done for line in ends] == [(k, 8) for k in range(1, 9)]
    assert all(line.done[1] == 8 for line in at_ends)  # N never shrinks as proposals are rejected
    last = ends[-1]
    assert (last.count("completed"), last.count("pruned"), last.count("failed")) == (6, 1, 1)
    assert (last.count("infeasible"), last.count("duplicate")) == (6, 5)  # counted, beside N
    assert last.eta == "0s" and last.count("running") == 0


def test_the_eta_is_never_zero_while_trials_remain(store_url):
    lines = _scenario(store_url)
    *before_the_end, last = [line for line in lines if line.eta is not None]  # the last: the 8th trial's end
    assert last.at == 400.0 and last.eta == "0s"
    assert [line.text for line in before_the_end if line.eta == "0s"] == []
    for line in before_the_end:  # a trial still runs or waits on every one of them
        eta = eta_seconds_of(line.eta)
        if eta is not None:  # '?' until the first trial ends
            assert eta >= (400.0 - line.at) / 1.5 or line.eta == "<1m", line.text  # 400 s: the true end
    assert before_the_end[0].eta == "?"  # a heartbeat before any trial ended: nothing to estimate from


def test_the_eta_moves_with_the_clock_not_with_rejected_proposals(store_url):
    """With constant trial lengths, the predicted end (line time + ETA) of consecutive lines moves by
    at most ``MAX_JUMP``, and the ETA never rises by more than that factor between two lines."""
    lines = _scenario(store_url)
    timed = [(line, eta_seconds_of(line.eta)) for line in lines[:-1] if line.eta not in (None, "?")]
    assert len(timed) >= 8
    for (before, eta_before), (after, eta_after) in itertools.pairwise(timed):
        end_before, end_after = before.at + eta_before, after.at + eta_after
        assert max(end_before, end_after) <= MAX_JUMP * min(end_before, end_after), (before.text, after.text)
        assert eta_after <= MAX_JUMP * eta_before, (before.text, after.text)
    assert all(abs(line.at + eta - 400.0) <= 0.05 * 400.0 for line, eta in timed if line.eta != "<1m")


def test_the_first_line_comes_at_once_before_any_trial_has_started(store_url):
    lines = _scenario(store_url)
    first = lines[0]
    assert first.at == 0.0 and first.text.startswith(f"[{STUDY}] starting: done 0/8, up to 2 trials at a time")
    assert "Ray is up" in first.text
    assert lines[1].at > 0  # the next line is a heartbeat or a trial's end, later


def test_the_first_line_goes_to_the_progress_lines_stream(store_url, capsys):
    with Store.open(store_url) as store:
        store.create_study(STUDY, {}, OBJECTIVES)
    progress = ProgressCallback(store_url, STUDY, OBJECTIVES, n_trials=3, session=SearchSession(STUDY))
    progress.setup(stop=None, num_samples=None, total_num_samples=3)  # as Tune calls it
    progress.on_trial_complete(0, [], None)
    progress._store.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.splitlines()
    assert err[0].startswith(f"[{STUDY}] starting: done 0/3, ") and err[1].startswith(f"[{STUDY}] done 0/3  ")


def test_a_bimodal_mix_of_trial_lengths_moves_the_estimate_smoothly():
    """Pruned (10 s) and full-length (90 s) trials, the full ones growing from a third to two thirds
    of the mix: the median of the lengths flips from 10 to 90 where the mix crosses one half (a
    nine-fold jump of the ETA); the estimate moves by a few percent per trial."""
    lengths = TrialLengths()
    pattern = [90.0, 10.0, 10.0] * 10 + [90.0, 10.0] * 10 + [90.0, 90.0, 10.0] * 10
    previous = None
    for seconds in pattern:
        lengths.add(seconds)
        if previous is not None and lengths.count > 10:
            assert max(previous, lengths.typical) <= 1.5 * min(previous, lengths.typical)
        previous = lengths.typical
    assert 40 < lengths.typical < 80  # near the recent mix's mean (about 63 s), neither mode


# -- end to end: the search's real hooks under a simulated clock -------------------------------


def _spec(n_trials: int) -> SearchSpec:
    """A 6-configuration CaiT space whose constraint rules out 2 (the cost model prices them), searched
    by the random sampler: it proposes infeasible and already-trained configurations again and again."""
    return SearchSpec.model_validate(
        {
            "name": STUDY,
            "family": "cait",
            "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
            "data": {"name": "synthetic", "num_classes": 4, "train_size": 128, "val_size": 64, "batch_size": 32},
            "training": {"epochs": 2, "lr": 1e-3},
            "params": {"embed_dim": {"choice": [32, 48, 64]}, "depth": {"int": [1, 2]}},
            "objectives": OBJECTIVES,
            "constraints": ["flops <= 4.7e6"],  # (64, 2) and (48, 2) price above it
            "search": {"sampler": "random", "n_trials": n_trials, "concurrency": 2, "seed": 3},
        }
    )


def _evaluate(config: dict, epoch: int) -> tuple[dict, float, bool]:
    number, _, params = split_tune_config(config)
    result = {"top1": 40.0 + params["embed_dim"] / 4 + epoch, "flops": 1e6 * params["embed_dim"], NUMBER_KEY: number}
    last = epoch == 2
    if last:
        result[STATUS_KEY] = TrialStatus.COMPLETED
    return result, 50.0, last  # every epoch 50 simulated seconds: every trial 100


def test_a_simulated_search_through_the_real_engine_tells_the_truth(tmp_path, capsys):
    spec = _spec(n_trials=4)
    assert planned_trials(spec) == 4 and planned_trials(_spec(n_trials=20)) == 6  # the space holds 6
    url = f"sqlite:///{tmp_path / 'sim.db'}"
    with Store.open(url) as store:
        store.create_study(STUDY, spec.model_dump(mode="json"), OBJECTIVES)
    clock = SimulatedClock()
    engine = build_engine(spec, url, STUDY, SearchSession(STUDY, clock=clock), signals=False, quiet=True)
    seen: list[Line] = []

    def collect() -> None:  # what reached stderr by now, at the simulated time it is read
        seen.extend(Line(clock.now, text) for text in capsys.readouterr().err.splitlines() if text.startswith("["))

    def evaluate(config: dict, epoch: int) -> tuple[dict, float, bool]:
        collect()  # before each epoch starts: the first call is the first trial's start
        return _evaluate(config, epoch)

    run = simulate(engine, evaluate, workers=2, clock=clock, on_end=lambda *_: collect())
    collect()
    assert run.stopped_by == "searcher" and len(run.ended) == 4 and run.seconds == 200.0
    assert seen[0].at == 0.0 and seen[0].text.startswith(f"[{STUDY}] starting: done 0/4, ")  # before any trial
    ends = [line for line in seen if line.done is not None and not line.text.startswith(f"[{STUDY}] starting")]
    assert [line.done for line in ends] == [(k, 4) for k in range(1, 5)]
    assert ends[-1].count("infeasible") > 0 and ends[-1].count("duplicate") > 0  # proposals rejected on top
    assert all(line.eta not in ("0s", "?", None) for line in ends[:-1]) and ends[-1].eta == "0s"
    # At 100 s both first trials end: the one still running is late, the two left fill both slots.
    assert [line.eta for line in ends[:2]] == ["1m45s", "1m40s"]
