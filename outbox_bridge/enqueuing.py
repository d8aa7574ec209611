"""`enqueue`: a job written in the caller's own transaction, beside the caller's own rows.

This is what a transactional outbox is for: the order row and the job that sends its confirmation commit
together or not at all. `enqueue` writes the job row and its outbox row on the caller's connection and
never commits; the relay publishes the job once the caller commits. It applies the same rules as
`POST /jobs` (`api.submission`) and the same idempotency (`jobstore.intake`).

After the commit the relays are told at once: on PostgreSQL by the outbox table's trigger (NOTIFY is sent
at commit), on SQLite by a datagram to their notify sockets when the connection goes back to its engine's
pool after the transaction committed (as `with engine.begin()` and a `Session` do). A connection kept
open across several transactions notifies them when it is returned; until then the relay finds the job by
its own poll.
"""

from __future__ import annotations

import math
import threading
import weakref
from functools import cache
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session

from outbox_bridge.api.auth import NAME_RULE, is_valid_name
from outbox_bridge.api.deps import MAX_KEY_CHARACTERS
from outbox_bridge.api.problems import IDEMPOTENCY_CONFLICT, ProblemError, issues
from outbox_bridge.api.schemas import JobCreate, view_fields
from outbox_bridge.api.submission import accept_fields
from outbox_bridge.client.errors import Conflict, InvalidJob, StoreMismatch
from outbox_bridge.client.job import Job
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.registry import load as load_kinds
from outbox_bridge.jobstore import drivers, events, host_notify, intake, migrate
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.telemetry.logs import emit

_PENDING = "outbox_bridge.enqueued"  # on a connection's info: what to announce once its transaction commits


def enqueue(
    conn: Connection | Session,
    kind: str,
    payload: dict[str, Any],
    *,
    key: str,
    tenant: str,
    owner: str,
    deadline_seconds: int | None = None,
    delay_seconds: float | None = None,
    run_at: str | None = None,
    priority: str = "normal",
    concurrency_key: str | None = None,
) -> Job:
    """Write a job of `kind` in the transaction `conn` (a SQLAlchemy `Connection` or ORM `Session` on the
    store's database) is in, and return it, `queued`. Nothing is committed: a rollback leaves no trace of
    it, and once the caller commits the relay publishes it.

    Idempotent as `POST /jobs`: `key` (1 to 255 characters) names the request within `tenant`; the same
    request again returns the job it made, any other request under the key raises `Conflict`. At most
    CONCURRENCY_KEY_MAX_RUNNING running jobs of `tenant` share a `concurrency_key` (1 to 128 printable
    characters); the others wait queued. A kind the deployment does not accept, a payload that does not
    fit it, a start that cannot be kept or a name out of bounds raises `InvalidJob` (a `ValueError`); a
    store this connection cannot write as the deployment does (SQLite not in WAL mode, a schema not at the
    code's revision) raises `StoreMismatch`. The
    deployment's settings (ALLOWED_KINDS, MAX_ATTEMPTS, ...) are read from the environment, and its kinds
    loaded as the api loads them, once."""
    connection = conn.connection() if isinstance(conn, Session) else conn
    _check_store(connection)
    settings = _settings()
    now = clock.now()
    request = _request(kind, payload, deadline_seconds, delay_seconds, run_at, priority, concurrency_key)
    _check_names(key, tenant, owner)
    try:
        fields = accept_fields(request, settings, now, tenant=tenant, owner=owner, key=key)
    except ProblemError as exc:
        raise InvalidJob(exc.detail, exc.extensions.get("errors")) from None
    try:
        accepted = intake.accept(connection, **fields)
    except IdempotencyConflict as exc:
        conflict = IDEMPOTENCY_CONFLICT
        problem = {
            "type": conflict.uri,
            "title": conflict.title,
            "status": conflict.status,
            "detail": str(exc),
        }
        raise Conflict(problem, job_id=exc.job_id) from None
    _hold_announcement(connection)
    return Job.from_view(view_fields(accepted.job, now))


def _request(
    kind: str,
    payload: dict[str, Any],
    deadline_seconds: int | None,
    delay_seconds: float | None,
    run_at: str | None,
    priority: str,
    concurrency_key: str | None,
) -> JobCreate:
    fields = {
        "kind": kind, "payload": payload, "deadline_seconds": deadline_seconds,
        "delay_seconds": delay_seconds, "run_at": run_at, "priority": priority,
        "concurrency_key": concurrency_key,
    }  # fmt: skip
    try:
        return JobCreate.model_validate(fields)
    except ValidationError as exc:
        raise InvalidJob("The job does not match the request's schema.", issues(exc)) from None


def _check_names(key: str, tenant: str, owner: str) -> None:
    if not (isinstance(key, str) and 0 < len(key) <= MAX_KEY_CHARACTERS):
        raise InvalidJob(f"key must be 1 to {MAX_KEY_CHARACTERS} characters.")
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
    due = host_notify.noted(connection)
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


def _notifier(engine: Engine) -> host_notify.Notifier | None:
    """What notifies the relays after the caller's commit: a SQLite file store's notify sockets; None where
    the database announces new rows itself (PostgreSQL's trigger notifies)."""
    return drivers.of(engine).notifier(engine)
