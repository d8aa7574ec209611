"""`/batches`: accept jobs together with the one job that runs once every one of them has ended; read,
list and cancel them. Every route sees only the caller's tenant; another tenant's batch answers exactly as
an unknown id does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError

from outbox_bridge.api import submission
from outbox_bridge.api.committer import own_failure
from outbox_bridge.api.deps import (
    EngineDep,
    IdempotencyKey,
    IdentityDep,
    MetricsDep,
    SettingsDep,
    Traceparent,
)
from outbox_bridge.api.openapi import problems
from outbox_bridge.api.problems import ProblemError, batch_conflict, batch_not_found
from outbox_bridge.api.routes.jobs import CURSOR_PATTERN, JSON
from outbox_bridge.api.schemas import BatchCreate, BatchPage, BatchView, batch_url
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, intake, operator, queries, workflows
from outbox_bridge.jobstore.errors import IdempotencyConflict
from outbox_bridge.jobstore.workflows import Batch, BatchAccepted, Member
from outbox_bridge.telemetry import tracing

router = APIRouter(prefix="/batches", tags=["batches"])


def _json(view: BatchView | BatchPage, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(view.model_dump_json(), status_code=status, media_type=JSON, headers=headers)


@router.post(
    "",
    status_code=202,
    response_model=BatchView,
    summary="Submit a batch",
    responses={
        202: {
            "description": "Accepted: every member, the batch and its callback's request are committed "
            "together (or this key's batch, again).",
            "headers": {"Location": {"description": "The batch's URL.", "schema": {"type": "string"}}},
        },
        **problems(400, 401, 409, 503),
    },
)
def submit_batch(
    batch: BatchCreate,
    key: IdempotencyKey,
    identity: IdentityDep,
    settings: SettingsDep,
    engine: EngineDep,
    metrics: MetricsDep,
    traceparent: Traceparent = None,
) -> Response:
    """Accept the jobs of a batch, each validated as `POST /jobs` validates a job, in one transaction; none
    of them when one is refused. Once the last member has ended (however it ended) the callback job is
    accepted, exactly once; its kind reads the members' outcomes. The same Idempotency-Key with the same
    request (the same members and callback, in order) returns the batch again (202, same id); with another
    request, 409."""
    now = clock.now()
    members, callback = submission.batch_fields(
        batch, settings, now, tenant=identity.tenant, owner=identity.user
    )
    with tracing.span("accept_batch", traceparent, "server", {"batch.jobs": len(members)}) as span:
        fields = [dict(f, traceparent=span.traceparent) for f in members]
        after = [job.waits_for() for job in batch.jobs]
        end = None if callback is None else dict(callback, traceparent=span.traceparent)
        accepted = _accept(
            engine, fields, after, end, tenant=identity.tenant, owner=identity.user, key=key, now=now
        )
        span.set_attribute("batch.id", accepted.batch.id)
        span.set_attribute("batch.created", accepted.created)
    for member in accepted.members:
        if member.created:
            metrics.job_accepted(member.job.kind)
    return _json(BatchView.of(accepted.batch), 202, {"Location": batch_url(accepted.batch.id)})


def _accept(
    engine: Engine,
    members: list[dict[str, Any]],
    after: list[workflows.After | None],
    callback: dict[str, Any] | None,
    **batch: Any,
) -> BatchAccepted:
    """The batch accepted in a transaction of its own. `Unstorable` for a value the database refuses, as
    for a job."""
    try:
        prepared = [Member(intake.prepare(**f), a) for f, a in zip(members, after, strict=True)]
        end = None if callback is None else intake.prepare(**callback)
        return db.transact(engine, _accepted, prepared, end, **batch)
    except (DataError, UnicodeEncodeError) as exc:
        raise own_failure(exc) from exc


def _accepted(
    conn: Connection,
    members: Sequence[Member],
    callback: intake.Prepared | None,
    *,
    tenant: str,
    owner: str,
    key: str,
    now: float,
) -> BatchAccepted:
    try:
        return workflows.accept_batch(
            conn, tenant=tenant, owner=owner, operation_key=key, members=members, callback=callback, now=now
        )
    except workflows.UnknownDependencies as unknown:
        raise _unknown_in(members, unknown) from None
    except IdempotencyConflict as conflict:
        raise batch_conflict(conflict.job_id) from None


def _unknown_in(members: Sequence[Member], unknown: workflows.UnknownDependencies) -> ProblemError:
    """The 400 for the member whose `after` names jobs the tenant does not have (the first such: the
    store accepts the members in order and stops at it)."""
    for index, member in enumerate(members):
        if member.after is not None and unknown.ids[0] in member.after.ids:
            where = ("body", "jobs", index, "after")
            return submission.unknown_dependencies(unknown, member.after, where, of=f"jobs[{index}]: ")
    raise AssertionError("the store named ids no member's after names")


@router.get("", response_model=BatchPage, summary="List your batches", responses=problems(400, 401, 503))
def list_batches(
    identity: IdentityDep,
    engine: EngineDep,
    state: Annotated[
        Literal["running", "done"] | None, Query(description="Only batches in this state.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[
        str | None,
        Query(
            max_length=512,
            description="A previous page's `next_cursor`, passed back unchanged (as for `GET /jobs`). Any "
            "other value is 400 `bad-cursor`.",
            json_schema_extra={"pattern": CURSOR_PATTERN},
        ),
    ] = None,
) -> Response:
    """Your tenant's batches, newest first, `limit` at a time."""
    before = queries.decode_cursor(cursor) if cursor else None
    found = db.read(
        engine, workflows.list_batches, tenant=identity.tenant, state=state, limit=limit + 1, before=before
    )
    items = found[:limit]
    last = items[-1] if len(found) > limit else None
    next_cursor = None if last is None else queries.encode_position(last.created_at, last.id)
    return _json(BatchPage(items=[BatchView.of(b) for b in items], next_cursor=next_cursor))


