"""The progress line a search prints per finished trial (harness.search.record.progress.ProgressCallback).

Driven directly against a real store, the way Tune calls it: one line per trial end with the
store's counts, and the front's size refreshed at most once a second (a fast search ends trials
many times a second; the line then carries the last known size).
"""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import numpy as np
import pytest
from ray.tune.experiment import Trial

from dashboards.multiobjective import plateau_check
from harness import run_search
from harness.search.record.progress import (
    EpochClock,
    ProgressCallback,
    compact_duration,
    compact_number,
    epoch_eta_seconds,
    eta_seconds,
    eta_text,
)
from harness.search.result_keys import EPOCHS_KEY, NUMBER_KEY, STATUS_KEY
from harness.search.session import SearchSession
from harness.search.stop.rules import StopRulesStopper
from harness.store import Store

OBJECTIVES = {"top1": "max", "flops": "min"}


def _finish(store: Store, number: int, top1: float, flops: float, status: str = "completed") -> None:
    config = {"lr": 0.001 * (number + 1)}
    store.start_trial("progress", number, config)
    store.finish_trial(
        "progress", number, status=status, config=config, final={"top1": top1}, measurement={"flops": flops}
    )


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_one_line_per_trial_end_with_the_stores_counts_and_a_front_refreshed_at_most_once_a_second(
    store_url, monkeypatch
):
    clock = [100.0]
    monkeypatch.setattr("harness.search.record.progress.time.monotonic", lambda: clock[0])
    stream = io.StringIO()
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        progress = ProgressCallback(store_url, "progress", OBJECTIVES, stream=stream, session=SearchSession("progress"))

        _finish(store, 0, top1=50.0, flops=2.0)
        progress.on_trial_complete(0, [], None)
        assert _lines(stream)[-1] == (
            "[progress] done 1  running 0  completed 1  pruned 0  failed 0  infeasible 0  duplicate 0  pareto front 1"
            "  best max top1 50  min flops 2  elapsed 0s"
        )

        # Within the second: counts are fresh, the front is the last known one.
        _finish(store, 1, top1=40.0, flops=1.0)  # a second front member
        store.start_trial("progress", 2, {"lr": 0.5})
        progress.on_trial_start(0, [], SimpleNamespace(trial_id="2"))
        clock[0] += 0.5
        progress.on_trial_complete(0, [], None)
        assert _lines(stream)[-1].startswith("[progress] done 2  running 1  completed 2  pruned 0  failed 0")
        assert _lines(stream)[-1].endswith("pareto front 1  best max top1 50  min flops 2  elapsed 0s")  # as known

        # A second later the front is queried again.
        _finish(store, 2, top1=60.0, flops=0.5, status="failed")
        clock[0] += 0.6
        progress.on_trial_complete(0, [], SimpleNamespace(trial_id="2"))
        assert _lines(stream)[-1] == (
            "[progress] done 3  running 0  completed 2  pruned 0  failed 1  infeasible 0  duplicate 0  pareto front 2"
            "  best max top1 50  min flops 1  elapsed 1s"  # the failed trial's 60 is no one's best
        )
        assert len(_lines(stream)) == 3
        progress._store.close()


def test_a_progress_line_that_cannot_be_computed_says_so_and_never_raises(tmp_path):
    stream = io.StringIO()
    progress = ProgressCallback(
        f"sqlite:///{tmp_path / 'missing' / 'store.db'}",
        "gone",
        OBJECTIVES,
        stream=stream,
        session=SearchSession("progress"),
    )
    progress.on_trial_complete(0, [], None)
    assert _lines(stream) == [_lines(stream)[0]] and "(progress unavailable:" in _lines(stream)[0]


