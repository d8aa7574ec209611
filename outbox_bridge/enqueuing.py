"""`enqueue`: a job written in the caller's own transaction, beside the caller's own rows.

This is what a transactional outbox is for: the order row and the job that sends its confirmation commit
together or not at all. `enqueue` writes the job row and its outbox row on the caller's connection and
never commits; the relay publishes the job once the caller commits. It applies the same rules as
`POST /jobs` (`api.submission`) and the same idempotency (`jobstore.intake`).

`enqueue_many` writes up to `MAX_JOBS_AT_ONCE` jobs the same way, all at once as the api's group commit
writes a batch (`intake.accept_prepared`), once every one of them passed the rules; a job that waits for
others (`after`) is written by `workflows.accept_after`. `enqueue_batch` writes a batch of jobs and its
callback as `POST /batches` does (`workflows.accept_batch`).

The store behind the caller's connection is checked once per engine, and the relays are told once the
caller commits (`callers_transaction`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from outbox_bridge.api.auth import NAME_RULE, is_valid_name
from outbox_bridge.api.deps import MAX_KEY_CHARACTERS
from outbox_bridge.api.problems import (
    IDEMPOTENCY_CONFLICT,
    UNKNOWN_KIND,
    ProblemError,
    batch_conflict,
    issues,
)
from outbox_bridge.api.schemas import NO_WORKFLOW, BatchView, JobCreate, view_fields
from outbox_bridge.api.submission import NOT_FOR_A_CALLBACK, accept_fields
from outbox_bridge.api.workflow_fields import workflows_of
from outbox_bridge.callers_transaction import check_store, hold_announcement, hold_write_lock
from outbox_bridge.client.batch import Batch
from outbox_bridge.client.errors import Conflict, InvalidJob, UnknownDependencies
from outbox_bridge.client.job import Job
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.registry import BUILT_IN, KINDS
from outbox_bridge.handlers.registry import load as load_kinds
from outbox_bridge.jobstore import intake, queries, workflows
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.jobstore.filters import JobFilter

MAX_JOBS_AT_ONCE = 1000  # the most `enqueue_many` takes in one call
NOT_LOADED = (
    "No kinds of your own are loaded in this process: import the module that defines them, or name it in "
    "OUTBOX_BRIDGE_KINDS as for the api, consumers and workers."
)


@dataclass(frozen=True)
class JobSpec:
    """One job of `enqueue_many` or `enqueue_batch`: `enqueue`'s arguments but the connection, the tenant and
    the owner. `enqueue_many` needs each job's `key`; a batch's members and its callback take none (the
    batch's key names them all)."""

    kind: str
    payload: BaseModel | dict[str, Any]
    _: KW_ONLY
    key: str | None = None
    deadline_seconds: int | None = None
    delay_seconds: float | None = None
    run_at: datetime | str | None = None
    priority: str | None = None
    concurrency_key: str | None = None
    after: Sequence[str] | None = None
    on_dependency_failure: str = "cancel"


@dataclass(frozen=True)
class _Request:
    """A job that passed the rules: its rows as `intake.prepare` builds them, and what it waits for."""

    prepared: intake.Prepared
    after: workflows.After | None


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
    after: Sequence[str] | None = None,
    on_dependency_failure: str = "cancel",
) -> Job:
    """Write a job of `kind` in the transaction `conn` (a SQLAlchemy `Connection` or ORM `Session` on the
    store's database) is in, and return it, `queued`. Nothing is committed: a rollback leaves no trace of
    it, and once the caller commits the relay publishes it.

    `payload` is the kind's model instance or a dict; `run_at` an aware `datetime` or an RFC 3339 text
    with an offset (a naive `datetime` is refused: it names no instant). Idempotent as `POST /jobs`: `key`
    (1 to 255 characters) names the request within `tenant`; the same request again returns the job it
    made, any other request under the key raises `Conflict`. At most CONCURRENCY_KEY_MAX_RUNNING running
    jobs of `tenant` share a `concurrency_key` (1 to 128 printable characters); the others wait queued.
    With `after` (1 to 100 ids of jobs of `tenant` accepted before) the job waits queued, its `waiting_for`
    naming them, until they have all succeeded; when one of them ends otherwise it ends `cancelled`
    (`dependency_failed`), unless `on_dependency_failure` is `"run"`: then it runs once they have all
    ended. An id `tenant` has no job of raises `UnknownDependencies` (an `InvalidJob`), and nothing is
    written. A kind the deployment does not accept, a payload that does not fit it, a start that cannot be
    kept or a name out of bounds raises `InvalidJob` (a `ValueError`); a store this connection cannot write
    as the deployment does (SQLite not in WAL mode, a schema not at the code's revision) raises
    `StoreMismatch`. The deployment's settings (ALLOWED_KINDS, MAX_ATTEMPTS, ...) are read from the
    environment, and its kinds loaded as the api loads them, once."""
    spec = JobSpec(
        kind, payload, key=key, deadline_seconds=deadline_seconds, delay_seconds=delay_seconds,
        run_at=run_at, priority=priority, concurrency_key=concurrency_key, after=after,
        on_dependency_failure=on_dependency_failure,
    )  # fmt: skip
    (job,) = _enqueue_all(conn, [spec], tenant=tenant, owner=owner, indexed=False)
    return job


