"""Processes and the jobs they hold, read from the real store (SQLite and PostgreSQL): the running jobs
counted by lease owner, each process's condition (late, lost by time, lost at once when its pid is gone
from this host), the jobs whose worker is lost, and the alive counts that leave lost processes out."""

from __future__ import annotations

import socket
import time

from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, queries
from outbox_bridge.jobstore.conditions import Condition
from outbox_bridge.jobstore.heartbeats import FORGET_AFTER_BEATS
from outbox_bridge.jobstore.overview import Liveness, Overview, overview, store_figures
from outbox_bridge.jobstore.queries import Leases
from tests.support import procs
from tests.support.processes import a_process, beat, gone_pid
from tests.support.store import claimed, new_job, new_jobs

LIVENESS = Liveness(alive_within=15.0, queued_age_limit=0.0)  # a beat every 5 s
HERE = socket.gethostname()


def read(engine: Engine, now: float, here: str = HERE) -> Overview:
    return db.read(engine, overview, now, LIVENESS, here=here)


def test_the_running_jobs_are_counted_by_lease_owner_with_the_soonest_expiry(
    engine: Engine, clock: FakeClock
) -> None:
    first, second, done, other = new_jobs(engine, 4)
    claimed(engine, first, "w1", lease=30.0)
    claimed(engine, second, "w1", lease=10.0)
    finished = claimed(engine, done, "w1", lease=5.0)
    db.transact(engine, fenced.complete, done, finished.epoch, finished.attempt_id, {}, clock.now())
    claimed(engine, other, "w2", lease=20.0)
    new_job(engine, "still-queued")

    held = db.read(engine, queries.leases_by_owner)

    assert held == {"w1": Leases(2, clock.now() + 10.0), "w2": Leases(1, clock.now() + 20.0)}
    running = db.read(engine, queries.running_jobs_of, ["w1"], limit=10)
    assert [j.id for j in running] == [second, first], "the soonest lease expiry first"
    assert db.read(engine, queries.last_workers, [first, done, other]) == {
        first: "w1",
        done: "w1",
        other: "w2",
    }


def test_a_silent_process_is_late_then_lost_then_forgotten(engine: Engine, clock: FakeClock) -> None:
    consumer = a_process("consumer", clock.now(), worker="consumer-a")
    beat(engine, consumer, clock.now())

    def condition_at(seconds: float) -> Condition | None:
        found = read(engine, clock.now() + seconds).statuses
        return found[0].condition if found else None

    assert condition_at(7.0) is Condition.ALIVE
    assert condition_at(8.0) is Condition.LATE
    assert condition_at(15.0) is Condition.LATE
    assert condition_at(16.0) is Condition.LOST
    assert condition_at(FORGET_AFTER_BEATS * 5.0 + 1) is None, "a row that old is forgotten"
    assert read(engine, clock.now() + 8.0).alive["consumer"] == 1, "a late process is still alive"
    assert read(engine, clock.now() + 16.0).alive["consumer"] == 0


def test_a_killed_worker_on_this_host_is_lost_at_once_and_its_jobs_are_flagged(
    engine: Engine, clock: FakeClock
) -> None:
    killed = a_process("worker", clock.now(), pid=gone_pid(), worker="baseline@here:1")
    beat(engine, killed, clock.now())
    held = new_jobs(engine, 2)
    for job_id in held:
        claimed(engine, job_id, "baseline@here:1", lease=30.0)

    view = read(engine, clock.now() + 1.0)
    elsewhere = read(engine, clock.now() + 1.0, here="another-host")

    [lost] = view.lost
    assert (lost.condition, lost.pid_gone, lost.leases.jobs) == (Condition.LOST, True, 2)
    assert view.alive["worker"] == 0 and view.processes == []
    assert sorted(j.id for j in view.worker_lost) == sorted(held)
    assert "worker-lost" in [a.code for a in view.alerts]
    assert elsewhere.alive["worker"] == 1, "another host cannot see the pid: it waits for the beats"
    assert elsewhere.worker_lost == [] and elsewhere.alerts == []


def test_a_lease_held_by_no_live_process_is_flagged_and_one_held_by_a_live_process_is_not(
    engine: Engine, clock: FakeClock
) -> None:
    beat(engine, a_process("consumer", clock.now(), worker="consumer-alive"), clock.now())
    mine, orphan = new_jobs(engine, 2)
    claimed(engine, mine, "consumer-alive")
    claimed(engine, orphan, "consumer-long-gone")

    view = read(engine, clock.now())

    assert [j.id for j in view.worker_lost] == [orphan]
    assert [(s.process.role, s.condition, s.leases.jobs) for s in view.statuses] == [
        ("consumer", Condition.ALIVE, 1)
    ]


def test_metrics_do_not_count_a_process_whose_pid_is_gone(engine: Engine, clock: FakeClock) -> None:
    beat(engine, a_process("consumer", clock.now(), pid=gone_pid()), clock.now())
    beat(engine, a_process("consumer", clock.now()), clock.now())

    figures = db.read(engine, store_figures, clock.now(), LIVENESS.alive_within)

    assert figures.alive["consumer"] == 1


def test_jobs_list_says_when_a_running_job_has_lost_its_worker(engine: Engine, settings: Settings) -> None:
    beat(engine, a_process("consumer", time.time(), pid=gone_pid(), worker="consumer-gone"), time.time())
    held = new_job(engine, "held")
    claimed(engine, held, "consumer-gone", lease=600.0)

    shown = procs.run(["jobs", "list"], settings)

    assert shown.returncode == 0, shown.stderr
    [row] = [line for line in shown.stdout.splitlines() if held in line]
    assert "consumer-gone" in row and "worker lost, lease expires in 9m" in row