def test_the_plateau_reading_on_a_trials_line_counts_that_trial(store_url):
    """``search.stop.hypervolume_plateau``: Tune runs the callbacks of a trial's end before its
    loop step asks the stoppers, so a line that read the stopper's last reading showed the
    previous trial end's ("done 6 ... hv +287%" right above "stopping: ... gained 0.000%"). The
    line for each trial end must carry the reading over the trials the store holds at that end,
    and the stop the reading decides is the stopper's at its next look."""
    session = SearchSession("progress")  # what the stopper and the line share, as in a search
    stream = io.StringIO()
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        stopper = StopRulesStopper(
            store_url, "progress", OBJECTIVES, {"hypervolume_plateau": {"window": 1, "min_gain": 0.001}}, session
        )
        progress = ProgressCallback(store_url, "progress", OBJECTIVES, stream=stream, session=session)
        points = []
        for number, (top1, flops) in enumerate([(50.0, 2.0), (60.0, 1.0), (55.0, 1.5)]):
            _finish(store, number, top1=top1, flops=flops)
            points.append((top1, flops))
            progress.on_trial_complete(0, [], None)  # Tune: the callbacks first ...
            check = plateau_check(np.array(points), list(OBJECTIVES.values()), window=1)
            line = _lines(stream)[-1]
            assert line.startswith(f"[progress] done {number + 1}  ")
            if check is None:
                assert " hv " not in line
            else:
                assert line.endswith(f"  hv {check.gain:+.2%} over the last 1")
            stopped = stopper.stop_all()  # ... then the stoppers, at the end of the same step
            assert stopped == (number == 2)  # the dominated third trial adds nothing to the front
        assert check.gain == 0.0 and "hypervolume plateau" in session.rule_reason
        assert "hv +0.00% over the last 1" in _lines(stream)[-1]
        assert float(_lines(stream)[-2].split("hv ")[1].split("%")[0]) > 0  # the second trial moved it
        progress._store.close()
        stopper._store.close()


@pytest.mark.parametrize(
    ("value", "text"),
    [(93.14, "93.1"), (0.5, "0.5"), (0.00123, "0.00123"), (1_234_567, "1.23M"), (999_960, "1M"), (2.5e9, "2.5G"),
     (-1500, "-1.5k"), (float("nan"), "nan")],
)  # fmt: skip
def test_numbers_on_the_line_are_three_significant_digits_with_an_si_suffix(value, text):
    assert compact_number(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (42.4, "42s"), (245, "4m05s"), (7620, "2h07m"), (3 * 86400 + 4 * 3600, "3d04h")]
)
def test_durations_on_the_line_are_their_two_largest_units(seconds, text):
    assert compact_duration(seconds) == text


def test_the_eta_is_unknown_until_a_trial_ended_then_waves_of_the_typical_trial():
    assert eta_seconds(5, None, [], 2) is None
    assert eta_seconds(0, None, [], 2) == 0.0  # nothing left: known without a duration
    # Nothing running: ceil(remaining / concurrency) rounds of the typical trial.
    assert eta_seconds(4, 100.0, [], 2) == 200.0
    assert eta_seconds(5, 100.0, [], 2) == 300.0
    # Running trials are credited with the time they ran: one 60 s into a 100 s trial ends in 40 s,
    # the other slot takes the next trial at once, the last fills whichever slot frees first.
    assert eta_seconds(3, 100.0, [60.0], 2) == 140.0
    # An overdue trial (older than the typical one) is late, not done: it keeps 5% of the typical length.
    assert eta_seconds(1, 100.0, [250.0], 2) == 5.0
    assert eta_seconds(1, 10.0, [250.0], 2) == 1.0  # and at least a second
    # More running than the concurrency (a resize): every one of them is a slot.
    assert eta_seconds(3, 100.0, [0.0, 0.0, 0.0], 1) == 100.0
    assert [eta_text(e) for e in (None, 0.0, 0.4, 59.0, 245.0)] == ["?", "0s", "<1m", "<1m", "4m05s"]