def enqueue_many(
    conn: Connection | Session, jobs: Iterable[JobSpec], *, tenant: str, owner: str
) -> list[Job]:
    """`enqueue` of each of `jobs` (at most `MAX_JOBS_AT_ONCE`), all under `tenant` and `owner`, in the
    transaction `conn` is in; the jobs in the order given (a request made before, under its key, is the
    job it made). All or none: one that does not pass the rules, or whose `after` names a job `tenant`
    does not have, raises `InvalidJob` naming its index, and nothing is written; more than
    `MAX_JOBS_AT_ONCE` raise `InvalidJob` too. A key already used for another request raises `Conflict`
    naming its index once the others are written in the transaction, which the caller then rolls back (as
    `with engine.begin()` does when the exception leaves it)."""
    specs = list(jobs)
    if len(specs) > MAX_JOBS_AT_ONCE:
        raise InvalidJob(
            f"enqueue_many takes at most {MAX_JOBS_AT_ONCE} jobs in one call, not {len(specs)}: "
            "enqueue them in several calls (in one transaction if they must commit together)."
        )
    if not specs:
        return []
    return _enqueue_all(conn, specs, tenant=tenant, owner=owner, indexed=True)


def enqueue_batch(
    conn: Connection | Session,
    jobs: Iterable[JobSpec],
    *,
    callback: JobSpec | None = None,
    key: str,
    tenant: str,
    owner: str,
) -> Batch:
    """Write a batch in the transaction `conn` is in: its `jobs` (1 to 1,000, each checked as `enqueue`
    checks a job, each taking no `key` of its own) and the `callback` job that is accepted, once, when the
    last of them has ended, however it ended; its kind reads how each ended in `ctx.batch`. The callback
    takes no `after`, `delay_seconds`, `run_at` or `concurrency_key` (it is due once the batch is done),
    and its `deadline_seconds` counts from then. Returns the batch, `running` (or `done` at once when every
    member ended at its accept: each waited for a job that had already failed). Idempotent as `enqueue`:
    `key` names the batch within `tenant`, and the same batch again returns the batch it made; another
    under the key raises `Conflict`. All or none: a job that does not pass the rules, or an `after` naming
    a job `tenant` does not have, raises `InvalidJob` naming it, and nothing is written."""
    specs = list(jobs)
    if not 1 <= len(specs) <= workflows.MAX_MEMBERS:
        raise InvalidJob(f"A batch has 1 to {workflows.MAX_MEMBERS} jobs, not {len(specs)}.")
    connection = _connection(conn)
    check_store(connection)
    _check_names(tenant, owner)
    try:
        _check_key(key)
    except InvalidJob as exc:
        raise InvalidJob(f"the batch's {exc}") from None
    settings, now = _settings(), clock.now()
    members = [
        _checked(spec, settings, now, tenant=tenant, owner=owner, at=f"jobs[{index}]: ", batch_key=key)
        for index, spec in enumerate(specs)
    ]
    last = (
        None if callback is None else _callback(callback, settings, now, tenant=tenant, owner=owner, key=key)
    )
    if any(m.after is not None for m in members):
        hold_write_lock(connection)
        _check_after(connection, tenant, [(f"jobs[{i}]: ", m.after) for i, m in enumerate(members)])
    try:
        accepted = workflows.accept_batch(
            connection, tenant=tenant, owner=owner, operation_key=key, now=now, callback=last,
            members=[workflows.Member(m.prepared, m.after) for m in members],
        )  # fmt: skip
    except IdempotencyConflict as exc:
        raise _batch_conflict(exc) from None
    except workflows.UnknownDependencies as exc:  # one went away since `_check_after`
        raise _unknown(exc.ids, "") from None
    hold_announcement(connection)
    return Batch.from_view(BatchView.of(accepted.batch).model_dump())