@router.get(
    "/{batch_id}", response_model=BatchView, summary="Read a batch", responses=problems(401, 404, 503)
)
def read_batch(batch_id: str, identity: IdentityDep, engine: EngineDep) -> Response:
    """The batch view; 404 for an unknown id and for another tenant's batch alike."""
    batch = db.read(engine, workflows.get_batch, batch_id, identity.tenant)
    if batch is None:
        raise batch_not_found()
    return _json(BatchView.of(batch))


@router.post(
    "/{batch_id}/cancel",
    response_model=BatchView,
    summary="Cancel a batch's unfinished jobs",
    responses={
        200: {"description": "Its queued members cancelled at once (or none was left unfinished)."},
        202: {
            "model": BatchView,
            "description": "Some members are running: cancel requested of them; each worker stops at a safe "
            "point. Its queued members are cancelled at once.",
        },
        **problems(401, 404, 503),
    },
)
def cancel_batch(batch_id: str, identity: IdentityDep, engine: EngineDep) -> Response:
    """Cancel every member not yet ended, each as `POST /jobs/{id}/cancel` does, in one transaction: a
    queued one at once, a running one at its next safe point (202 when there is one). Ended members stay as
    they ended. The callback still runs once the last member has ended."""
    requested, batch = db.transact(engine, _cancel, batch_id, clock.now(), identity.tenant)
    return _json(BatchView.of(batch), 202 if requested else 200)


def _cancel(conn: Connection, batch_id: str, now: float, tenant: str) -> tuple[bool, Batch]:
    """Whether a member was running (its cancel requested), and the batch after the cancels."""
    batch = workflows.get_batch(conn, batch_id, tenant)
    if batch is None:
        raise batch_not_found()
    outcomes = [
        operator.request_cancel(conn, job_id, now, tenant=tenant)
        for job_id in workflows.unfinished_members(batch)
    ]
    after = workflows.get_batch(conn, batch_id, tenant)
    assert after is not None  # read in this transaction
    return operator.CancelOutcome.REQUESTED in outcomes, after