def test_before_any_trial_ended_the_eta_is_the_epochs_left_times_the_seconds_per_epoch_over_the_slots():
    assert epoch_eta_seconds(4, [], None, 5, 2) is None  # no epoch has ended yet
    assert epoch_eta_seconds(4, [], 10.0, None, 2) is None  # no budget known
    assert epoch_eta_seconds(0, [], None, None, 2) == 0.0
    # Two running trials with 3 epochs of 10 s left each, two more of 5 epochs to start, 2 slots:
    # (30 + 30 + 2 * 50) / 2.
    assert epoch_eta_seconds(4, [(3, 0.0), (3, 0.0)], 10.0, 5, 2) == 80.0
    # The last trial, 4 s into its last epoch: the rest of that epoch, whatever the slots.
    assert epoch_eta_seconds(1, [(1, 4.0)], 10.0, 5, 2) == 6.0
    # Past its epoch's length it is late, not done: 5% of an epoch, at least a second.
    assert epoch_eta_seconds(1, [(1, 50.0)], 10.0, 5, 2) == 1.0
    assert epoch_eta_seconds(1, [(1, 500.0)], 100.0, 5, 2) == 5.0
    # Nothing running: the trials to start share the slots, never less than one whole trial.
    assert epoch_eta_seconds(3, [], 10.0, 5, 2) == 75.0
    assert epoch_eta_seconds(1, [], 10.0, 5, 4) == 50.0
    # One long running trial bounds it from below however many slots are free.
    assert epoch_eta_seconds(2, [(9, 0.0), (1, 0.0)], 10.0, 10, 8) == 90.0


def test_the_epoch_clock_spreads_each_trials_start_up_over_its_epochs_and_skips_repeats():
    clock = EpochClock()
    clock.start("a", 0.0)
    clock.start("b", 0.0)
    assert clock.seen == 0 and clock.epoch_s is None and clock.budget(7) == 7  # the spec's, until a trial says
    assert clock.epoch("a", 1, 5, 0, 30.0) and clock.epoch("a", 2, 5, 0, 40.0) and clock.epoch("b", 1, None, 0, 35.0)
    assert not clock.epoch("a", 2, 5, 0, 41.0)  # a failed trial's last result repeats its last epoch
    assert not clock.epoch("z", 1, 5, 0, 41.0)  # a trial this driver did not see start
    assert clock.seen == 3 and clock.epoch_s == (40.0 + 35.0) / 3 and clock.budget(7) == 5
    assert clock.left(45.0, 7) == [(3, 5.0), (4, 10.0)]  # b's budget: the mean the trials reported
    clock.end("a")
    assert clock.seen == 3 and clock.epoch_s == 25.0 and list(clock.running) == ["b"]
    clock.start("c", 100.0)  # retried from its checkpoint of epoch 3: only this attempt's epochs count
    assert clock.epoch("c", 4, 5, 3, 110.0)
    assert clock.seen == 4 and clock.epoch_s == (40.0 + 35.0 + 10.0) / 4


def _epoch_result(number: int, epoch: int, *, status: str | None = None, loss: float = 1.5, top1: float = 40.0):
    result = {"epoch": epoch, "train_loss": loss, "top1": top1, "epoch_time": 20.0, NUMBER_KEY: number, EPOCHS_KEY: 4}
    return {**result, STATUS_KEY: status} if status else result