def _enqueue_all(
    conn: Connection | Session, specs: list[JobSpec], *, tenant: str, owner: str, indexed: bool
) -> list[Job]:
    """Check the store, then every spec, then write them all: those that wait for none with one accept,
    then the others one by one. What a refusal says starts with the index of its spec when `indexed`."""
    connection = _connection(conn)
    check_store(connection)
    _check_names(tenant, owner)
    settings, now = _settings(), clock.now()
    requests = [
        _checked(spec, settings, now, tenant=tenant, owner=owner, at=_at(index, indexed))
        for index, spec in enumerate(specs)
    ]
    if any(r.after is not None for r in requests):
        hold_write_lock(connection)
    if len(requests) > 1:  # a job alone that names an unknown job is refused before anything is written
        _check_after(connection, tenant, [(_at(i, indexed), r.after) for i, r in enumerate(requests)])
    outcomes = _accept(connection, requests, indexed)
    hold_announcement(connection)
    accepted = []
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, IdempotencyConflict):
            raise _conflict(outcome, _at(index, indexed))
        accepted.append(outcome.job)
    found = workflows_of(connection, accepted)
    return [Job.from_view(view_fields(job, now, workflow=found.get(job.id, NO_WORKFLOW))) for job in accepted]


def _accept(
    connection: Connection, requests: list[_Request], indexed: bool
) -> list[intake.Accepted | IdempotencyConflict]:
    """Each request's outcome, in order: those that wait for none accepted together, then each of the
    others (`workflows.accept_after`)."""
    plain = [r.prepared for r in requests if r.after is None]
    together = iter(intake.accept_prepared(connection, plain) if plain else [])
    outcomes: list[intake.Accepted | IdempotencyConflict] = []
    for index, request in enumerate(requests):
        if request.after is None:
            outcomes.append(next(together))
            continue
        try:
            outcomes.append(workflows.accept_after(connection, request.prepared, request.after))
        except IdempotencyConflict as conflict:
            outcomes.append(conflict)
        except workflows.UnknownDependencies as exc:
            raise _unknown(exc.ids, _at(index, indexed)) from None
    return outcomes


def _at(index: int, indexed: bool) -> str:
    return f"jobs[{index}]: " if indexed else ""


def _connection(conn: Connection | Session) -> Connection:
    return conn.connection() if isinstance(conn, Session) else conn


def _checked(
    spec: JobSpec,
    settings: Settings,
    now: float,
    *,
    tenant: str,
    owner: str,
    at: str,
    batch_key: str | None = None,
) -> _Request:
    """`spec` once it passed every rule of `POST /jobs`; `InvalidJob`, its message starting with `at`,
    otherwise. A job of a batch (`batch_key`) names no key of its own: it is accepted under the batch's,
    which the store replaces with the member's or the callback's own."""
    try:
        if not isinstance(spec, JobSpec):
            raise InvalidJob(f"a job to enqueue is an outbox_bridge.JobSpec, not a {type(spec).__name__}.")
        request = _request(spec)
        if batch_key is not None and spec.key is not None:
            raise InvalidJob(
                "a job of a batch takes no key: the batch's key names it (leave the JobSpec's key out).",
                [{"loc": ["key"], "msg": "a batch's job takes no key of its own", "type": "batch_key"}],
            )
        key = _check_key(spec.key if batch_key is None else batch_key)
        return _Request(
            _prepared(request, settings, now, tenant=tenant, owner=owner, key=key), request.waits_for()
        )
    except InvalidJob as exc:
        raise InvalidJob(f"{at}{exc}", exc.errors) from None


