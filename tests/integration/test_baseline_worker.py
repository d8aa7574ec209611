"""The baseline worker's parts against a real SQLite file, in process: idle pacing, surviving a store locked
past its timeout or removed under it, giving jobs back on a stop, waiting for an external effect in flight,
and sweeping."""

from __future__ import annotations

import fcntl
import itertools
import logging
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine

from outbox_bridge.baseline import pacing
from outbox_bridge.baseline.pacing import FIRST_IDLE_PAUSE, MAX_IDLE_PAUSE, idle_pauses
from outbox_bridge.baseline.worker import BaselineProcess
from outbox_bridge.core import clock
from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, migrate, queries
from outbox_bridge.jobstore.drivers.sqlite.writer_queue import WriterQueue
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker import budget, producer
from outbox_bridge.worker.release import Release, release
from outbox_bridge.worker.shutdown import RELEASE_SETTLE_SECONDS
from tests.conftest import make_settings
from tests.support.invariants import check_invariants
from tests.support.procs import wait_for
from tests.support.store import job_row, new_job, new_jobs


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The baseline is the SQLite-only design: it always runs on a SQLite file of its own."""
    return make_settings(tmp_path)


def claim(engine: Engine, worker: str = "elsewhere") -> Claim:
    taken = db.transact(engine, claiming.claim_next, worker, clock.now(), 30.0)
    assert taken is not None
    return taken


@contextmanager
def running(engine: Engine, settings: Settings, concurrency: int = 2) -> Iterator[BaselineProcess]:
    """A started worker process's threads; stopped at the end whatever happens."""
    process = BaselineProcess(engine, settings, concurrency=concurrency).start()
    try:
        yield process
    finally:
        if not process.stopping.is_set():
            process.shutdown()


@contextmanager
def provider_held(settings: Settings) -> Iterator[None]:
    """Hold the stub provider's file lock: a `notify` call blocks inside the provider until released."""
    settings.notify_log.parent.mkdir(parents=True, exist_ok=True)
    with open(settings.notify_log, "a+") as log:
        fcntl.flock(log.fileno(), fcntl.LOCK_EX)
        yield


def test_idle_pause_doubles_up_to_its_cap_and_starts_over_after_work() -> None:
    backoff = Streak(Backoff(0.001, 0.008, random.Random(7)))
    expected = [0.001, 0.002, 0.004, 0.008, 0.008]
    pauses = [backoff.failed() for _ in expected]
    for pause, ceiling in zip(pauses, expected, strict=True):
        assert 0.5 * ceiling <= pause <= ceiling
    backoff.reset()
    assert backoff.failed() <= 0.001


def test_an_unavailable_store_keeps_the_longest_pause_until_work_comes() -> None:
    backoff = idle_pauses(random.Random(3))
    assert backoff.at_cap() >= 0.5 * MAX_IDLE_PAUSE
    assert backoff.failed() >= 0.5 * MAX_IDLE_PAUSE
    backoff.reset()
    assert backoff.failed() <= FIRST_IDLE_PAUSE


def test_idle_pauses_of_two_processes_drift_apart() -> None:
    one, other = idle_pauses(random.Random(1)), idle_pauses(random.Random(2))
    assert [one.failed() for _ in range(8)] != [other.failed() for _ in range(8)]


def hold_head(queue: WriterQueue, seconds: float, spans: list[tuple[float, float]]) -> None:
    with queue.taken() as had:
        assert had
        began = time.monotonic()
        time.sleep(seconds)
        spans.append((began, time.monotonic()))


def test_writer_queues_on_one_file_never_let_two_heads_overlap(tmp_path: Path) -> None:
    queues = [WriterQueue(tmp_path / "queue", timeout=5.0) for _ in range(3)]
    spans: list[tuple[float, float]] = []
    holders = [
        threading.Thread(target=hold_head, args=(queue, 0.1, spans)) for queue in queues for _ in range(2)
    ]
    for holder in holders:
        holder.start()
    for holder in holders:
        holder.join(10)
    for queue in queues:
        queue.close()
    assert len(spans) == 6
    ordered = sorted(spans)
    assert all(earlier[1] <= later[0] for earlier, later in itertools.pairwise(ordered))


