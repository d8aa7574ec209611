"""`enqueue`: a job written in the caller's own transaction, beside the caller's own rows.

This is what a transactional outbox is for: the order row and the job that sends its confirmation commit
together or not at all. `enqueue` writes the job row and its outbox row on the caller's connection and
never commits; the relay publishes the job once the caller commits. It applies the same rules as
`POST /jobs` (`api.submission`) and the same idempotency (`jobstore.intake`).

`enqueue_many` writes up to `MAX_JOBS_AT_ONCE` jobs the same way, all at once as the api's group commit
writes a batch (`intake.accept_prepared`), once every one of them passed the rules.

After the commit the relays are told at once: on PostgreSQL by the outbox table's trigger (NOTIFY is sent
at commit), on SQLite by a datagram to their notify sockets when the connection goes back to its engine's
pool after the transaction committed (as `with engine.begin()` and a `Session` do). A connection kept
open across several transactions tells them when it is returned; until then the relay finds the job by
its own poll.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session

from outbox_bridge.api.auth import NAME_RULE, is_valid_name
from outbox_bridge.api.deps import MAX_KEY_CHARACTERS
from outbox_bridge.api.problems import IDEMPOTENCY_CONFLICT, UNKNOWN_KIND, ProblemError, issues
from outbox_bridge.api.schemas import JobCreate, view_fields
from outbox_bridge.api.submission import accept_fields
from outbox_bridge.client.errors import Conflict, InvalidJob, StoreMismatch
from outbox_bridge.client.job import Job
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.registry import BUILT_IN, KINDS
from outbox_bridge.handlers.registry import load as load_kinds
from outbox_bridge.jobstore import drivers, events, intake, migrate
from outbox_bridge.jobstore.drivers import Notifier
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.telemetry.logs import emit

_PENDING = "outbox_bridge.enqueued"  # on a connection's info: what to announce once its transaction commits

MAX_JOBS_AT_ONCE = 1000  # the most `enqueue_many` takes in one call
NOT_LOADED = (
    "No kinds of your own are loaded in this process: import the module that defines them, or name it in "
    "OUTBOX_BRIDGE_KINDS as for the api, consumers and workers."
)


@dataclass(frozen=True)
class JobSpec:
    """One job of `enqueue_many`: `enqueue`'s arguments but the connection, the tenant and the owner."""

    kind: str
    payload: BaseModel | dict[str, Any]
    _: KW_ONLY
    key: str
    deadline_seconds: int | None = None
    delay_seconds: float | None = None
    run_at: datetime | str | None = None
    priority: str | None = None
    concurrency_key: str | None = None


def enqueue(
    conn: Connection | Session,
    kind: str,
    payload: BaseModel | dict[str, Any],
    *,
    key: str,
    tenant: str,
    owner: str,
    deadline_seconds: int | None = None,
    delay_seconds: float | None = None,
    run_at: datetime | str | None = None,
    priority: str | None = None,
    concurrency_key: str | None = None,
) -> Job:
    """Write a job of `kind` in the transaction `conn` (a SQLAlchemy `Connection` or ORM `Session` on the
    store's database) is in, and return it, `queued`. Nothing is committed: a rollback leaves no trace of
    it, and once the caller commits the relay publishes it.

    `payload` is the kind's model instance or a dict; `run_at` an aware `datetime` or an RFC 3339 text
    with an offset (a naive `datetime` is refused: it names no instant). Idempotent as `POST /jobs`: `key`
    (1 to 255 characters) names the request within `tenant`; the same request again returns the job it
    made, any other request under the key raises `Conflict`. At most CONCURRENCY_KEY_MAX_RUNNING running
    jobs of `tenant` share a `concurrency_key` (1 to 128 printable characters); the others wait queued. A
    kind the deployment does not accept, a payload that does not fit it, a start that cannot be kept or a
    name out of bounds raises `InvalidJob` (a `ValueError`); a store this connection cannot write as the
    deployment does (SQLite not in WAL mode, a schema not at the code's revision) raises `StoreMismatch`.
    The deployment's settings (ALLOWED_KINDS, MAX_ATTEMPTS, ...) are read from the environment, and its
    kinds loaded as the api loads them, once."""
    spec = JobSpec(
        kind, payload, key=key, deadline_seconds=deadline_seconds, delay_seconds=delay_seconds,
        run_at=run_at, priority=priority, concurrency_key=concurrency_key,
    )  # fmt: skip
    (job,) = _enqueue_all(conn, [spec], tenant=tenant, owner=owner, indexed=False)
    return job