def _callback(
    spec: JobSpec, settings: Settings, now: float, *, tenant: str, owner: str, key: str
) -> intake.Prepared:
    """The batch's callback once it passed the rules of a job and of a callback; `InvalidJob` otherwise."""
    named = [name for name in NOT_FOR_A_CALLBACK if getattr(spec, name, None) is not None]
    if named:
        raise InvalidJob(
            f"callback: a batch's callback takes no {', '.join(named)}: it is due once the batch's last job "
            "has ended.",
            [{"loc": ["callback", name], "msg": "not for a callback", "type": "callback"} for name in named],
        )
    return _checked(spec, settings, now, tenant=tenant, owner=owner, at="callback: ", batch_key=key).prepared


def _check_key(key: object) -> str:
    if not (isinstance(key, str) and 0 < len(key) <= MAX_KEY_CHARACTERS):
        raise InvalidJob(f"key must be 1 to {MAX_KEY_CHARACTERS} characters.")
    if key.startswith(workflows.RESERVED_KEY_PREFIX):
        raise InvalidJob("a key beginning with `batch:` is the store's own (a batch's members and callback).")
    return key


def _prepared(
    request: JobCreate, settings: Settings, now: float, *, tenant: str, owner: str, key: str
) -> intake.Prepared:
    """The rows of `request` as `intake.prepare` builds them, once it passed every rule of `POST /jobs`;
    `InvalidJob` otherwise."""
    try:
        fields = accept_fields(request, settings, now, tenant=tenant, owner=owner, key=key)
    except ProblemError as exc:
        raise InvalidJob(_refusal(exc, request.kind), exc.extensions.get("errors")) from None
    return intake.prepare(**fields)


def _check_after(
    connection: Connection, tenant: str, afters: list[tuple[str, workflows.After | None]]
) -> None:
    """`UnknownDependencies`, its message starting with the text paired with it, for the first `after` that
    names a job `tenant` does not have; read before anything is written."""
    named = sorted({job_id for _, after in afters if after is not None for job_id in after.ids})
    known: set[str] = set()
    for start in range(0, len(named), _READ_AT_ONCE):
        ids = frozenset(named[start : start + _READ_AT_ONCE])
        known.update(
            job.id
            for job in queries.find_jobs(connection, JobFilter(tenant=tenant, ids=ids), limit=len(ids)).items
        )
    for at, after in afters:
        unknown = [] if after is None else [job_id for job_id in after.ids if job_id not in known]
        if unknown:
            raise _unknown(unknown, at)


_READ_AT_ONCE = 500


def _unknown(ids: list[str], at: str) -> UnknownDependencies:
    errors = [{"loc": ["after"], "msg": f"no job of this tenant: {i}", "type": "unknown_job"} for i in ids]
    return UnknownDependencies(f"{at}after names no job of this tenant: {', '.join(ids)}.", ids, errors)


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


def _batch_conflict(exc: IdempotencyConflict) -> Conflict:
    """The key names another batch request of the tenant (`exc.job_id` is that batch's id)."""
    refused = batch_conflict(exc.job_id)
    problem = {"type": refused.problem.uri, "title": refused.problem.title, "status": refused.problem.status}
    return Conflict(problem | {"detail": refused.detail, **refused.extensions})


def _request(spec: JobSpec) -> JobCreate:
    fields = {
        "kind": spec.kind, "payload": _plain_payload(spec.kind, spec.payload),
        "deadline_seconds": spec.deadline_seconds, "delay_seconds": spec.delay_seconds,
        "run_at": _run_at_text(spec.run_at), "priority": spec.priority,
        "concurrency_key": spec.concurrency_key, "after": _ids(spec.after),
        "on_dependency_failure": spec.on_dependency_failure,
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


def _ids(after: Any) -> Any:
    """`after` as `POST /jobs` would receive it: a list (a tuple or any other sequence of ids as one), the
    schema to accept or refuse; a text alone is refused, not read as a list of its letters."""
    if after is None or isinstance(after, str | bytes) or not isinstance(after, Sequence | AbstractSet):
        return after
    return list(after)


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
