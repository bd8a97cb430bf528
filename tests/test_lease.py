"""A running study's driver holds a lease (a random token, a beat on the database's clock), not a PID.

Pattern members (issue 57, item 1): a second driver; a driver in another PID namespace (a container on
the same host: ``unshare``, where the machine allows it, and a recorded identity of another kernel
namespace); a skewed clock, the reader's and the driver's; each write a driver makes to its study,
refused once its lease is lost; the heartbeat that finds it lost; a real search whose study is taken
over stops in one line and writes nothing more.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from sqlalchemy import select, update

from harness.store import LeaseLost, Store, StoreError, liveness
from harness.store import base as store_base
from harness.store.schema import Study
from tests.conftest import tiny_search_spec

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")
OTHER_NAMESPACE = "0123456789abcdef:4026599999"  # a kernel namespace no process here is in


def _row(store: Store, name: str):
    with store.engine.connect() as conn:
        return conn.execute(select(Study.__table__).where(Study.name == name)).mappings().one()


def _set(store: Store, name: str, **values) -> None:
    with store.engine.begin() as conn:
        conn.execute(update(Study).where(Study.name == name).values(**values))


def _db_now(store: Store):
    with store.engine.connect() as conn:
        return liveness._aware(conn.execute(select(liveness.db_clock())).scalar())


def _foreign_driver(store: Store, name: str, *, beat_age_s: float = 0.0) -> None:
    """The study held by a driver of another PID namespace on this host, its last beat ``beat_age_s`` ago."""
    import socket

    _set(
        store,
        name,
        status="running",
        driver=f"{socket.gethostname()} 999999 0 {OTHER_NAMESPACE}",
        lease="f" * 32,
        lease_beat=_db_now(store) - timedelta(seconds=beat_age_s),
    )


def test_claiming_writes_a_random_lease_and_a_beat_on_the_database_clock(store_url):
    with Store.open(store_url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        first = store.claim_study("s")
        row = _row(store, "s")
        assert row["lease"] == first and len(first) == 32
        assert abs((liveness._aware(row["lease_beat"]) - _db_now(store)).total_seconds()) < 5
        assert row["driver"].split()[3] == liveness.kernel_namespace()
        assert store.claim_study("s") != first  # a new claim, a new token


def test_a_driver_of_another_pid_namespace_is_judged_by_its_lease_not_by_a_pid(store_url):
    with Store.open(store_url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        _foreign_driver(store, "s")  # pid 999999 does not exist here: the old rule said "stopped"
        assert store.studies().set_index("name").loc["s", "status"] == "running"
        # its PID names no process here, and the message says so (a container's driver is "pid 1")
        assert store.live_driver("s") == "pid 999999 on " + _row(store, "s")["driver"].split()[0] + (
            " (another PID namespace)" if liveness.kernel_namespace() else ""
        )
        assert store.gone_drivers() == {} and store.mark_interrupted() == []
        with pytest.raises(StoreError, match="cannot delete study 's': its search is running"):
            store.delete_study("s")
        with pytest.raises(StoreError, match="cannot rename study 's'"):
            store.rename_study("s", "t")
        with pytest.raises(StoreError, match="being run by another driver"):
            store.claim_study("s")
        # Silent past the stale window on the database's clock: gone, whatever its PID.
        _foreign_driver(store, "s", beat_age_s=liveness.HEARTBEAT_STALE_S + 60)
        assert "no heartbeat from its driver" in store.gone_drivers()["s"]
        assert store.mark_interrupted() == ["s"]
        assert _row(store, "s")["lease"] is None  # judged gone: a driver still alive has lost it
        store.claim_study("s")


def test_a_dead_driver_in_this_pid_namespace_is_known_at_once(store_url):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store.open(store_url) as store:
            store.create_study("s", {"name": "s"}, {"top1": "max"})
            store.claim_study("s")
            _set(store, "s", driver=liveness.driver_identity(holder.pid))  # its beat is fresh
            assert store.live_driver("s") == f"pid {holder.pid} on " + _row(store, "s")["driver"].split()[0]
            holder.kill()
            holder.wait()
            assert "stopped before the search ended" in store.gone_drivers()["s"]
    finally:
        holder.kill()


def test_a_dead_drivers_study_is_shown_and_recorded_interrupted_with_the_trials_it_left_running(store_url, tmp_path):
    """A driver killed outright (SIGKILL, the OOM killer, a lost node) leaves its study and the trials it
    ran ``running``. ``studies`` showed the study ``interrupted`` beside ``running 1``, and recording it
    changed the study alone: a reproduction whose continuation replaced that sitting kept its trials
    ``running`` in the store for ever. Both now say what happened to the trials too; a read still
    writes nothing, and ``names`` limits the recording to the studies asked for."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store.open(store_url) as store:
            for name in ("s", "other"):
                store.create_study(name, {"name": name}, {"top1": "max"})
                store.claim_study(name)
                store.start_trial(name, 0, {"model": {}})
                store.finish_trial(name, 0, status="completed", config={"model": {}}, final={"top1": 50.0})
                store.start_trial(name, 1, {"model": {}})
                _set(store, name, driver=liveness.driver_identity(holder.pid))
            holder.kill()
            holder.wait()
            shown = store.studies().set_index("name").loc["s"]
            assert shown["status"] == "interrupted" and "stopped before the search ended" in shown["message"]
            assert (shown["running"], shown["interrupted"], shown["completed"]) == (0, 1, 1)
            assert store.counts("s")["running"] == 1 and store.study("s")["status"] == "running"  # a read
            _trials_front_and_report_show_the_cut_off_trial_interrupted(store_url, tmp_path / "report.html")
            assert store.mark_interrupted(names=["s"]) == ["s"]
            trials = store.trials("s").set_index("number")
            assert trials["status"].to_dict() == {0: "completed", 1: "interrupted"}
            assert "stopped before the search ended" in trials.loc[1, "error"]
            assert store.study("s")["status"] == "interrupted"
            assert store.study("other")["status"] == "running" and store.counts("other")["running"] == 1
            assert store.mark_interrupted() == ["other"] and store.counts("other")["running"] == 0
    finally:
        holder.kill()


