"""Schedules in the store: each due slot makes one job through the store's accept, under the slot's key in the
schedule's tenant, whoever fires it and however often (two relays at once, a relay restarted, a clock set
back), with the catch-up policies after downtime and a cron expression's slots across a change of daylight
saving time. Time is the movable clock's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select, update

from outbox_bridge.api.schemas import JobView
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.recurrence import CatchUp, Recurrence, slot_key
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, schedules
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schema import jobs, schedule_actions
from outbox_bridge.jobstore.schema import schedules as schedules_table
from outbox_bridge.relay.schedules import fire_due
from tests.support.store import job_row, new_job

MINUTE = Recurrence.of(cron=None, timezone=None, every_seconds=60)


def add(
    engine: Engine, clock: FakeClock, name: str = "tick", recurrence: Recurrence = MINUTE, **fields: Any
) -> schedules.PeriodicSchedule:
    values: dict[str, Any] = {
        "tenant": "acme", "name": name, "kind": "export", "payload": {"rows": 3, "chunk": 3},
        "priority": Priority.HIGH, "recurrence": recurrence, "catch_up": CatchUp.LATEST, "now": clock.now(),
        "actor": "olga",
    }  # fmt: skip
    return db.transact(engine, schedules.add, **(values | fields))


def scheduled_jobs(engine: Engine) -> list[Job]:
    """Every job a schedule made, oldest slot first."""
    query = select(jobs).where(jobs.c.schedule_name.is_not(None)).order_by(jobs.c.operation_key)
    return db.read(engine, lambda conn: [Job.from_row(r) for r in conn.execute(query).mappings()])


def keys(engine: Engine) -> list[str]:
    return [job.operation_key for job in scheduled_jobs(engine)]


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_an_interval_schedule_makes_one_job_per_slot_under_the_slots_key(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-12-05T09:00:30+00:00"))
    first = add(engine, clock).next_slot_at
    assert first == at("2026-12-05T09:01:00+00:00")

    assert fire_due(engine, settings) == [], "nothing is due before the first slot"
    clock.set(first + 0.4)
    fired = fire_due(engine, settings)
    fire_due(engine, settings)  # the same moment again: the slot is fired already
    clock.advance(60)
    fire_due(engine, settings)

    assert [done.made[0][0] for done in fired] == [first]
    assert keys(engine) == ["schedule:tick:2026-12-05T09:01:00Z", "schedule:tick:2026-12-05T09:02:00Z"]
    job = scheduled_jobs(engine)[0]
    assert (job.tenant, job.kind, job.payload, job.priority) == (
        "acme",
        "export",
        {"rows": 3, "chunk": 3},
        Priority.HIGH,
    )
    assert (job.schedule_name, job.owner, job.max_attempts) == (
        "tick",
        "schedule:tick",
        settings.max_attempts,
    )
    assert JobView.of(job).schedule == "tick"
    kept = db.read(engine, schedules.get, "acme", "tick")
    assert (kept.last_slot_at, kept.last_job_id) == (first + 60, scheduled_jobs(engine)[1].id)
    assert kept.next_slot_at == first + 120


def test_a_job_submitted_otherwise_names_no_schedule(engine: Engine, clock: FakeClock) -> None:
    assert JobView.of(job_row(engine, new_job(engine, "schedule:tick:2026-12-05T09:01:00Z"))).schedule is None


def run_at_once(count: int, work: Callable[[], object]) -> list[object]:
    """`work` on `count` threads released together; what each returned."""
    start = threading.Barrier(count)
    results: list[object] = [None] * count

    def one(index: int) -> None:
        start.wait()
        results[index] = work()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_two_relays_firing_the_same_slots_at_once_make_one_job_per_slot(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    second = Recurrence.of(cron=None, timezone=None, every_seconds=1)
    add(engine, clock, "often", second, kind="noop", payload={})
    for _ in range(8):
        clock.advance(1)
        run_at_once(2, lambda: fire_due(engine, settings))

    made = keys(engine)
    assert len(made) == 8 and len(set(made)) == 8, made


def test_a_firing_that_read_the_schedule_before_another_committed_makes_no_second_job(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    """A relay killed after its commit and restarted, or a second relay that read the schedule's next slot
    before the first moved it: the slot's key is taken, so firing it again makes nothing."""
    slot = add(engine, clock).next_slot_at
    clock.set(slot + 1)
    fire_due(engine, settings)
    assert fire_due(engine, settings) == [], "restarted: the schedule's next slot is past the one fired"

    def stale(conn: Any) -> None:  # the next slot as the other relay read it
        conn.execute(update(schedules_table).values(next_slot_at=slot))

    db.transact(engine, stale)
    (again,) = fire_due(engine, settings)

    assert (again.made, again.taken) == ((), (slot,))
    assert keys(engine) == [slot_key("tick", slot)]
    assert db.read(engine, schedules.get, "acme", "tick").next_slot_at == slot + 60