def enqueue_many(
    conn: Connection | Session, jobs: Iterable[JobSpec], *, tenant: str, owner: str
) -> list[Job]:
    """`enqueue` of each of `jobs` (at most `MAX_JOBS_AT_ONCE`), all under `tenant` and `owner`, in the
    transaction `conn` is in; the jobs in the order given (a request made before, under its key, is the
    job it made). All or none: one that does not pass the rules raises `InvalidJob` naming its index, and
    nothing is written; more than `MAX_JOBS_AT_ONCE` raise `InvalidJob` too. A key already used for
    another request raises `Conflict` naming its index once the others are written in the transaction,
    which the caller then rolls back (as `with engine.begin()` does when the exception leaves it)."""
    specs = list(jobs)
    if len(specs) > MAX_JOBS_AT_ONCE:
        raise InvalidJob(
            f"enqueue_many takes at most {MAX_JOBS_AT_ONCE} jobs in one call, not {len(specs)}: "
            "enqueue them in several calls (in one transaction if they must commit together)."
        )
    if not specs:
        return []
    return _enqueue_all(conn, specs, tenant=tenant, owner=owner, indexed=True)


def _enqueue_all(
    conn: Connection | Session, specs: list[JobSpec], *, tenant: str, owner: str, indexed: bool
) -> list[Job]:
    """Check the store, then every spec, then write them all with one accept. What a refusal says starts
    with the index of its spec when `indexed`."""
    connection = conn.connection() if isinstance(conn, Session) else conn
    _check_store(connection)
    _check_names(tenant, owner)
    settings = _settings()
    now = clock.now()
    prepared = []
    for index, spec in enumerate(specs):
        try:
            prepared.append(_prepared(spec, settings, now, tenant=tenant, owner=owner))
        except InvalidJob as exc:
            raise InvalidJob(f"{_at(index, indexed)}{exc}", exc.errors) from None
    outcomes = intake.accept_prepared(connection, prepared)
    _hold_announcement(connection)
    jobs = []
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, IdempotencyConflict):
            raise _conflict(outcome, _at(index, indexed))
        jobs.append(Job.from_view(view_fields(outcome.job, now)))
    return jobs


def _at(index: int, indexed: bool) -> str:
    return f"jobs[{index}]: " if indexed else ""


def _prepared(spec: JobSpec, settings: Settings, now: float, *, tenant: str, owner: str) -> intake.Prepared:
    """The rows of `spec` as `intake.prepare` builds them, once it passed every rule of `POST /jobs`;
    `InvalidJob` otherwise."""
    if not isinstance(spec, JobSpec):
        raise InvalidJob(f"a job to enqueue is an outbox_bridge.JobSpec, not a {type(spec).__name__}.")
    request = _request(spec)
    if not (isinstance(spec.key, str) and 0 < len(spec.key) <= MAX_KEY_CHARACTERS):
        raise InvalidJob(f"key must be 1 to {MAX_KEY_CHARACTERS} characters.")
    try:
        fields = accept_fields(request, settings, now, tenant=tenant, owner=owner, key=spec.key)
    except ProblemError as exc:
        raise InvalidJob(_refusal(exc, spec.kind), exc.extensions.get("errors")) from None
    return intake.prepare(**fields)


def _refusal(exc: ProblemError, kind: str) -> str:
    """What `InvalidJob` says for the api's refusal `exc`: for a kind this process does not know while it
    knows none but the built-in ones, that the team's kinds are to be loaded."""
    if exc.problem is UNKNOWN_KIND and kind not in KINDS and set(KINDS) <= set(BUILT_IN):
        return f"{exc.detail} {NOT_LOADED}"
    return exc.detail


def _conflict(exc: IdempotencyConflict, said: str) -> Conflict:
    conflict = IDEMPOTENCY_CONFLICT
    problem = {"type": conflict.uri, "title": conflict.title, "status": conflict.status}
    return Conflict(problem | {"detail": f"{said}{exc}"}, job_id=exc.job_id)


def _request(spec: JobSpec) -> JobCreate:
    fields = {
        "kind": spec.kind, "payload": _plain_payload(spec.kind, spec.payload),
        "deadline_seconds": spec.deadline_seconds, "delay_seconds": spec.delay_seconds,
        "run_at": _run_at_text(spec.run_at), "priority": spec.priority,
        "concurrency_key": spec.concurrency_key,
    }  # fmt: skip
    try:
        return JobCreate.model_validate(fields)
    except ValidationError as exc:
        raise InvalidJob("The job does not match the request's schema.", issues(exc)) from None


