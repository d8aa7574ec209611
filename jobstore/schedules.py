"""Schedules: a job of one kind and payload for every slot of a cron expression or of a fixed interval
(`core.recurrence`), per tenant. (Not `jobstore.schedule`, which is when one job may start.)

A slot's job is written through the store's own accept (`intake.accept`, as `POST /jobs` and `enqueue`
write theirs) under the idempotency key `schedule:<name>:<slot, RFC 3339 UTC>` in the schedule's tenant,
and the schedule's next slot moves past it in the same transaction (`fire`). The key's uniqueness decides:
two relays firing one slot, a relay that fired and died before it heard the commit, a clock set back, all
find the key taken and make no second job. The relay that holds the relay role fires what is due
(`relay.schedules`).

A schedule is kept with its kind and payload as the kind read them when it was added, so every slot asks
for the same job. Who added, paused, resumed or removed it is recorded (`schedule_actions`).

A schedule may be declared in code (`outbox_bridge.schedule`): the leader brings it in line with its
declaration (`declare`) and marks it `declared`; its pause stays the operator's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.core.recurrence import CatchUp, Recurrence, plan, slot_key
from outbox_bridge.jobstore import db, intake
from outbox_bridge.jobstore.errors import IdempotencyConflict, StoreError
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import dumps


class ScheduleExists(StoreError):
    def __init__(self, tenant: str, name: str) -> None:
        super().__init__(f"tenant {tenant} already has a schedule named {name}")


class ScheduleNotFound(StoreError):
    def __init__(self, tenant: str, name: str) -> None:
        super().__init__(f"tenant {tenant} has no schedule named {name}")


@dataclass(frozen=True)
class PeriodicSchedule:
    """A schedule as the store keeps it. `next_slot_at` is its first slot not fired yet; `last_slot_at`
    the last one fired, with the job it made (`last_job_id`). `declared`: declared in code, and kept in line
    with the declaration by the leader."""

    tenant: str
    name: str
    kind: str
    payload: dict[str, Any]
    priority: Priority
    recurrence: Recurrence
    catch_up: CatchUp
    concurrency_key: str | None
    next_slot_at: float
    last_slot_at: float | None
    last_job_id: str | None
    paused_at: float | None
    paused_by: str | None
    created_at: float
    created_by: str
    declared: bool = False

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> PeriodicSchedule:
        """The schedule of a row read in the order the `schedule` statement reads it (its payload stored
        as JSON text)."""
        (
            tenant, name, kind, payload, priority, cron, timezone, every_seconds, catch_up, concurrency_key,
            next_slot_at, last_slot_at, last_job_id, paused_at, paused_by, created_at, created_by, declared,
        ) = row  # fmt: skip
        return cls(
            tenant=tenant,
            name=name,
            kind=kind,
            payload=json.loads(payload),
            priority=Priority(priority),
            recurrence=Recurrence(cron=cron, timezone=timezone, every_seconds=every_seconds),
            catch_up=CatchUp(catch_up),
            concurrency_key=concurrency_key,
            next_slot_at=next_slot_at,
            last_slot_at=last_slot_at,
            last_job_id=last_job_id,
            paused_at=paused_at,
            paused_by=paused_by,
            created_at=created_at,
            created_by=created_by,
            declared=bool(declared),
        )

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def differences(self, wanted: Mapping[str, Any]) -> list[str]:
        """The fields of `wanted` (named as `add` names them: `kind`, `payload`, `recurrence`, ...) the
        schedule has otherwise; a payload compared as stored."""
        stored = {field: getattr(self, field) for field in wanted}
        if "payload" in wanted:
            wanted = {**wanted, "payload": json.loads(dumps(wanted["payload"]))}
        return [field for field, value in wanted.items() if stored[field] != value]

    def due_age(self, now: float) -> float | None:
        """How long its next slot has been due without being fired, or None when it is not due (or the
        schedule is paused)."""
        if self.paused or self.next_slot_at > now:
            return None
        return now - self.next_slot_at


def add(
    conn: Connection,
    *,
    tenant: str,
    name: str,
    kind: str,
    payload: dict[str, Any],
    priority: Priority,
    recurrence: Recurrence,
    catch_up: CatchUp,
    now: float,
    actor: str,
    concurrency_key: str | None = None,
    declared: bool = False,
) -> PeriodicSchedule:
    """Add a schedule, recorded; its first slot is the first after `now`. `ScheduleExists` when the
    tenant has one of that name. The caller has checked the kind and read the payload as the kind does.
    Every job the schedule makes carries `concurrency_key` (`POST /jobs`'s): with the default
    CONCURRENCY_KEY_MAX_RUNNING of 1, a slot's job waits for the one before it to end. `declared`: added
    for a declaration in code."""
    if _row(conn, tenant, name) is not None:
        raise ScheduleExists(tenant, name)
    values = {
        "tenant": tenant,
        "name": name,
        "kind": kind,
        "payload": dumps(payload),
        "priority": int(priority),
        "cron": recurrence.cron,
        "timezone": recurrence.timezone,
        "every_seconds": recurrence.every_seconds,
        "catch_up": catch_up.value,
        "concurrency_key": concurrency_key,
        "next_slot_at": recurrence.first_after(now),
        "now": now,
        "actor": actor,
        "declared": declared,
    }
    (added,) = db.execute(conn, "schedule_add", values)
    _record(conn, tenant, name, "add", actor=actor, now=now)
    return PeriodicSchedule.from_row(added)


def get(conn: Connection, tenant: str, name: str) -> PeriodicSchedule:
    """The schedule, or `ScheduleNotFound`."""
    row = _row(conn, tenant, name)
    if row is None:
        raise ScheduleNotFound(tenant, name)
    return PeriodicSchedule.from_row(row)


def list_all(conn: Connection) -> list[PeriodicSchedule]:
    """Every schedule, by tenant and name."""
    return [PeriodicSchedule.from_row(row) for row in db.execute(conn, "schedules_all")]


def pause(conn: Connection, tenant: str, name: str, now: float, *, actor: str) -> bool:
    """Pause the schedule, recorded: it fires nothing until resumed. False (nothing recorded) when it is
    paused already; `ScheduleNotFound`."""
    paused = db.execute(conn, "schedule_pause", {"tenant": tenant, "name": name, "now": now, "actor": actor})
    return _changed(conn, bool(paused), tenant, name, "pause", actor, now)


def resume(conn: Connection, tenant: str, name: str, now: float, *, actor: str) -> bool:
    """Resume the schedule, recorded: its next slot is the first after `now` (the slots it passed while
    paused make nothing, whatever its catch-up). False when it was not paused; `ScheduleNotFound`."""
    found = get(conn, tenant, name)
    next_slot_at = found.recurrence.next_after(now)
    resumed = db.execute(
        conn, "schedule_resume", {"tenant": tenant, "name": name, "next_slot_at": next_slot_at}
    )
    return _changed(conn, bool(resumed), tenant, name, "resume", actor, now)


def remove(conn: Connection, tenant: str, name: str, now: float, *, actor: str) -> None:
    """Remove the schedule, recorded (the jobs it made stay); `ScheduleNotFound`."""
    if not db.execute(conn, "schedule_remove", {"tenant": tenant, "name": name}):
        raise ScheduleNotFound(tenant, name)
    _record(conn, tenant, name, "remove", actor=actor, now=now)


# What a declaration in code decides of a schedule; its catch-up and concurrency key stay as they are.
DECLARED_FIELDS = ("kind", "payload", "priority", "recurrence")


@dataclass(frozen=True)
class Declared:
    """What bringing a schedule in line with its declaration did: the action recorded (`add`, `update`,
    `declare` for a schedule only marked declared; None when it was as declared already) and the fields
    it changed."""

    action: str | None
    changed: tuple[str, ...] = ()


def declare(conn: Connection, *, now: float, actor: str, **fields: Any) -> Declared:
    """Bring the schedule `fields` name (the keyword arguments of `add`) in line with them and mark it
    declared, recorded, in the caller's transaction: added when missing; else its `DECLARED_FIELDS`
    updated where they differ, its next slot kept when its slots did not change and else the first after
    `now` (so no slot fired already comes again). A paused schedule stays paused. On PostgreSQL the row is
    locked first (`schedule_to_fire`), so a firing of it waits and then finds it as declared."""
    tenant, name = fields["tenant"], fields["name"]
    rows = db.execute(conn, "schedule_to_fire", {"tenant": tenant, "name": name})
    if not rows:
        add(conn, **fields, now=now, actor=actor, declared=True)
        return Declared("add", DECLARED_FIELDS)
    stored = PeriodicSchedule.from_row(rows[0])
    changed = tuple(stored.differences({field: fields[field] for field in DECLARED_FIELDS}))
    if not changed and stored.declared:
        return Declared(None)
    recurrence: Recurrence = fields["recurrence"]
    kept = "recurrence" not in changed
    values = {
        "tenant": tenant, "name": name, "kind": fields["kind"], "payload": dumps(fields["payload"]),
        "priority": int(fields["priority"]), "cron": recurrence.cron, "timezone": recurrence.timezone,
        "every_seconds": recurrence.every_seconds,
        "next_slot_at": stored.next_slot_at if kept else recurrence.next_after(now),
    }  # fmt: skip
    db.execute(conn, "schedule_declare", values)
    action = "update" if changed else "declare"
    _record(conn, tenant, name, action, actor=actor, now=now)
    return Declared(action, changed)


def undeclare(conn: Connection, tenant: str, name: str, now: float, *, actor: str) -> bool:
    """Unmark a schedule no longer declared in code, recorded: it runs on as an operator's schedule, for an
    operator to pause or remove. False when it was not marked."""
    if not db.execute(conn, "schedule_undeclare", {"tenant": tenant, "name": name}):
        return False
    _record(conn, tenant, name, "undeclare", actor=actor, now=now)
    return True


@dataclass(frozen=True)
class Fired:
    """What one firing of a schedule did: the jobs it made, by slot (`made`), the slots whose key was
    already taken (`taken`: fired before, by this relay or another), and the missed slots it left without
    a job under its catch-up policy (`skipped`)."""

    tenant: str
    name: str
    made: tuple[tuple[float, str], ...] = ()
    taken: tuple[float, ...] = ()
    skipped: int = 0


def due(conn: Connection, now: float) -> list[tuple[str, str]]:
    """The schedules, not paused, whose next slot has come (tenant, name), soonest first."""
    return [(str(tenant), str(name)) for tenant, name in db.execute(conn, "schedules_due", {"now": now})]


def fire(conn: Connection, tenant: str, name: str, now: float, *, max_attempts: int) -> Fired:
    """Make the jobs of the schedule's due slots (`core.recurrence.plan`) and move its next slot past
    `now`, in the caller's transaction; nothing when it is paused, gone or not due. On PostgreSQL the
    schedule's row is locked first, so a concurrent firing waits and then finds the slots fired."""
    rows = db.execute(conn, "schedule_to_fire", {"tenant": tenant, "name": name})
    schedule = PeriodicSchedule.from_row(rows[0]) if rows else None
    if schedule is None or schedule.paused or schedule.next_slot_at > now:
        return Fired(tenant, name)
    firing = plan(schedule.recurrence, schedule.next_slot_at, now, schedule.catch_up)
    made: list[tuple[float, str]] = []
    taken: list[float] = []
    for slot in firing.slots:
        job_id = _make(conn, schedule, slot, now, max_attempts)
        if job_id is None:
            taken.append(slot)
        else:
            made.append((slot, job_id))
    last_slot_at, last_job_id = made[-1] if made else (None, None)
    moved = {"next_slot_at": firing.next_slot, "last_slot_at": last_slot_at, "last_job_id": last_job_id}
    db.execute(conn, "schedule_fired", {"tenant": tenant, "name": name} | moved)
    return Fired(tenant, name, tuple(made), tuple(taken), firing.skipped)


def _make(
    conn: Connection, schedule: PeriodicSchedule, slot: float, now: float, max_attempts: int
) -> str | None:
    """The id of the job made for `slot`, or None when its key was taken already (by the slot's job, or by
    a request under the same key: either way the slot has its job, or never will)."""
    try:
        accepted = intake.accept(
            conn, tenant=schedule.tenant, owner=f"schedule:{schedule.name}", kind=schedule.kind,
            payload=schedule.payload, operation_key=slot_key(schedule.name, slot), now=now,
            max_attempts=max_attempts, priority=schedule.priority, schedule_name=schedule.name,
            concurrency_key=schedule.concurrency_key,
        )  # fmt: skip
    except IdempotencyConflict:
        return None
    return accepted.job.id if accepted.created else None


def _row(conn: Connection, tenant: str, name: str) -> tuple[Any, ...] | None:
    rows = db.execute(conn, "schedule", {"tenant": tenant, "name": name})
    return rows[0] if rows else None


def _changed(
    conn: Connection, changed: bool, tenant: str, name: str, action: str, actor: str, now: float
) -> bool:
    if changed:
        _record(conn, tenant, name, action, actor=actor, now=now)
        return True
    get(conn, tenant, name)  # `ScheduleNotFound` when it is not there at all
    return False


def _record(conn: Connection, tenant: str, name: str, action: str, *, actor: str, now: float) -> None:
    values = {"tenant": tenant, "name": name, "action": action, "actor": actor, "now": now}
    db.execute(conn, "schedule_action_record", values)