def test_a_clock_set_back_fires_no_slot_twice(engine: Engine, settings: Settings, clock: FakeClock) -> None:
    slot = add(engine, clock).next_slot_at
    for moment in (slot + 1, slot + 61, slot - 30, slot + 1, slot + 61):
        clock.set(moment)
        fire_due(engine, settings)

    assert keys(engine) == [slot_key("tick", slot), slot_key("tick", slot + 60)]


def test_after_downtime_latest_makes_the_latest_missed_slot_and_none_makes_none(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-12-05T09:00:30+00:00"))
    add(engine, clock, "latest", catch_up=CatchUp.LATEST)
    add(engine, clock, "none", catch_up=CatchUp.NONE)
    clock.set(at("2026-12-05T12:00:40+00:00"))  # down for three hours; 12:00 is 40 s old: missed

    fired = {done.name: done for done in fire_due(engine, settings)}
    clock.set(at("2026-12-05T12:01:00.5+00:00"))
    fire_due(engine, settings)

    assert keys(engine) == [
        "schedule:latest:2026-12-05T12:00:00Z",
        "schedule:latest:2026-12-05T12:01:00Z",
        "schedule:none:2026-12-05T12:01:00Z",
    ]
    assert (fired["latest"].skipped, fired["none"].skipped) == (179, 180)


def test_a_cron_schedule_in_berlin_fires_at_the_utc_slots_of_nine_oclock_across_the_change_to_summer_time(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-03-27T12:00:00+00:00"))
    nine = Recurrence.of(cron="0 9 * * *", timezone="Europe/Berlin", every_seconds=None)
    add(engine, clock, "morning", nine)
    for _ in range(3):
        clock.set(db.read(engine, schedules.get, "acme", "morning").next_slot_at + 2)
        fire_due(engine, settings)

    assert keys(engine) == [
        "schedule:morning:2026-03-28T08:00:00Z",
        "schedule:morning:2026-03-29T07:00:00Z",
        "schedule:morning:2026-03-30T07:00:00Z",
    ]


def test_a_paused_schedule_makes_nothing_and_resumes_from_its_next_slot_after_now(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    slot = add(engine, clock).next_slot_at
    assert db.transact(engine, schedules.pause, "acme", "tick", clock.now(), actor="olga")
    assert not db.transact(engine, schedules.pause, "acme", "tick", clock.now(), actor="olga")
    clock.set(slot + 125)
    assert fire_due(engine, settings) == []
    assert db.transact(engine, schedules.resume, "acme", "tick", clock.now(), actor="pat")
    clock.set(slot + 181)
    fire_due(engine, settings)

    assert keys(engine) == [slot_key("tick", slot + 180)], "the slots passed while paused make nothing"
    db.transact(engine, schedules.remove, "acme", "tick", clock.now(), actor="olga")
    actions = db.read(
        engine,
        lambda conn: [
            (r.action, r.actor)
            for r in conn.execute(select(schedule_actions).order_by(schedule_actions.c.id))
        ],
    )
    assert actions == [("add", "olga"), ("pause", "olga"), ("resume", "pat"), ("remove", "olga")]
    assert db.read(engine, schedules.list_all) == []
    assert len(scheduled_jobs(engine)) == 1, "the jobs it made stay"


def test_a_schedules_concurrency_key_is_on_every_job_it_makes_so_a_slots_job_waits_for_the_last_ones(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-12-05T09:00:30+00:00"))
    added = add(engine, clock, concurrency_key="nightly-sync")
    assert added.concurrency_key == "nightly-sync"
    clock.set(added.next_slot_at + 0.1)
    fire_due(engine, settings)
    clock.advance(60)
    fire_due(engine, settings)

    first, second = scheduled_jobs(engine)
    assert (first.concurrency_key, second.concurrency_key) == ("nightly-sync", "nightly-sync")
    limits = Limits.of(settings)  # CONCURRENCY_KEY_MAX_RUNNING: 1
    claimed = db.transact(engine, claiming.claim_due, "w1", clock.now(), 30.0, 10, limits=limits)
    assert [c.job_id for c in claimed] == [first.id], "the second slot's job waits for the first's"
    assert db.transact(engine, claiming.claim_due, "w2", clock.now(), 30.0, 10, limits=limits) == []


def test_a_schedule_without_a_concurrency_key_makes_jobs_without_one(
    engine: Engine, clock: FakeClock
) -> None:
    assert add(engine, clock).concurrency_key is None