def test_epoch_lines_come_as_epochs_end_at_most_one_per_10_s_with_an_eta_before_any_trial_ended(
    store_url, monkeypatch
):
    clock = [0.0]
    monkeypatch.setattr("harness.search.record.progress.time.monotonic", lambda: clock[0])
    stream, records = io.StringIO(), []
    a, b = Trial("__fake", stub=True), Trial("__fake", stub=True)
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        session = SearchSession("progress", on_epoch=records.append)
        progress = ProgressCallback(
            store_url, "progress", OBJECTIVES, stream=stream, n_trials=4, concurrency=2, session=session
        )
        progress.setup()
        for number, trial in enumerate((a, b)):
            store.start_trial("progress", number, {"lr": 0.001 * (number + 1)})
            progress.on_trial_start(0, [a, b], trial)

        def result(trial, at: float, **kwargs) -> None:
            clock[0] = at
            progress.on_trial_result(0, [a, b], trial, _epoch_result(**kwargs))

        result(a, 30.0, number=0, epoch=1)
        # 30 s per epoch so far (start-up included); a has 3 epochs left, b (30 s in, none ended) 4 less
        # its 30 s, two trials of 4 epochs are to start: (90 + 90 + 240) / 2 slots.
        assert _lines(stream)[-1] == (
            "[progress] trial 0 epoch 1/4  loss 1.5  top1 40.0%  30s in  elapsed 30s  eta ~3m30s (from 1 epoch)"
        )
        result(b, 35.0, number=1, epoch=1, top1=30.0)
        result(a, 39.0, number=0, epoch=2)
        assert len(_lines(stream)) == 2  # within 10 s of the last epoch line: none
        result(b, 45.0, number=1, epoch=2, loss=0.25, top1=55.5)
        assert _lines(stream)[-1].startswith("[progress] trial 1 epoch 2/4  loss 0.25  top1 55.5%  45s in  elapsed 45s")
        assert " eta ~" in _lines(stream)[-1] and _lines(stream)[-1].endswith(" (from 4 epochs)")
        result(a, 60.0, number=0, epoch=3, status="completed")  # its last: the trial-end line says it
        result(b, 61.0, number=1, epoch=2, status="failed")  # a failed trial's last result repeats an epoch
        assert len(_lines(stream)) == 3
        assert [(r.trial, r.epoch, r.epochs, r.top1) for r in records] == [
            (0, 1, 4, 40.0), (1, 1, 4, 30.0), (0, 2, 4, 40.0), (1, 2, 4, 55.5), (0, 3, 4, 40.0)
        ]  # fmt: skip
        assert records[0].elapsed_s == 30.0 and records[0].epoch_s == 20.0 and records[3].train_loss == 0.25
        _finish(store, 0, top1=40.0, flops=2.0)
        progress.on_trial_complete(0, [a, b], a)
        assert " eta ~" not in _lines(stream)[-1] and " eta " in _lines(stream)[-1]  # a trial's length from now on
        progress._store.close()


def test_an_on_epoch_that_raises_is_one_warning_and_the_search_goes_on(store_url, monkeypatch):
    monkeypatch.setattr("harness.search.record.progress.time.monotonic", lambda: 0.0)
    calls = []

    def broken(record) -> None:
        calls.append(record.epoch)
        raise ValueError("no figure to draw on")

    stream = io.StringIO()
    trial = Trial("__fake", stub=True)
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        session = SearchSession("progress", on_epoch=broken)
        progress = ProgressCallback(store_url, "progress", OBJECTIVES, stream=stream, n_trials=2, session=session)
        progress.on_trial_start(0, [trial], trial)
        with pytest.warns(RuntimeWarning, match=r"on_epoch callback .*broken raised ValueError: no figure to draw on "
                                                r"\(at epoch 1 of trial 0\); the run goes on") as caught:  # fmt: skip
            for epoch in (1, 2, 3):
                progress.on_trial_result(0, [trial], trial, _epoch_result(0, epoch))
        assert calls == [1, 2, 3] and len(caught) == 1  # called every epoch, said once
        assert _lines(stream)[0].startswith("[progress] trial 0 epoch 1/4  ")  # the line came all the same
        progress._store.close()
    with pytest.raises(TypeError, match="run_search: on_epoch must be a callable taking an EpochProgress, not int"):
        run_search({"name": "x"}, on_epoch=5)


def _counted_line(stream: io.StringIO) -> dict[str, str]:
    """The line's ``key value`` pairs, for the fields a test reads."""
    words = _lines(stream)[-1].split("  ")
    return {word.rsplit(" ", 1)[0].split("] ")[-1]: word.rsplit(" ", 1)[1] for word in words if " " in word}


