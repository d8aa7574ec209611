"""Schedules declared in code, brought into the store by the leader (`relay.schedules.sync_declared`): a
missing one is added and marked declared, one that differs is updated (its next slot kept while its slots
stay the same, else the first after now), one as declared is left alone, and none of this fires a slot
twice. A paused one stays paused; an operator's schedule of the name is taken over, keeping its catch-up
and concurrency key; one no module declares any more is unmarked once and runs on; a declaration the
deployment cannot take is refused without holding back the others. Time is the movable clock's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select

import outbox_bridge
from outbox_bridge import views
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.recurrence import CatchUp, Recurrence
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.schedules import DECLARED
from outbox_bridge.jobstore import db, schedules
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schema import jobs, schedule_actions
from outbox_bridge.relay.schedules import Synced, fire_due, sync_declared
from tests.integration.test_schedules import at, run_at_once
from tests.support.cli import rows

EXPORT = {"rows": 10, "chunk": 5}


@pytest.fixture(autouse=True)
def registry() -> Iterator[None]:
    """The process-wide declarations, empty for the test and as they were after it."""
    before = dict(DECLARED)
    DECLARED.clear()
    yield
    DECLARED.clear()
    DECLARED.update(before)


def declare(name: str = "nightly", **options: Any) -> None:
    """A declaration as a kinds module makes it, replacing any of the same name (a module changed between
    two deployments)."""
    values = {"kind": "export", "tenant": "acme", "payload": EXPORT, "every": "1m"} | options
    DECLARED.pop((values["tenant"], name), None)
    outbox_bridge.schedule(name, **values)


def sync(engine: Engine, settings: Settings) -> Synced:
    return sync_declared(engine, settings, list(DECLARED.values()))


def stored(engine: Engine, name: str = "nightly") -> schedules.PeriodicSchedule:
    return db.read(engine, schedules.get, "acme", name)


def actions(engine: Engine) -> list[tuple[str, str]]:
    return [(r["action"], r["actor"]) for r in rows(engine, schedule_actions)]


def made_jobs(engine: Engine) -> list[Job]:
    query = select(jobs).where(jobs.c.schedule_name.is_not(None)).order_by(jobs.c.operation_key)
    return db.read(engine, lambda conn: [Job.from_row(r) for r in conn.execute(query).mappings()])


def operators_schedule(engine: Engine, clock: FakeClock, **fields: Any) -> schedules.PeriodicSchedule:
    values: dict[str, Any] = {
        "tenant": "acme", "name": "nightly", "kind": "export", "payload": EXPORT, "priority": Priority.NORMAL,
        "recurrence": Recurrence(every_seconds=60), "catch_up": CatchUp.NONE, "concurrency_key": "exports",
        "now": clock.now(), "actor": "olga",
    }  # fmt: skip
    return db.transact(engine, schedules.add, **(values | fields))


def test_a_missing_declared_schedule_is_added_marked_declared_and_listed_so(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-12-05T09:00:30+00:00"))
    declare(priority="high")
    synced = sync(engine, settings)

    kept = stored(engine)
    assert [done.action for _, done in synced.done] == ["add"] and synced.refused == []
    assert (kept.declared, kept.kind, kept.payload, kept.priority) == (True, "export", EXPORT, Priority.HIGH)
    assert (kept.recurrence, kept.catch_up, kept.concurrency_key) == (
        Recurrence(every_seconds=60),
        CatchUp.LATEST,
        None,
    )
    assert kept.next_slot_at == at("2026-12-05T09:01:00+00:00")
    assert actions(engine) == [("add", f"code:{__name__}")]
    assert views.schedule_document(kept, clock.now())["declared"] is True


def test_a_schedule_as_declared_is_left_as_it_is(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    declare()
    sync(engine, settings)
    before = stored(engine)
    clock.advance(5)
    synced = sync(engine, settings)

    assert [done.action for _, done in synced.done] == [None]
    assert stored(engine) == before
    assert len(actions(engine)) == 1


def test_a_changed_payload_or_priority_is_updated_and_the_next_slot_kept(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    declare()
    sync(engine, settings)
    first_slot = stored(engine).next_slot_at
    clock.advance(20)
    declare(payload={"rows": 20, "chunk": 5}, priority="low")
    synced = sync(engine, settings)

    kept = stored(engine)
    assert [(d.action, d.changed) for _, d in synced.done] == [("update", ("payload", "priority"))]
    assert (kept.payload, kept.priority, kept.next_slot_at) == (
        {"rows": 20, "chunk": 5},
        Priority.LOW,
        first_slot,
    )
    assert actions(engine)[-1] == ("update", f"code:{__name__}")


def test_changed_slots_start_from_now_and_no_slot_fired_before_is_fired_again(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-12-05T09:00:30+00:00"))
    declare(every="1m")
    sync(engine, settings)
    clock.set(at("2026-12-05T09:01:00.2+00:00"))
    fire_due(engine, settings)  # the 09:01:00 slot
    clock.set(at("2026-12-05T09:01:10+00:00"))
    declare(every="30s")
    synced = sync(engine, settings)
    kept = stored(engine)
    for moment in ("09:01:10", "09:01:30.2", "09:02:00.2"):
        clock.set(at(f"2026-12-05T{moment}+00:00"))
        fire_due(engine, settings)

    assert [d.changed for _, d in synced.done] == [("recurrence",)]
    assert kept.next_slot_at == at("2026-12-05T09:01:30+00:00"), "the first slot after now"
    assert [job.operation_key for job in made_jobs(engine)] == [
        "schedule:nightly:2026-12-05T09:01:00Z",
        "schedule:nightly:2026-12-05T09:01:30Z",
        "schedule:nightly:2026-12-05T09:02:00Z",
    ]


def test_a_slot_due_while_no_relay_ran_is_fired_once_after_a_sync_that_kept_the_slots(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-12-05T09:00:30+00:00"))
    declare()
    sync(engine, settings)
    clock.set(at("2026-12-05T09:01:02+00:00"))  # the 09:01 slot is due, not fired
    declare(payload={"rows": 1, "chunk": 1})
    run_at_once(2, lambda: sync(engine, settings))  # two relays that both believe they lead
    run_at_once(2, lambda: fire_due(engine, settings))
    run_at_once(2, lambda: sync(engine, settings))
    fire_due(engine, settings)

    (job,) = made_jobs(engine)
    assert (job.operation_key, job.payload) == (
        "schedule:nightly:2026-12-05T09:01:00Z",
        {"rows": 1, "chunk": 1},
    )


def test_a_paused_declared_schedule_stays_paused_while_its_declaration_changes(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    declare()
    sync(engine, settings)
    db.transact(engine, schedules.pause, "acme", "nightly", clock.now(), actor="olga")
    declare(every="5m", payload={"rows": 2, "chunk": 2})
    sync(engine, settings)
    clock.advance(3600)
    fire_due(engine, settings)

    kept = stored(engine)
    assert (kept.paused, kept.paused_by, kept.recurrence) == (True, "olga", Recurrence(every_seconds=300))
    assert made_jobs(engine) == []


def test_an_operators_schedule_of_the_name_is_taken_over_keeping_its_catch_up_and_key(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    operators_schedule(engine, clock)
    operators_schedule(engine, clock, name="other")
    declare()  # as the operator added it
    declare("other", every="2m")
    synced = sync(engine, settings)

    same, other = stored(engine), stored(engine, "other")
    assert [(d.action, d.changed) for _, d in synced.done] == [("declare", ()), ("update", ("recurrence",))]
    assert (same.declared, same.catch_up, same.concurrency_key) == (True, CatchUp.NONE, "exports")
    assert (other.declared, other.recurrence, other.catch_up) == (
        True,
        Recurrence(every_seconds=120),
        CatchUp.NONE,
    )
    assert actions(engine)[2:] == [("declare", f"code:{__name__}"), ("update", f"code:{__name__}")]


def test_a_schedule_no_longer_declared_is_unmarked_once_and_runs_on(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    clock.set(at("2026-12-05T09:00:30+00:00"))
    declare()
    declare("hourly", every="1h")
    sync(engine, settings)
    operators_schedule(engine, clock, name="operators")
    del DECLARED[("acme", "hourly")]
    first, second = sync(engine, settings), sync(engine, settings)
    clock.set(at("2026-12-05T10:00:01+00:00"))
    fire_due(engine, settings)

    assert (first.undeclared, second.undeclared) == ([("acme", "hourly")], [])
    kept = stored(engine, "hourly")
    assert (kept.declared, kept.paused, kept.last_slot_at) == (False, False, at("2026-12-05T10:00:00+00:00"))
    assert stored(engine, "operators").declared is False
    assert ("undeclare", "relay") in actions(engine)


def test_a_declaration_the_deployment_cannot_take_is_refused_and_the_others_are_kept(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    declare("resize", kind="resize")
    declare("big", payload={"rows": 2_000_000, "chunk": 5})
    declare()
    synced = sync(engine, settings)

    refused = {d.name: why for d, why in synced.refused}
    assert "accepts these kinds" in refused["resize"]
    assert "not a valid export payload" in refused["big"]
    assert [d.name for d, _ in synced.done] == ["nightly"]
    assert [s.name for s in db.read(engine, schedules.list_all)] == ["nightly"]