def _trials_front_and_report_show_the_cut_off_trial_interrupted(url: str, html: Path) -> None:
    """``trials``, ``pareto`` and ``report`` of study ``s``, whose driver is gone, show its trial 1
    ``interrupted`` (as ``studies`` shows the study), the first two with one note on stderr; they said
    ``running`` for ever (the report: the study too)."""
    from click.testing import CliRunner

    from harness.cli import main

    listed = CliRunner().invoke(main, ["trials", "s", "--store", url, "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert [row["status"] for row in json.loads(listed.stdout)] == ["completed", "interrupted"]
    assert "note: study s: interrupted: its driver (pid" in listed.stderr and "the 1 trials it left" in listed.stderr
    front = CliRunner().invoke(main, ["pareto", "s", "--store", url])
    assert front.exit_code == 0, front.output
    assert "front of 1 from 2 trials (completed 1, interrupted 1)" in front.stdout
    written = CliRunner().invoke(main, ["report", "s", "--store", url, "--output", str(html)])
    assert written.exit_code == 0, written.output
    page = " ".join(html.read_text().split())
    assert '<tr><td>status</td><td class="text">interrupted</td></tr>' in page
    assert "Study interrupted: its driver (pid" in page
    counts = page.split("Trials by status", 1)[1].split("</table>", 1)[0]
    header = [cell.split("</th>")[0] for cell in counts.split("<th>")[1:]]
    values = [cell.split("</td>")[0] for cell in counts.split("<td>")[1:]]
    assert dict(zip(header, values, strict=True))["running"] == "0"
    assert dict(zip(header, values, strict=True))["interrupted"] == "1"


@pytest.mark.parametrize("skew_s", [-7200.0, 7200.0])
def test_a_skewed_client_clock_never_reads_as_a_dead_driver(store_url, monkeypatch, skew_s):
    """Beats are stamped and judged on the database's clock: a reader (or a driver) whose own clock is
    hours off sees a live driver as live. Under the old rule (each client's clock) this failed."""
    real_now = store_base._now

    with Store.open(store_url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        _foreign_driver(store, "s")
        monkeypatch.setattr(store_base, "_now", lambda: real_now() + timedelta(seconds=skew_s))
        monkeypatch.setattr(liveness, "_now", lambda: real_now() + timedelta(seconds=skew_s))
        assert store.studies().set_index("name").loc["s", "status"] == "running"
        assert store.live_driver("s") is not None and store.mark_interrupted() == []
        # A driver with a skewed clock: its beat is still the database's time.
        store.create_study("t", {"name": "t"}, {"top1": "max"})
        store.claim_study("t")
        store.heartbeat("t")
        beat = liveness._aware(_row(store, "t")["lease_beat"])
        assert abs((beat - _db_now(store)).total_seconds()) < 5


def _writes(store: Store, name: str):
    """Every write a driver makes to its own study, each as a thunk."""
    return {
        "heartbeat": lambda: store.heartbeat(name),
        "verify_lease": lambda: store.verify_lease(name),
        "start_trial": lambda: store.start_trial(name, 9, {"model": {}}),
        "record_epoch": lambda: store.record_epoch(name, 0, {"epoch": 2, "top1": 1.0}),
        "finish_trial": lambda: store.finish_trial(name, 0, status="completed", config={"model": {}}),
        "interrupt_running_trials": lambda: store.interrupt_running_trials(name),
        "set_study_status": lambda: store.set_study_status(name, "interrupted", message="x"),
    }


def test_a_driver_that_lost_its_lease_writes_nothing_more(store_url):
    with Store.open(store_url) as driver, Store.open(store_url) as other:
        driver.create_study("s", {"name": "s"}, {"top1": "max"})
        driver.claim_study("s")
        driver.start_trial("s", 0, {"model": {}})
        for write in _writes(driver, "s").values():  # all allowed while the lease is its own
            write()
        driver.set_study_status("s", "running")
        before = other.trials("s")[["number", "status"]].to_dict("records")
        _set(other, "s", lease="another driver's token")  # taken over (as claim_study does)
        for _what, write in _writes(driver, "s").items():
            with pytest.raises(LeaseLost, match="lost its lease on study 's'"):
                write()
        assert other.trials("s")[["number", "status"]].to_dict("records") == before, "a refused write landed"
        assert _row(other, "s")["status"] == "running"


def test_a_driver_whose_study_was_deleted_is_told_so(store_url):
    with Store.open(store_url) as driver, Store.open(store_url) as admin:
        driver.create_study("s", {"name": "s"}, {"top1": "max"})
        driver.claim_study("s")
        _set(admin, "s", status="interrupted")
        admin.delete_study("s")
        for _what, write in _writes(driver, "s").items():
            with pytest.raises(LeaseLost, match="no longer exists"):
                write()
        with Store.open(store_url) as fresh:  # a store the driver opens now, holding the same lease
            fresh.hold_lease("s", "token")
            with pytest.raises(LeaseLost, match="no longer exists"):
                fresh.heartbeat("s")


def test_the_heartbeat_that_finds_the_lease_lost_stops_the_search(store_url):
    from harness.search.session import SearchSession
    from harness.search.watch import Heartbeat

    with Store.open(store_url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        session = SearchSession("s", store_url=store_url)
        session.lease = store.claim_study("s")
        with Heartbeat(store_url, "s", session, interval_s=0.05):
            time.sleep(0.3)
            assert session.stop_request is None
            first = liveness._aware(_row(store, "s")["lease_beat"])
            _set(store, "s", lease="taken over")
            deadline = time.monotonic() + 10
            while session.stop_request is None and time.monotonic() < deadline:
                time.sleep(0.05)
        assert session.lease_lost
        assert "lost its lease on study 's'" in session.stop_request.reason
        assert liveness._aware(_row(store, "s")["lease_beat"]) >= first


def test_a_failed_beat_is_skipped_not_the_end_of_the_beats(tmp_path):
    """The database away for a moment: the next beat goes through (the old heartbeat thread ended on
    its first error, and the live driver looked dead ten minutes later)."""
    from harness.search.session import SearchSession
    from harness.search.watch import Heartbeat

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        session = SearchSession("s", store_url=url)
        session.lease = store.claim_study("s")
    moved = tmp_path / "away.db"
    with Heartbeat(url, "s", session, interval_s=0.05):
        os.replace(tmp_path / "store.db", moved)  # beats fail: no store there (and none is created)
        time.sleep(0.3)
        os.replace(moved, tmp_path / "store.db")
        with Store.open(url) as store:
            _set(store, "s", lease_beat=_db_now(store) - timedelta(hours=1))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if (_db_now(store) - liveness._aware(_row(store, "s")["lease_beat"])).total_seconds() < 60:
                    break
                time.sleep(0.05)
            assert (_db_now(store) - liveness._aware(_row(store, "s")["lease_beat"])).total_seconds() < 60
    assert session.stop_request is None


HOLDER = textwrap.dedent(
    """
    import sys, time
    from harness.store import Store
    with Store.open(sys.argv[1]) as store:
        store.create_study("held", {"name": "held"}, {"top1": "max"})
        store.claim_study("held")
        print("claimed", flush=True)
        while True:
            time.sleep(0.5)
            store.heartbeat("held")
    """
)


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="this machine does not allow a new PID namespace (unshare)")
def test_from_another_pid_namespace_a_live_driver_is_running_and_cannot_be_deleted(tmp_path):
    """The issue's case: ``unshare --pid --fork --mount-proc archsearch studies ...`` beside a live driver
    showed it interrupted and deleted its study (exit 0)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        inside = ["unshare", "--pid", "--fork", "--mount-proc", EXE, "studies", "--store", url]
        listed = subprocess.run([*inside, "--format", "json"], capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        (study,) = [s for s in yaml.safe_load(listed.stdout) if s["name"] == "held"]
        assert study["status"] == "running", study
        deleted = subprocess.run([*inside, "--delete", "held", "--yes"], capture_output=True, text=True, timeout=120)
        assert deleted.returncode != 0 and "its search is running" in deleted.stderr, deleted.stderr
        with Store.open(url, create=False) as store:
            assert "held" in store.study_names()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_search_whose_study_is_taken_over_stops_in_one_line_and_writes_nothing_more(tmp_path):
    spec = tiny_search_spec("taken", n_trials=6)
    spec["training"]["epochs"] = 4
    spec["data"]["train_size"] = 256
    spec["search"]["concurrency"] = 1
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    driver = subprocess.Popen(
        [EXE, "search", str(path), "--store", url, "--results-dir", str(tmp_path / "ray")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        taken = False
        while time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.5)
            try:
                with Store.open(url, create=False) as store:
                    if "taken" in store.study_names() and store.counts("taken", epochs=False)["completed"] >= 1:
                        snapshot = _take_over(store, "taken")
                        taken = True
                        break
            except StoreError:
                continue
        assert taken, "no trial completed before the deadline"
        _out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1, err[-2000:]
    errors = [line for line in err.splitlines() if "lost its lease" in line]
    assert errors and "study 'taken'" in errors[-1] and "resume with" not in errors[-1], err[-2000:]
    with Store.open(url, create=False) as store:
        row = _row(store, "taken")
        trials = store.trials("taken")
        after = _rows_of(store, "taken")
    assert row["lease"] == "another driver's" and row["status"] == "running", "the old driver wrote its status"
    # Exactly as the takeover read it, in its own transaction: a write of the driver's in flight (its
    # lease checked and the study locked in that write's transaction, harness.store.lease_guard for
    # Optuna's) committed before the takeover could, and every later one was refused.
    assert after == snapshot, ("the driver wrote to the study after it was taken over", snapshot, after)
    assert len(trials) < 6  # it stopped: the rest of its budget was not spent on someone else's study


def _rows_of(store: Store, name: str, conn=None) -> tuple[int, int, list, list]:
    """(trial rows, epoch rows, each trial's number and status, Optuna's trials with their state and
    number of intermediate values) of a study: what a write would change."""
    from sqlalchemy import func, text

    from harness.store.schema import EpochRecord, Trial

    def read(conn):
        study_id = conn.execute(select(Study.id).where(Study.name == name)).scalar_one()
        trials = conn.execute(select(Trial.number, Trial.status).where(Trial.study_id == study_id)).all()
        epochs = conn.execute(
            select(func.count()).select_from(EpochRecord).join(Trial).where(Trial.study_id == study_id)
        ).scalar_one()
        # Optuna's record of the study (asked trials, their states, intermediate values): the driver's too
        optuna = conn.execute(
            text(
                "SELECT t.number, t.state, (SELECT count(*) FROM trial_intermediate_values v WHERE v.trial_id ="
                " t.trial_id) FROM trials t JOIN studies s ON s.study_id = t.study_id WHERE s.study_name = :name"
            ),
            {"name": name},
        ).all()
        return len(trials), epochs, sorted(map(tuple, trials)), sorted(map(tuple, optuna))

    if conn is not None:
        return read(conn)
    with store.engine.connect() as fresh:
        return read(fresh)


def _take_over(store: Store, name: str) -> tuple[int, int, list, list]:
    """Another driver takes the study's lease (as its claim would) and, in the same transaction (so no
    write slips between), what the study holds is read."""
    with store.engine.connect().execution_options(archsearch_write=True) as conn, conn.begin():
        conn.execute(update(Study).where(Study.name == name).values(lease="another driver's", driver="elsewhere 1 0 -"))
        return _rows_of(store, name, conn)


SILENT_HOLDER = textwrap.dedent(
    """
    import sys, time
    from harness.store import Store
    with Store.open(sys.argv[1]) as store:
        store.create_study("held", {"name": "held"}, {"top1": "max"})
        store.claim_study("held")
    print("claimed", flush=True)  # its store closed: the lease and its lock are the process's
    time.sleep(120)
    """
)


def test_a_sqlite_reader_whose_clock_runs_ahead_still_sees_a_live_driver(tmp_path):
    """SQLite has no server clock: its CURRENT_TIMESTAMP is the reader's. A reader 15 minutes ahead of
    a live driver (in another PID namespace, so its PID says nothing) judged it silent and marked its
    study interrupted, and a rename went through. The driver's kernel lock on the file says it is alive."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    holder = subprocess.Popen([sys.executable, "-c", SILENT_HOLDER, url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with Store.open(url, create=False) as store:
            lease = _row(store, "held")["lease"]
            # As the reader 15 minutes ahead sees it: another namespace's driver, its beat long past.
            _foreign_driver(store, "held", beat_age_s=liveness.HEARTBEAT_STALE_S + 900)
            _set(store, "held", lease=lease)
            assert store.live_driver("held") is not None
            assert store.gone_drivers() == {} and store.mark_interrupted() == []
            with pytest.raises(StoreError, match="cannot rename study 'held'"):
                store.rename_study("held", "other")
            with pytest.raises(StoreError, match="being run by another driver"):
                store.claim_study("held")
            holder.kill()
            holder.wait()
            # Its lock went with it: now the silent beat decides, and the study is taken over.
            assert "no heartbeat from its driver" in store.gone_drivers()["held"]
            assert store.mark_interrupted() == ["held"]
            store.claim_study("held")
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_a_driver_whose_sqlite_file_is_replaced_or_removed_stops_writing(tmp_path, how):
    """A driver kept writing into the unlinked file after a restore replaced the store: every write
    after that was lost to every reader. Its lock's open file tells it, at the next write or beat."""
    path = tmp_path / "store.db"
    with Store.open(f"sqlite:///{path}") as driver:
        driver.create_study("s", {"name": "s"}, {"top1": "max"})
        driver.claim_study("s")
        driver.heartbeat("s")
        if how == "replaced":
            shutil.copy(path, tmp_path / "copy.db")
            os.replace(tmp_path / "copy.db", path)
        else:
            path.unlink()
        for write in _writes(driver, "s").values():
            with pytest.raises(LeaseLost, match="removed or replaced"):
                write()


def _guarded_optuna_study(store: Store, url: str, name: str):
    """Study ``name`` created and claimed in the store, and Optuna's study of it on a storage whose
    writes are guarded by that claim's lease; (the Optuna study, its engine, the lease holder)."""
    import optuna

    from harness.store.lease_guard import guard_writes
    from harness.store.urls import optuna_storage_url

    store.create_study(name, {"name": name}, {"top1": "max"})
    holder = SimpleNamespace(study=name, lease=store.claim_study(name), lease_lost=False)
    storage = optuna.storages.RDBStorage(optuna_storage_url(url))
    guard_writes(storage.engine, holder)
    study = optuna.create_study(study_name=name, storage=storage, directions=["maximize"])
    return study, storage.engine, holder


def test_an_optuna_write_after_a_takeover_is_refused_and_leaves_the_trial_as_it_was(store_url):
    """An asked trial is Optuna's write: once the study is taken over, asking pops no waiting trial."""
    with Store.open(store_url) as store:
        study, _engine, _holder = _guarded_optuna_study(store, store_url, "guarded")
        study.enqueue_trial({"x": 1.0})
        _take_over(store, "guarded")
        with pytest.raises(LeaseLost, match="taken over"):
            study.ask()
        assert [t.state.name for t in study.get_trials(deepcopy=False)] == ["WAITING"]


def test_a_takeover_waits_for_the_optuna_write_in_flight_and_every_later_write_sees_it(store_url):
    """CI caught the race: the lease was checked in one transaction and Optuna wrote in another, so a
    takeover that committed between them let a WAITING trial become RUNNING in a study the driver no
    longer held. The check is now the write transaction's first statement, and it locks the study:
    an Optuna write paused just after its check commits before the takeover can, and the next is refused."""
    import threading

    from sqlalchemy import event

    with Store.open(store_url) as store:
        study, engine, _holder = _guarded_optuna_study(store, store_url, "raced")
        study.enqueue_trial({"x": 1.0})
        study.enqueue_trial({"x": 2.0})
        checked, release, order = threading.Event(), threading.Event(), []

        def pause_before_the_write(conn, cursor, statement, *args) -> None:  # after the guard's listener
            own_check = conn.info.get("archsearch_lease_checking")
            if statement.lstrip().upper().startswith("UPDATE") and not own_check and not checked.is_set():
                checked.set()
                release.wait(30)

        event.listen(engine, "before_cursor_execute", pause_before_the_write)
        event.listen(engine, "commit", lambda conn: release.is_set() and not order and order.append("optuna's write"))

        def ask() -> None:
            with contextlib.suppress(LeaseLost):  # a later write of the same ask: refused, as it should be
                study.ask()

        asking = threading.Thread(target=ask)
        asking.start()
        assert checked.wait(30), "the ask never reached its write"

        def take_over() -> None:
            _take_over(store, "raced")
            order.append("takeover")

        taking = threading.Thread(target=take_over)
        taking.start()
        taking.join(1.0)  # given the chance to slip in while the write is paused
        release.set()
        asking.join(30)
        taking.join(60)
        assert order[:2] == ["optuna's write", "takeover"], order
        with pytest.raises(LeaseLost):
            study.ask()
        assert sorted(t.state.name for t in study.get_trials(deepcopy=False)) == ["RUNNING", "WAITING"]