def test_waiting_in_the_writer_queue_gives_up_after_its_timeout(tmp_path: Path) -> None:
    path = tmp_path / "queue"
    holder, waiter = WriterQueue(path, timeout=5.0), WriterQueue(path, timeout=0.2)
    with holder.taken():
        began = time.monotonic()
        with waiter.taken() as had:
            waited = time.monotonic() - began
    assert not had
    assert 0.2 <= waited < 2.0
    with waiter.taken() as had:
        assert had
    holder.close()
    waiter.close()


def test_a_killed_head_of_the_writer_queue_frees_its_place(tmp_path: Path) -> None:
    path = tmp_path / "queue"
    script = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        queue = WriterQueue(path, timeout=0.2)
        with queue.taken() as had:
            assert not had
        other.kill()
        other.wait(10)
        with queue.taken() as had:
            assert had
        queue.close()
    finally:
        other.kill()
        other.wait(10)
        assert other.stdout is not None
        other.stdout.close()


def test_an_idle_worker_is_woken_by_a_commit_instead_of_waiting_out_its_pause(
    settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle pauses of 5-10 s: only a notification can explain a job started within a second.
    monkeypatch.setattr(pacing, "FIRST_IDLE_PAUSE", 10.0)
    monkeypatch.setattr(pacing, "MAX_IDLE_PAUSE", 10.0)
    with running(engine, settings) as process:
        wait_for(lambda: process.listening.listening, 10, what="the worker listening for notifications")
        time.sleep(0.3)  # the writer has polled once and is in its long pause
        started = time.monotonic()
        job_id = new_job(engine, key="notified")
        wait_for(lambda: job_row(engine, job_id).state is State.SUCCEEDED, 10, what="the job run")
        took = time.monotonic() - started
        assert process.shutdown() == 0
    assert took < 2.0, f"ran after {took:.2f}s: the worker waited out its idle pause"


def test_a_listening_worker_does_not_poll_quickly_after_each_job(settings: Settings, engine: Engine) -> None:
    # Each commit of a due job notifies the worker, so quick polls after work would find nothing. Without a
    # listener the pause after a round that took less than its room starts at about a millisecond and
    # doubles: some six polls in each 100 ms gap (70 write transactions here where 31 are enough).
    jobs, gap = 10, 0.1
    with running(engine, settings, concurrency=2) as process:
        wait_for(lambda: process.listening.listening, 10, what="the worker listening for notifications")
        time.sleep(0.3)
        before, started = db.stats.snapshot()["write_transactions"], time.monotonic()
        job_ids = []
        for i in range(jobs):
            job_ids.append(new_job(engine, key=f"paced-{i}"))
            time.sleep(gap)
        wait_for(
            lambda: all(job_row(engine, j).state is State.SUCCEEDED for j in job_ids), 10, what="the jobs run"
        )
        written = db.stats.snapshot()["write_transactions"] - before - jobs  # less the accepts above
        idle_polls = (time.monotonic() - started) / (
            MAX_IDLE_PAUSE / 2
        )  # the idle pause: at least half its cap
        assert process.shutdown() == 0
    # A claim and a commit per job, the idle polls, and a few of the keeper's, sweeper's and heartbeat's.
    allowed = 2 * jobs + idle_polls + 5
    assert written <= allowed, (
        f"{written} write transactions for {jobs} jobs (at most {allowed:.0f} expected)"
    )


def test_an_idle_worker_polls_with_reads_not_write_transactions(settings: Settings, engine: Engine) -> None:
    # An idle poll finds nothing; on SQLite a write transaction for it would take the host's write lock
    # some fifteen times a second for nothing. A job that comes due is still taken at once.
    with running(engine, settings, concurrency=2) as process:
        wait_for(lambda: process.listening.listening, 10, what="the worker listening for notifications")
        time.sleep(0.3)
        before, started = db.stats.snapshot(), time.monotonic()
        time.sleep(1.0)
        after, took = db.stats.snapshot(), time.monotonic() - started
        job_id = new_job(engine, key="after-idle")
        wait_for(lambda: job_row(engine, job_id).state is State.SUCCEEDED, 10, what="the job to run")
        assert process.shutdown() == 0
    polls = after["read_transactions"] - before["read_transactions"]
    written = after["write_transactions"] - before["write_transactions"]
    assert polls >= 0.5 * took / MAX_IDLE_PAUSE, f"{polls} idle polls in {took:.2f}s"  # 6 or more
    # The keeper's, sweeper's and heartbeat's own writes, at most a few a second.
    assert written <= 4, f"{written} write transactions in {took:.2f}s of idling ({polls} polls)"


@pytest.mark.databases("sqlite")
def test_workers_pause_on_a_removed_store_say_why_once_and_resume_once_it_is_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "store"
    settings = make_settings(tmp_path, database_url=f"sqlite:///{directory / 'jobs.db'}")
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    caplog.set_level(logging.INFO)
    with running(engine, settings) as process:
        before = new_job(engine, "before")
        wait_for(
            lambda: job_row(engine, before).state is State.SUCCEEDED, 10, what="the first job to succeed"
        )
        with closing(sqlite3.connect(directory / "jobs.db")) as live:
            with closing(sqlite3.connect(tmp_path / "backup.db")) as copy:
                live.backup(copy)

        shutil.rmtree(directory)  # the workers' pooled connections still have the removed file open
        time.sleep(1.0)  # a removed file fails each try at once: many tries
        assert not directory.exists(), "no worker re-created the store"

        directory.mkdir()
        (tmp_path / "backup.db").rename(directory / "jobs.db")
        after = new_job(engine, "after")
        wait_for(lambda: job_row(engine, after).state is State.SUCCEEDED, 10, what="a job after the restore")
        assert process.shutdown() == 0
    engine.dispose()
    said = [r.getMessage() for r in caplog.records if "pausing claims" in r.getMessage()]
    assert len(said) == 1, said  # once, not once per try
    assert "no store at" in said[0]
    assert caplog.text.count("the store answers again") == 1


@pytest.mark.databases("sqlite")
def test_workers_outlast_a_store_locked_past_its_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path, store_lock_timeout_seconds=0.2, sweep_interval_seconds=0.1)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    caplog.set_level(logging.WARNING)
    with running(engine, settings) as process:
        # Due while the store is locked: a poll reads that it is due, then cannot take the write lock.
        job_id = new_job(engine, now=clock.now() + 0.3)
        locker = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"), isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")
        time.sleep(1.0)  # five store timeouts' worth: the writer gives up at least once
        locker.execute("ROLLBACK")
        locker.close()
        wait_for(lambda: job_row(engine, job_id).state is State.SUCCEEDED, 10, what="the job to succeed")
        assert process.writers[0].threads_alive() == 3  # the store writer and both runners
        assert process.shutdown() == 0
    engine.dispose()
    assert "store unavailable, pausing claims" in caplog.text
    assert "database is locked" not in caplog.text
    assert process.writers[0].counts.outcomes() == {"succeeded": 1}