def test_elapsed_eta_and_best_values_on_a_fake_clock(store_url, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("harness.search.record.progress.time.monotonic", lambda: clock[0])
    stream = io.StringIO()
    a, b = Trial("__fake", stub=True), Trial("__fake", stub=True)
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        progress = ProgressCallback(
            store_url,
            "progress",
            OBJECTIVES,
            stream=stream,
            n_trials=6,
            concurrency=2,
            session=SearchSession("progress"),
        )
        progress.setup()
        store.start_trial("progress", 0, {"lr": 0.001})
        progress.on_trial_start(0, [a], a)
        store.start_trial("progress", 1, {"lr": 0.002})
        progress.on_trial_start(0, [a, b], b)
        store.finish_trial("progress", 2, status="infeasible", config={"lr": 0.003})  # sampled, never ran

        clock[0] += 100
        _finish(store, 0, top1=93.14, flops=1_234_567.0)
        progress.on_trial_complete(0, [a, b], a)
        line = _lines(stream)[-1]
        assert "  best max top1 93.1  min flops 1.23M  " in line
        # 6 trials less the 1 finished (the infeasible one comes on top of n_trials): b, 100 s into a
        # 100 s trial, is late (5 s left); the other 4 fill the 2 slots in two waves of 100 s.
        assert line.startswith("[progress] done 1/6  running 1  completed 1  ")
        assert line.endswith("pareto front 1  best max top1 93.1  min flops 1.23M  elapsed 1m40s  eta 3m25s")
        assert _counted_line(stream)["running"] == "1"


def test_before_any_trial_ended_the_eta_is_unknown_and_without_n_trials_only_elapsed_shows(store_url, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("harness.search.record.progress.time.monotonic", lambda: clock[0])
    stream = io.StringIO()
    a = Trial("__fake", stub=True)
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        progress = ProgressCallback(
            store_url,
            "progress",
            OBJECTIVES,
            stream=stream,
            n_trials=4,
            concurrency=2,
            session=SearchSession("progress"),
        )
        progress.setup()
        progress.on_trial_start(0, [a], a)
        clock[0] += ProgressCallback._HEARTBEAT_S
        progress.on_step_end(0, [a])
        assert _lines(stream)[-1].endswith("pareto front 0  elapsed 1m00s  eta ?")  # no best: nothing completed
        bare = ProgressCallback(store_url, "progress", OBJECTIVES, stream=stream, session=SearchSession("progress"))
        bare.on_trial_complete(0, [], None)
        assert _lines(stream)[-1].endswith("pareto front 0  elapsed 0s")
        progress._store.close()
        bare._store.close()


def test_running_is_the_trials_ray_runs_not_the_stores_rows(store_url, monkeypatch):
    """``concurrency: 2`` showed ``running 1`` throughout while the interrupt then said ``2
    interrupted``: the line counted the store's running rows after StoreCallback (before it in
    Tune's callback list) had recorded the ending trial and before Ray started its successor, so
    every line saw one fewer than ran. ``running`` now counts Tune's start and end events, and a
    heartbeat line shows both while both run and none ends."""
    clock = [0.0]
    monkeypatch.setattr("harness.search.record.progress.time.monotonic", lambda: clock[0])
    stream = io.StringIO()
    a, b, c = (Trial("__fake", stub=True) for _ in range(3))
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        progress = ProgressCallback(
            store_url,
            "progress",
            OBJECTIVES,
            stream=stream,
            n_trials=3,
            concurrency=2,
            session=SearchSession("progress"),
        )
        progress.setup()
        for number, trial in enumerate((a, b)):
            store.start_trial("progress", number, {"lr": 0.001 * (number + 1)})
            progress.on_trial_start(0, [a, b], trial)
        progress.on_step_end(0, [a, b])
        assert len(_lines(stream)) == 1 and " starting: done 0/3, " in _lines(stream)[0]  # no heartbeat yet
        clock[0] += ProgressCallback._HEARTBEAT_S
        progress.on_step_end(0, [a, b])
        assert _counted_line(stream)["running"] == "2"
        progress.on_step_end(0, [a, b])
        assert len(_lines(stream)) == 2  # one heartbeat per _HEARTBEAT_S

        clock[0] += 10
        _finish(store, 0, top1=50.0, flops=2.0)  # StoreCallback's record of a's end comes first ...
        progress.on_trial_complete(0, [a, b], a)  # ... then this line: b runs on
        assert _counted_line(stream)["running"] == "1"
        store.start_trial("progress", 1000, {"lr": 9.0})  # a stale row a dead driver left running
        assert store.counts("progress", epochs=False)["running"] == 2
        store.start_trial("progress", 2, {"lr": 0.003})
        progress.on_trial_start(0, [a, b, c], c)  # a's successor
        clock[0] += ProgressCallback._HEARTBEAT_S - 1
        progress.on_step_end(0, [a, b, c])
        assert len(_lines(stream)) == 3  # the heartbeat waits _HEARTBEAT_S from the last line
        clock[0] += 1
        progress.on_step_end(0, [a, b, c])
        assert _counted_line(stream)["running"] == "2"  # b and c, whatever the store's rows say

        progress.on_trial_error(0, [a, b, c], b)
        progress.on_trial_complete(0, [a, b, c], c)
        assert _counted_line(stream)["running"] == "0"
        clock[0] += 10 * ProgressCallback._HEARTBEAT_S
        progress.on_step_end(0, [a, b, c])
        assert len(_lines(stream)) == 6  # nothing running: no heartbeat
        progress._store.close()


@pytest.mark.slow
def test_a_real_search_with_concurrency_2_says_running_2_while_both_run(tmp_path, monkeypatch, capsys):
    """End to end through Ray Tune (two CPUs, ``concurrency: 2``): with the heartbeat at every
    step, some line is printed while both trials run, and the last trial's end leaves nothing to wait for
    (the best values are the unit tests': a heartbeat every step holds the front's once-a-second reading).
    Before the first trial ends, an epoch line says which epoch of which trial ended, with an ETA from the
    epochs, and ``on_epoch`` hears every epoch of both trials in this (the driver's) process. Each trial's
    measurement reaches the store with what else used its CPUs while its throughput was timed."""
    import ray
    from test_search import tiny_spec

    from harness.search.driver import run_search
    from search_space.validation import load_spec

    monkeypatch.setattr(ProgressCallback, "_HEARTBEAT_S", 0.0)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        spec = tiny_spec(search={"sampler": "random", "n_trials": 2, "concurrency": 2, "seed": 1},
                         # 300 timed batches: a window well over machine_load.MIN_WINDOW_S on an idle machine too
                         # (60 took under 0.25 s there, and no load was read: CI, stop 65's clean clone)
                         measure={"batch_size": 32, "repeats": 300, "warmup": 0, "latency": False})  # fmt: skip
        records = []
        run_search(load_spec(spec), f"sqlite:///{tmp_path / 'store.db'}", study_name="watch", results_dir=tmp_path,
                   on_epoch=records.append)  # fmt: skip
    finally:
        ray.shutdown()
    err = capsys.readouterr().err.splitlines()
    assert sorted((r.trial, r.epoch, r.epochs) for r in records) == [(0, 1, 2), (0, 2, 2), (1, 1, 2), (1, 2, 2)]
    first_end = next(i for i, line in enumerate(err) if line.startswith("[watch] done 1/2 "))
    epoch_lines = [line for line in err[:first_end] if re.match(r"\[watch\] trial [01] epoch 1/2  loss ", line)]
    assert epoch_lines and re.search(r"  eta (~\S+|<1m) \(from \d epochs?\)$", epoch_lines[0]), err
    lines = [line for line in err if line.startswith("[watch] done ")]
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}", create=False) as store:  # the worker's load reading, kept
        measured = [r["measurement"] for r in store.trial_records("watch").values()]
    assert len(measured) == 2 and all(m["load_cores"] >= 1 and "throughput_shared" in m for m in measured), measured
    assert any("  running 2  " in line for line in lines), lines
    # the line ends at its ETA, or at the data-wait note after it: a loaded machine (CI, stop 73) can starve
    # a DataLoader process for real, and the line then says so, as it should
    last, _, data_wait = lines[-1].partition("  data-starved: ")
    assert last.startswith("[watch] done 2/2  running 0  completed 2  ") and last.endswith("  eta 0s"), lines
    assert not data_wait or re.fullmatch(r"trial [01] [12]/2 epochs waited over \d+% for data \(worst \d+%\): .+",
                                         data_wait), lines  # fmt: skip
