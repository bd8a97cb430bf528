"""The progress line a search prints per finished trial (harness.tune_callbacks.ProgressCallback).

Driven directly against a real store, the way Tune calls it: one line per trial end with the
store's counts, and the front's size refreshed at most once a second (a fast search ends trials
many times a second; the line then carries the last known size).
"""

from __future__ import annotations

import io

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