def test_a_handed_back_job_is_queued_again_with_its_attempt_uncounted(
    settings: Settings, engine: Engine
) -> None:
    job_id = new_job(engine)
    taken = claim(engine)

    assert release(engine, taken) is Release.RELEASED
    released = job_row(engine, job_id)
    assert (released.state, released.attempts, released.epoch, released.lease_owner) == (
        State.QUEUED,
        0,
        1,
        None,
    )
    assert [a.outcome for a in db.read(engine, queries.attempts_of, job_id)] == ["released"]


def test_a_job_whose_external_effect_started_cannot_be_handed_back(
    settings: Settings, engine: Engine
) -> None:
    job_id = new_job(engine, kind="notify", payload={"to": "a@example.com", "message": "hi"})
    taken = claim(engine)
    db.transact(engine, fenced.mark_external_started, job_id, taken.epoch, taken.attempt_id, clock.now())

    assert release(engine, taken) is Release.MUST_FINISH
    assert (job_row(engine, job_id).state, job_row(engine, job_id).attempts) == (State.RUNNING, 1)


def test_a_finished_job_is_no_longer_held_and_stays_finished(settings: Settings, engine: Engine) -> None:
    job_id = new_job(engine)
    taken = claim(engine)
    db.transact(engine, fenced.complete, job_id, taken.epoch, taken.attempt_id, {"ok": True}, clock.now())

    assert release(engine, taken) is Release.NOT_HELD
    assert job_row(engine, job_id).state is State.SUCCEEDED


