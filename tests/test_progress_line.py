"""The progress line a search prints per finished trial (harness.tune_callbacks.ProgressCallback).

Driven directly against a real store, the way Tune calls it: one line per trial end with the
store's counts, and the front's size refreshed at most once a second (a fast search ends trials
many times a second; the line then carries the last known size).
"""

from __future__ import annotations

import io

import numpy as np

from dashboards.multiobjective import plateau_check
from harness import stop_rules
from harness.stop_rules import StopRulesStopper
from harness.store import Store
from harness.tune_callbacks import ProgressCallback

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
    monkeypatch.setattr("harness.tune_callbacks.time.monotonic", lambda: clock[0])
    stream = io.StringIO()
    with Store.open(store_url) as store:
        store.create_study("progress", {}, OBJECTIVES)
        progress = ProgressCallback(store_url, "progress", OBJECTIVES, stream=stream)

        _finish(store, 0, top1=50.0, flops=2.0)
        progress.on_trial_complete(0, [], None)
        assert _lines(stream)[-1] == (
            "[progress] done 1  running 0  pruned 0  failed 0  infeasible 0  duplicate 0  pareto front 1"
        )

        # Within the second: counts are fresh, the front is the last known one.
        _finish(store, 1, top1=40.0, flops=1.0)  # a second front member
        store.start_trial("progress", 2, {"lr": 0.5})
        clock[0] += 0.5
        progress.on_trial_complete(0, [], None)
        assert _lines(stream)[-1].startswith("[progress] done 2  running 1  pruned 0  failed 0")
        assert _lines(stream)[-1].endswith("pareto front 1")

        # A second later the front is queried again.
        _finish(store, 2, top1=60.0, flops=0.5, status="failed")
        clock[0] += 0.6
        progress.on_trial_complete(0, [], None)
        assert _lines(stream)[-1] == (
            "[progress] done 2  running 0  pruned 0  failed 1  infeasible 0  duplicate 0  pareto front 2"
        )
        assert len(_lines(stream)) == 3
        progress._store.close()


def test_a_progress_line_that_cannot_be_computed_says_so_and_never_raises(tmp_path):
    stream = io.StringIO()
    progress = ProgressCallback(f"sqlite:///{tmp_path / 'missing' / 'store.db'}", "gone", OBJECTIVES, stream=stream)
    progress.on_trial_complete(0, [], None)
    assert _lines(stream) == [_lines(stream)[0]] and "(progress unavailable:" in _lines(stream)[0]


def test_the_plateau_reading_on_a_trials_line_counts_that_trial(store_url):
    """``search.stop.hypervolume_plateau``: Tune runs the callbacks of a trial's end before its
    loop step asks the stoppers, so a line that read the stopper's last reading showed the
    previous trial end's ("done 6 ... hv +287%" right above "stopping: ... gained 0.000%"). The
    line for each trial end must carry the reading over the trials the store holds at that end,
    and the stop the reading decides is the stopper's at its next look."""
    stop_rules.reset()
    try:
        stream = io.StringIO()
        with Store.open(store_url) as store:
            store.create_study("progress", {}, OBJECTIVES)
            stopper = StopRulesStopper(
                store_url, "progress", OBJECTIVES, {"hypervolume_plateau": {"window": 1, "min_gain": 0.001}}
            )
            progress = ProgressCallback(store_url, "progress", OBJECTIVES, stream=stream)
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
            assert check.gain == 0.0 and "hypervolume plateau" in stop_rules.current()
            assert "hv +0.00% over the last 1" in _lines(stream)[-1]
            assert float(_lines(stream)[-2].split("hv ")[1].split("%")[0]) > 0  # the second trial moved it
            progress._store.close()
            stopper._store.close()
    finally:
        stop_rules.reset()
