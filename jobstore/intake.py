"""Taking jobs in: a job row and its outbox row written together, once per tenant + idempotency key."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring  # how `dumps` encodes a string
from typing import Any

from sqlalchemy import Connection, Engine

from outbox_bridge.core.entropy import random_bytes
from outbox_bridge.core.queue_names import DEFAULT_QUEUE
from outbox_bridge.jobstore import db, drivers, events
from outbox_bridge.jobstore.drivers import Window
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Job, dumps
from outbox_bridge.jobstore.schedule import Schedule, available_from
from outbox_bridge.jobstore.schema import JOB_COLUMNS
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry.logs import JobEvent, job_event
from outbox_bridge.telemetry.tracing import trace_id_of


def fingerprint(
    kind: str,
    payload: Any,
    deadline_seconds: float | None = None,
    schedule: Schedule | None = None,
    priority: Priority = Priority.NORMAL,
    concurrency_key: str | None = None,
) -> str:
    """The identity of a request under an idempotency key: its kind, its payload (the caller passes it
    validated and normalised), its deadline, its start as named (`Schedule.identity`), its priority and its
    concurrency key, canonically encoded. An unset field (`normal` priority, named or not) is left out, so a
    request that does not use a field keeps the fingerprint it had before the field existed."""
    return _fingerprint(kind, dumps(payload), deadline_seconds, schedule, priority, concurrency_key)


def _fingerprint(
    kind: str,
    payload_text: str,
    deadline_seconds: float | None,
    schedule: Schedule | None,
    priority: Priority,
    concurrency_key: str | None = None,
) -> str:
    """`fingerprint` of a payload already encoded (`dumps`): the text `dumps` gives for the whole request,
    built from the encoded fields in the order of their names, so the payload is encoded once per accept."""
    fields = [("kind", encode_basestring(kind)), ("payload", payload_text)]
    if deadline_seconds is not None:
        fields.append(("deadline_seconds", dumps(float(deadline_seconds))))
    if schedule is not None:
        fields.extend((name, dumps(value)) for name, value in schedule.identity().items())
    if priority is not Priority.NORMAL:
        fields.append(("priority", encode_basestring(priority.label)))
    if concurrency_key is not None:
        fields.append(("concurrency_key", encode_basestring(concurrency_key)))
    fields.sort()
    text = ",".join(f'"{name}":{value}' for name, value in fields)  # the names need no escaping
    return hashlib.sha256(f"{{{text}}}".encode()).hexdigest()


def unique_key(kind: str, payload_text: str) -> str:
    """The key of a kind's uniqueness window for a payload already encoded (`dumps`): the fingerprint of
    the kind and the payload alone, so requests that differ in anything else (key, start, deadline,
    priority) share the window."""
    return _fingerprint(kind, payload_text, None, None, Priority.NORMAL)


def new_id() -> str:
    """A new job id: a random UUID (version 4). Operators name a job by the first few characters of its id
    (`outbox-bridge jobs show 8a26491b`, the dashboard's short ids), so those must differ from job to job."""
    raw = bytearray(random_bytes(16))
    raw[6] = raw[6] & 0x0F | 0x40  # the version, 4
    raw[8] = raw[8] & 0x3F | 0x80  # the variant, RFC 9562's
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


_LOW_62 = (1 << 62) - 1


def new_attempt_id() -> str:
    """A new attempt id: a UUID of version 7 (RFC 9562), 48 bits of Unix milliseconds then 74 random bits.
    Ids made later sort later, so a new attempt's entry goes at the end of the attempts' primary key instead
    of on a random page of it: on SQLite a claim of 16 jobs writes about a third less to the WAL (each page
    it changes is written whole and fsynced at the commit). Nobody types an attempt id, so its first
    characters need not tell attempts apart; the random bits keep it unguessable and unique."""
    millis = time.time_ns() // 1_000_000
    bits = int.from_bytes(random_bytes(10), "big")
    return str(
        uuid.UUID(int=millis << 80 | 7 << 76 | (bits >> 62 & 0xFFF) << 64 | 0b10 << 62 | bits & _LOW_62)
    )


@dataclass(frozen=True)
class Accepted:
    job: Job
    created: bool


def accept(
    conn: Connection,
    *,
    tenant: str,
    owner: str,
    kind: str,
    payload: dict[str, Any],
    operation_key: str,
    now: float,
    max_attempts: int,
    deadline_seconds: float | None = None,
    schedule: Schedule | None = None,
    traceparent: str | None = None,
    priority: Priority = Priority.NORMAL,
    schedule_name: str | None = None,
    concurrency_key: str | None = None,
    queue: str = DEFAULT_QUEUE,
    unique_for_seconds: float | None = None,
) -> Accepted:
    """Write the job row and its outbox row together, both due at the `schedule`'s start (at once without
    one). The same tenant + key with the same request (kind, payload, deadline, start as named, priority:
    `fingerprint`) returns the existing job (`created=False`); with a different one, `IdempotencyConflict`.
    The `traceparent` is stored with a new job and is no part of the request's identity: a retry under
    another trace is the same request, and the job keeps its first trace. `schedule_name` names the
    schedule that makes the job for one of its slots (`jobstore.schedules`), under the slot's own key.
    With `unique_for_seconds`, a request under a new key returns (`created=False`) the tenant's job of the
    same kind and payload accepted less than that long before, whatever became of it since; a new job
    takes that window (`job_uniques`)."""
    request = prepare(
        tenant=tenant, owner=owner, kind=kind, payload=payload, operation_key=operation_key, now=now,
        max_attempts=max_attempts, deadline_seconds=deadline_seconds, schedule=schedule,
        traceparent=traceparent, priority=priority, schedule_name=schedule_name,
        concurrency_key=concurrency_key, queue=queue, unique_for_seconds=unique_for_seconds,
    )  # fmt: skip
    (outcome,) = accept_prepared(conn, [request])
    if isinstance(outcome, IdempotencyConflict):
        raise outcome
    return outcome


@dataclass(frozen=True)
class Prepared:
    """An accept's rows and outcomes, built before its transaction (`prepare`), so the head of the writer
    queue holds only the statements: the job row, its new job as accepted, its `accepted` event, and the
    uniqueness window it takes (None for a kind without one)."""

    row: dict[str, Any]
    accepted: Accepted
    event: JobEvent
    window: Window | None


def prepare(*, payload: dict[str, Any], unique_for_seconds: float | None = None, **fields: Any) -> Prepared:
    """What `accept` of these keyword arguments writes and answers when the key is new."""
    row = _job_row(payload=payload, **fields)
    job = Job.made(row | {"payload": payload, "priority": Priority(row["priority"]), "state": State.QUEUED})
    window = None
    if unique_for_seconds is not None:
        window = Window(unique_key(row["kind"], row["payload"]), row["created_at"] + unique_for_seconds)
    return Prepared(row, Accepted(job, created=True), _accepted(row), window)


def accept_prepared(conn: Connection, prepared: Sequence[Prepared]) -> list[Accepted | IdempotencyConflict]:
    """`accept` of each `prepare`d request, in order, in the caller's transaction. A conflicting key is that
    request's outcome alone (nothing is written for it); a key twice in one batch is accepted once, and a
    window twice is taken once, as accepts one after the other would be. The new jobs and their outbox rows
    are written with one multi-row insert each, or one statement for both (`Driver.insert_jobs`)."""
    outcomes = _outcomes(conn, prepared, take_keys(conn, prepared))
    return _answered(outcomes, prepared, lambda again: accept_prepared(conn, again))


def accept_committed(
    engine: Engine, requests: Callable[[], Sequence[Prepared]]
) -> list[Accepted | IdempotencyConflict]:
    """`accept_prepared` of what `requests()` returns, committed; `requests` is called once the transaction
    heads the writer queue (a caller may top up its batch there), and again if the transaction runs again.
    Where the driver writes the jobs and their outbox rows in one statement, it commits by itself
    (`db.transact_one`: one round trip where BEGIN, the statement and COMMIT take three). A key that was
    already taken (the request again, or a conflict) is then read in a transaction of its own: the job that
    holds it had committed before the write skipped it, so the read finds it as the same transaction's next
    statement would have."""
    taken: list[Prepared] = []

    def take(conn: Connection) -> set[str]:
        taken[:] = requests()
        return take_keys(conn, taken)

    created = db.transact_one(engine, take)
    if len(created) == len(taken):
        return [p.accepted for p in taken]
    outcomes = db.read(engine, _outcomes, taken, created)
    return _answered(outcomes, taken, lambda again: accept_committed(engine, lambda: again))


def take_keys(conn: Connection, prepared: Sequence[Prepared]) -> set[str]:
    """Write the job and outbox rows of each request whose key is new and whose window, if it has one, is
    free (`Driver.insert_jobs`), and note their `accepted` events, in the caller's transaction; the ids of
    the jobs written."""
    windows = {p.row["id"]: p.window for p in prepared if p.window is not None}
    created = drivers.of(conn).insert_jobs(conn, [p.row for p in prepared], windows)
    events.note(conn, (p.event for p in prepared if p.row["id"] in created))
    return created


def _outcomes(
    conn: Connection, prepared: Sequence[Prepared], created: set[str]
) -> list[Accepted | IdempotencyConflict | None]:
    """Each request's outcome once `take_keys` wrote `created`: a new job as accepted, else the job that
    holds its key (the original, for the same request) or the conflict, else the job that holds its window.
    None for a request that nothing answers (`_answered`)."""
    outcomes: list[Accepted | IdempotencyConflict | None] = []
    for p in prepared:
        if p.row["id"] in created:
            outcomes.append(p.accepted)
            continue
        try:
            outcomes.append(_existing(conn, p))
        except IdempotencyConflict as conflict:
            outcomes.append(conflict)
    return outcomes


def _answered(
    outcomes: list[Accepted | IdempotencyConflict | None],
    prepared: Sequence[Prepared],
    accept_again: Callable[[list[Prepared]], list[Accepted | IdempotencyConflict]],
) -> list[Accepted | IdempotencyConflict]:
    """`outcomes`, with those of the requests nothing answered accepted again, in order. A request is left
    unanswered when an earlier one of its batch had its key but took no job (that one's window was held),
    or when the job that held its key or window was deleted before it was read. The first request of a
    batch is answered unless such a job was deleted, which frees its key or window for the next round."""
    unanswered = [p for p, outcome in zip(prepared, outcomes, strict=True) if outcome is None]
    if not unanswered:
        return [outcome for outcome in outcomes if outcome is not None]
    again = iter(accept_again(unanswered))
    return [next(again) if outcome is None else outcome for outcome in outcomes]


def _accepted(row: dict[str, Any]) -> JobEvent:
    return job_event(
        "accepted", row["id"], tenant=row["tenant"], kind=row["kind"], epoch=0, attempt=0,
        trace_id=trace_id_of(row["traceparent"]),
    )  # fmt: skip


def _job_row(
    tenant: str,
    owner: str,
    kind: str,
    payload: dict[str, Any],
    operation_key: str,
    now: float,
    max_attempts: int,
    deadline_seconds: float | None = None,
    schedule: Schedule | None = None,
    traceparent: str | None = None,
    priority: Priority = Priority.NORMAL,
    schedule_name: str | None = None,
    concurrency_key: str | None = None,
    queue: str = DEFAULT_QUEUE,
) -> dict[str, Any]:
    """The row of a newly accepted job."""
    start = schedule.start(now) if schedule is not None else None
    payload_text = dumps(payload)
    return {
        "id": new_id(), "tenant": tenant, "owner": owner, "operation_key": operation_key,
        "fingerprint": _fingerprint(kind, payload_text, deadline_seconds, schedule, priority,
                                    concurrency_key),
        "kind": kind, "payload": payload_text, "state": State.QUEUED.value, "epoch": 0, "attempts": 0,
        "max_attempts": max_attempts, "lease_owner": None, "lease_expires_at": None,
        "available_at": available_from(start, now), "run_at": start,
        "deadline_at": None if deadline_seconds is None else now + deadline_seconds,
        "cancel_requested": False, "external_epoch": None, "checkpoint": None, "checkpoint_epoch": None,
        "result_attempt_id": None, "error_code": None, "error_message": None, "created_at": now,
        "updated_at": now, "started_at": None, "finished_at": None, "traceparent": traceparent,
        "priority": int(priority), "schedule_name": schedule_name, "concurrency_key": concurrency_key,
        "held_by": None, "running_since": None, "queue": queue, "snoozes": 0,
    }  # fmt: skip


def _existing(conn: Connection, p: Prepared) -> Accepted | None:
    """The job that holds the request's key (`IdempotencyConflict` for another request), else the job that
    holds its window at its accept; None when neither is held."""
    tenant = p.row["tenant"]
    existing = _find_by_key(conn, tenant, p.row["operation_key"])
    if existing is None and p.window is not None:
        params = {"tenant": tenant, "unique_key": p.window.key, "now": p.row["created_at"]}
        existing = _job(db.execute(conn, "jobs_by_window", params))
    elif existing is not None and existing.fingerprint != p.row["fingerprint"]:
        raise IdempotencyConflict(existing.id)
    return None if existing is None else Accepted(existing, created=False)


def _find_by_key(conn: Connection, tenant: str, operation_key: str) -> Job | None:
    return _job(db.execute(conn, "jobs_by_key", {"tenant": tenant, "operation_key": operation_key}))


def _job(rows: list[tuple[Any, ...]]) -> Job | None:
    return Job.from_row(dict(zip(JOB_COLUMNS, rows[0], strict=True))) if rows else None