def test_stopping_waits_for_an_external_call_in_flight_to_finish(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, shutdown_grace_seconds=0.2, lease_seconds=5.0)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    job_id = new_job(engine, kind="notify", payload={"to": "a@example.com", "message": "hi"})
    with provider_held(settings), running(engine, settings, concurrency=1) as process:
        wait_for(lambda: job_row(engine, job_id).external_epoch == 1, 10, what="the external effect to start")
        stopped: list[int] = []
        stopper = threading.Thread(target=lambda: stopped.append(process.shutdown()))
        stopper.start()
        # Past the grace period and the settling time given to released jobs: this one is waited for.
        time.sleep(RELEASE_SETTLE_SECONDS + 0.5)
        assert job_row(engine, job_id).state is State.RUNNING
        assert stopper.is_alive()
    stopper.join(10)
    engine.dispose()
    assert stopped == [0]
    assert job_row(engine, job_id).state is State.SUCCEEDED
    assert process.writers[0].counts.outcomes() == {"succeeded": 1}


def test_a_job_that_cannot_finish_in_time_is_left_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A lease of 3 s, renewed every second: one of 1 s (renewed every third of a second) was seen to run out
    # on a loaded machine during the shutdown's wait, and a lost lease is not reported as left running.
    settings = make_settings(tmp_path, shutdown_grace_seconds=0.2, lease_seconds=3.0)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    job_id = new_job(engine, kind="notify", payload={"to": "a@example.com", "message": "hi"})
    caplog.set_level(logging.INFO)
    with provider_held(settings), running(engine, settings, concurrency=1) as process:
        wait_for(lambda: job_row(engine, job_id).external_epoch == 1, 10, what="the external effect to start")
        assert process.shutdown() == 1
    wait_for(lambda: process.writers[0].threads_alive() == 0, 10, what="the threads to end")
    engine.dispose()
    assert f"job {job_id} epoch 1: must_finish" in caplog.text
    assert f"job {job_id} epoch 1 left running" in caplog.text


def test_the_worker_sweeps_a_lease_that_no_claim_may_take(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, kind="notify", payload={"to": "a@example.com", "message": "hi"})
    taken = claim(engine, worker="vanished")
    db.transact(engine, fenced.mark_external_started, job_id, taken.epoch, taken.attempt_id, clock.now())
    clock.advance(31)
    fast = settings.model_copy(update={"sweep_interval_seconds": 0.05})
    with running(engine, fast) as process:
        wait_for(
            lambda: job_row(engine, job_id).state is State.UNKNOWN, 10, what="the sweeper to settle the job"
        )
        assert process.shutdown() == 0
    assert [a.outcome for a in db.read(engine, queries.attempts_of, job_id)] == ["lost"]
    assert process.writers[0].counts.outcomes() == {}


def test_jobs_claimed_ahead_of_a_long_kind_go_back_to_the_table_and_still_run_once(
    settings: Settings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short jobs first, so the worker claims ahead; then slow ones, which it claims ahead too until the
    # first runs long. Those still waiting for a thread then go back to the table, where any worker with
    # a thread free (here, this one again) claims them in their turn.
    # Claiming ahead starts after 16 jobs in a row ran under half of `AHEAD_SECONDS`: at its 50 ms, one noop
    # held up 25 ms by a loaded machine (the suite's other processes) kept the worker from ever claiming
    # ahead. At 200 ms, a noop is short and a 0.5 s job long on any machine this suite runs on.
    for module in (budget, producer):
        monkeypatch.setattr(module, "AHEAD_SECONDS", 0.2)
    caplog.set_level(logging.INFO, logger="outbox_bridge.worker.runners")
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    short = new_jobs(engine, 40, kind="noop", payload={})
    succeeded = lambda: db.read(engine, queries.counts_by_state)["succeeded"]  # noqa: E731
    with running(engine, settings, concurrency=2):
        wait_for(lambda: succeeded() == len(short), 20, what="the short jobs succeeded")
        slow = new_jobs(engine, 8, kind="sleep", payload={"seconds": 0.5})
        wait_for(lambda: succeeded() == len(short) + len(slow), 30, what="the slow jobs succeeded")
    said = [r.getMessage() for r in caplog.records if "claiming ahead stopped" in r.getMessage()]
    given = sum(int(message.split(": ")[1].split()[0]) for message in said)
    assert given > 0, "the worker never claimed ahead of the slow jobs, so this test showed nothing"
    seen = check_invariants(settings, accepted=[*short, *slow], engine=engine)
    for job_id in slow:
        assert seen.jobs[job_id].attempts == 1, "a job given back before it ran does not count an attempt"
    engine.dispose()