def _plain_payload(kind: str, payload: Any) -> Any:
    """The payload as `POST /jobs` would receive it: a model instance as its JSON form (what the store
    keeps and the worker reads back), refused when the kind takes another model."""
    if not isinstance(payload, BaseModel):
        return payload
    known = KINDS.get(kind)
    if known is not None and not isinstance(payload, known.schema):
        raise InvalidJob(
            f"The payload is a {type(payload).__name__}; the kind {kind} takes a {known.schema.__name__} "
            "or a dict.",
            [{"loc": ["payload"], "msg": f"not a {known.schema.__name__}", "type": "model_type"}],
        )
    return payload.model_dump(mode="json", by_alias=True)


def _run_at_text(run_at: Any) -> Any:
    """An aware `datetime` as RFC 3339 text (in UTC: an offset of whole minutes); `InvalidJob` for a naive
    one. Any other value is the schema's to accept or refuse."""
    if not isinstance(run_at, datetime):
        return run_at
    if run_at.utcoffset() is None:
        raise InvalidJob(
            "run_at is a naive datetime, which names no instant: give it a time zone, such as "
            "datetime(2026, 12, 1, 7, 0, tzinfo=timezone.utc).",
            [{"loc": ["run_at"], "msg": "a datetime without a time zone", "type": "timezone_aware"}],
        )
    return run_at.astimezone(UTC).isoformat()


def _check_names(tenant: str, owner: str) -> None:
    for name, value in (("tenant", tenant), ("owner", owner)):
        if not is_valid_name(value):
            raise InvalidJob(f"{name} must be {NAME_RULE}.")


@cache
def _settings() -> Settings:
    """The deployment's settings, and its kinds loaded as its api loads them (OUTBOX_BRIDGE_KINDS, the
    entry points); once per process."""
    settings = Settings()
    load_kinds(settings.outbox_bridge_kinds)
    return settings


# --- the store behind the caller's connection ---------------------------------------------------------------

_checked: weakref.WeakSet[Engine] = weakref.WeakSet()
_checking = threading.Lock()


def _check_store(connection: Connection) -> None:
    """`StoreMismatch` unless the connection's database is one the deployment writes to: at the code's
    schema revision, and on SQLite in WAL mode. Checked once per engine, on a connection of its own: the
    caller's transaction must not read before it writes, since on SQLite a deferred transaction that read
    first fails its write at once ("database is locked") when another process committed in between."""
    engine = connection.engine
    if engine in _checked:
        return
    driver = drivers.of(engine)
    with engine.connect().execution_options(**driver.read_options) as own:  # a read: no write lock
        unfit = driver.check(own)
        current = migrate.revision_of(own)
    if unfit is not None:
        raise StoreMismatch(unfit)
    head = migrate.head_revision()
    if current != head:
        raise StoreMismatch(
            f"the store's schema is at {current or 'nothing (not initialised)'}, the code needs {head}: "
            "run `outbox-bridge db upgrade`"
        )
    with _checking:
        if engine not in _checked:
            _listen(engine)
            _checked.add(engine)


# --- telling the relays once the caller commits -------------------------------------------------------------


def _hold_announcement(connection: Connection) -> None:
    """Move what `intake.accept` noted for the store's own transactions (the outbox row's due time, the
    `accepted` event) aside, to be announced after the caller's commit (`_listen`)."""
    pending = connection.info.setdefault(_PENDING, {"due": math.inf, "events": [], "committed": False})
    due = events.outbox_due(connection)
    if due is not None:
        pending["due"] = min(pending["due"], due)
    pending["events"].extend(events.committed(connection))


def _listen(engine: Engine) -> None:
    notifier = _notifier(engine)

    def committing(conn: Connection) -> None:
        if _PENDING in conn.info:
            conn.info[_PENDING]["committed"] = True

    def rolling_back(conn: Connection) -> None:
        conn.info.pop(_PENDING, None)

    def returned(_dbapi: Any, record: Any) -> None:
        pending = record.info.pop(_PENDING, None)
        if not pending or not pending["committed"]:
            return
        if notifier is not None and pending["due"] < math.inf:
            notifier.notify(pending["due"])
        emit(pending["events"])

    event.listen(engine, "commit", committing)
    event.listen(engine, "rollback", rolling_back)
    event.listen(engine.pool, "checkin", returned)


def _notifier(engine: Engine) -> Notifier | None:
    """What tells the relays after the caller's commit: a SQLite file store's notify sockets; None where
    the database announces new rows itself (PostgreSQL's trigger)."""
    return drivers.of(engine).notifier(engine)
