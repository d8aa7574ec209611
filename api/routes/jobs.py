"""`/jobs`: submit, read, list, cancel, and fetch the committed result. Every route sees only the caller's
tenant; another tenant's job answers exactly as an unknown id does. The one exception is a signed result
link (`api.links`), which opens one job's result without a bearer token, whatever its tenant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError

from outbox_bridge.api import results, submission
from outbox_bridge.api.committer import own_failure
from outbox_bridge.api.deps import (
    BearerDep,
    CommitterDep,
    EngineDep,
    IdempotencyKey,
    IdentityDep,
    LinksDep,
    MetricsDep,
    SettingsDep,
    Traceparent,
    bearer_identity,
)
from outbox_bridge.api.links import LinkExpired, LinkRefused, LinkSigner
from outbox_bridge.api.openapi import problems
from outbox_bridge.api.problems import (
    RESOLVED_WITHOUT_RESULT,
    RESULT_LINK_EXPIRED,
    RESULT_LINK_INVALID,
    RESULT_NOT_READY,
)
from outbox_bridge.api.routes.submit_route import SubmitRoute
from outbox_bridge.api.schemas import NO_WORKFLOW, JobCreate, JobPage, JobView, Workflow, job_url, view_json
from outbox_bridge.api.workflow_fields import needs_reading, workflow_of, workflows_of
from outbox_bridge.core import clock, faults
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, operator, queries, workflows
from outbox_bridge.jobstore.errors import JobNotFound
from outbox_bridge.jobstore.records import Attempt, Job, OperatorAction
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry import tracing

router = APIRouter(prefix="/jobs", tags=["jobs"])

JSON = "application/json"
# The media types `GET /jobs/{id}/result` answers with. The bytes first: a client generated from the document
# takes the first one it can read, and bytes hold any result; its Content-Type says which it is.
BINARY = {"schema": {"type": "string", "format": "binary"}}
RESULT_CONTENT = {
    results.OCTET_STREAM: BINARY,
    **{media_type: BINARY for media_type in results.FILE_MEDIA_TYPES if media_type != results.OCTET_STREAM},
    JSON: {"schema": {"type": ["object", "null"]}},  # null: the kind returned nothing
}
# What `next_cursor` is made of (unpadded base64url); anything else, and any such text a page did not give,
# is 400 bad-cursor.
CURSOR_PATTERN = "^[A-Za-z0-9_-]+$"


def _json(view: JobView | JobPage, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    # Already validated by construction: serialize once, skipping FastAPI's response-model round trip.
    return Response(view.model_dump_json(), status_code=status, media_type=JSON, headers=headers)


def _job_json(
    job: Job,
    links: LinkSigner,
    status: int = 200,
    headers: dict[str, str] | None = None,
    workflow: Workflow = NO_WORKFLOW,
) -> Response:
    """The job's view as `_json(JobView.of(job, links=links, workflow=workflow))` answers it, encoded
    without the model."""
    body = view_json(job, links=links, workflow=workflow)
    return Response(body, status_code=status, media_type=JSON, headers=headers)


async def submit_job(
    job: JobCreate,
    key: IdempotencyKey,
    identity: IdentityDep,
    settings: SettingsDep,
    committer: CommitterDep,
    engine: EngineDep,
    metrics: MetricsDep,
    links: LinksDep,
    traceparent: Traceparent = None,
) -> Response:
    """Accept a job. The answer comes only after the job and its outbox row are committed together; the
    same Idempotency-Key with the same request (kind, payload as validated, deadline, the start as named
    (the same `delay_seconds` or the same `run_at` instant), priority, concurrency key, and the jobs it waits
    for with `on_dependency_failure`) returns the original job again (202, same id). A delayed job waits
    `queued` until its `run_at`; a job whose `concurrency_key` already has CONCURRENCY_KEY_MAX_RUNNING running
    jobs of the tenant waits `queued` until one of them ends; a job with `after` waits `queued` until the jobs
    it names have succeeded (or, with `"on_dependency_failure": "run"`, ended), its view's `waiting_for`
    naming those it still waits for."""
    fields = submission.accept_fields(
        job, settings, clock.now(), tenant=identity.tenant, owner=identity.user, key=key
    )
    kind, after = fields["kind"], job.waits_for()
    # Validation above is CPU only and runs on the event loop; the write waits for the group commit, or,
    # for a job that waits for others, for a transaction of its own in the threadpool.
    with tracing.span("accept", traceparent, "server", {"job.kind": kind}) as span:
        if after is None:
            accepted = await committer.accept(**fields, traceparent=span.traceparent)
            workflow = NO_WORKFLOW
            if not accepted.created and needs_reading([accepted.job]):  # this key's job, perhaps a callback
                workflow = await run_in_threadpool(db.read, engine, workflow_of, accepted.job)
        else:
            fields["traceparent"] = span.traceparent
            accepted, workflow = await run_in_threadpool(_accept_after, engine, fields, after)
        span.set_attribute("job.id", accepted.job.id)
        span.set_attribute("job.created", accepted.created)
    faults.hit("api.after_commit")
    if accepted.created:
        metrics.job_accepted(kind)
    return _job_json(accepted.job, links, 202, {"Location": job_url(accepted.job.id)}, workflow)


def _accept_after(
    engine: Engine, fields: dict[str, Any], after: workflows.After
) -> tuple[intake.Accepted, Workflow]:
    """Accept a job that waits for others in a transaction of its own, and read what its view says of
    them. Answered as the group commit answers a request that failed alone: `Unstorable` for a value the
    database refuses."""
    try:
        return db.transact(engine, _accepted_after, intake.prepare(**fields), after)
    except (DataError, UnicodeEncodeError) as exc:
        raise own_failure(exc) from exc


def _accepted_after(
    conn: Connection, prepared: intake.Prepared, after: workflows.After
) -> tuple[intake.Accepted, Workflow]:
    try:
        accepted = workflows.accept_after(conn, prepared, after)
    except workflows.UnknownDependencies as unknown:
        raise submission.unknown_dependencies(unknown, after, ("body", "after")) from None
    return accepted, workflow_of(conn, accepted.job)


router.add_api_route(
    "",
    submit_job,
    methods=["POST"],
    route_class_override=SubmitRoute,
    status_code=202,
    response_model=JobView,
    summary="Submit a job",
    responses={
        202: {
            "description": "Accepted: the job and its outbox row are committed (or this key's job, again; "
            "or, for a kind with `unique_for_seconds`, the job of that payload accepted in its window).",
            "headers": {"Location": {"description": "The job's status URL.", "schema": {"type": "string"}}},
        },
        **problems(400, 401, 409, 503),
    },
)


@router.get("", response_model=JobPage, summary="List your jobs", responses=problems(400, 401, 503))
def list_jobs(
    identity: IdentityDep,
    engine: EngineDep,
    links: LinksDep,
    state: Annotated[State | None, Query(description="Only jobs in this state.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[
        str | None,
        Query(
            max_length=512,
            description="A previous page's `next_cursor`, passed back unchanged: an opaque position in the "
            "listing (unpadded base64url, so letters, digits, `-` and `_`). Any other value, edited ones "
            "included, is 400 `bad-cursor`.",
            json_schema_extra={"pattern": CURSOR_PATTERN},
        ),
    ] = None,
) -> Response:
    """Your tenant's jobs, newest first, `limit` at a time."""
    page, found = db.read(engine, _page, identity.tenant, state, limit, cursor)
    now = clock.now()  # one instant for the whole page
    items = [JobView.of(j, now, links, workflow=found.get(j.id, NO_WORKFLOW)) for j in page.items]
    return _json(JobPage(items=items, next_cursor=page.next_cursor))


def _page(
    conn: Connection, tenant: str, state: State | None, limit: int, cursor: str | None
) -> tuple[queries.Page, dict[str, Workflow]]:
    """A page of the tenant's jobs, and what their views say of workflows (one query for the page)."""
    page = queries.list_jobs(conn, tenant=tenant, state=state, limit=limit, cursor=cursor)
    return page, workflows_of(conn, page.items)


@router.get("/{job_id}", response_model=JobView, summary="Read a job", responses=problems(401, 404, 503))
def read_job(job_id: str, identity: IdentityDep, engine: EngineDep, links: LinksDep) -> Response:
    """The job view; 404 for an unknown id and for another tenant's job alike. A succeeded job's view
    carries a fresh signed `result_url` each time it is read; reading it changes nothing."""
    job, workflow = db.read(engine, _job_of, job_id, identity.tenant)
    if job is None:
        raise JobNotFound(job_id)
    return _job_json(job, links, workflow=workflow)


def _job_of(conn: Connection, job_id: str, tenant: str) -> tuple[Job | None, Workflow]:
    job = queries.get_job(conn, job_id, tenant=tenant)
    return job, NO_WORKFLOW if job is None else workflow_of(conn, job)


@router.post(
    "/{job_id}/cancel",
    response_model=JobView,
    summary="Cancel a job",
    responses={
        200: {"description": "Cancelled at once (it was queued), or already finished and left as it was."},
        202: {
            "model": JobView,
            "description": "It is running: cancel requested; the worker stops at a safe point.",
        },
        **problems(401, 404, 503),
    },
)
def cancel_job(job_id: str, identity: IdentityDep, engine: EngineDep, links: LinksDep) -> Response:
    """Queued: `cancelled` at once (200). Running: cancel requested (202). Finished: unchanged (200), so a
    committed result stands."""
    outcome, job, workflow = db.transact(engine, _cancel, job_id, clock.now(), identity.tenant)
    status = 202 if outcome is operator.CancelOutcome.REQUESTED else 200
    return _job_json(job, links, status, workflow=workflow)


def _cancel(
    conn: Connection, job_id: str, now: float, tenant: str
) -> tuple[operator.CancelOutcome, Job, Workflow]:
    outcome = operator.request_cancel(conn, job_id, now, tenant=tenant)
    job = queries.get_job(conn, job_id, tenant=tenant)
    assert job is not None  # request_cancel raised JobNotFound otherwise
    return outcome, job, workflow_of(conn, job)


@router.get(
    "/{job_id}/result",
    summary="Fetch the committed result",
    response_class=Response,  # the documented content alone, in its order (FastAPI would put JSON first)
    # Added to the bearer scheme FastAPI lists: or no Authorization at all, through a signed link.
    openapi_extra={"security": [{}]},
    responses={
        200: {
            "description": "The committed result: the JSON output (`application/json`), or the result file "
            "(an export's CSV as `text/csv`, any other file as `application/octet-stream`). Read the body as "
            "bytes and its `Content-Type` for which.",
            "headers": {
                "Content-Disposition": {
                    "description": 'For a file: `attachment; filename="{kind}-{id}.csv"` (`.bin` for '
                    "`application/octet-stream`).",
                    "schema": {"type": "string"},
                }
            },
            "content": RESULT_CONTENT,
        },
        **problems(401, 403, 404, 503),
    },
)
def job_result(
    job_id: str,
    request: Request,
    credentials: BearerDep,
    settings: SettingsDep,
    engine: EngineDep,
    links: LinksDep,
    expires: Annotated[str | None, Query(description="A signed link's expiry (unix seconds).")] = None,
    sig: Annotated[str | None, Query(description="A signed link's signature.")] = None,
) -> Response:
    """The output of the attempt the job's result pointer names; 404 `result-not-ready` until the job has
    succeeded. An attempt that never became the result (killed, fenced, cancelled) is never served. A job an
    operator resolved as succeeded (its effect happened, but no attempt committed an output) answers 404
    `resolved-without-result`, with when and the operator's note: it never will have one.

    With the bearer token, or without any `Authorization` header through the job view's signed
    `result_url`: 403 `result-link-expired` once it has expired (read the job again for a fresh link),
    403 `result-link-invalid` when it was not signed for this job's result. A request that carries an
    `Authorization` header is a bearer request: the token decides, and `expires` and `sig` are ignored."""
    if "authorization" not in request.headers and (expires is not None or sig is not None):
        return _by_link(job_id, expires, sig, links, settings, engine)
    identity = bearer_identity(settings, credentials)
    job, attempt, resolution = db.read(engine, _result_of, job_id, identity.tenant)
    if job is None:
        raise JobNotFound(job_id)
    if resolution is not None:
        raise _resolved_without_result(resolution)
    if attempt is None:
        raise RESULT_NOT_READY.error(f"The job is {job.state.value}; a result exists once it has succeeded.")
    return results.respond(attempt.output, settings.results_dir, f"{job.kind}-{job.id}")


def _by_link(
    job_id: str,
    expires: str | None,
    sig: str | None,
    links: LinkSigner,
    settings: Settings,
    engine: Engine,
) -> Response:
    """The result a signed link opens: the job's committed result, checked against the link's job, tenant,
    attempt and expiry. 404 as for any unknown id when the job does not exist (a job removed by the
    retention included)."""
    job, attempt = db.read(engine, _committed_result, job_id)
    if job is None:
        raise JobNotFound(job_id)
    try:
        links.check(
            job.id, job.tenant, attempt.id if attempt else None, expires=expires, sig=sig, now=clock.now()
        )
    except LinkExpired:
        raise RESULT_LINK_EXPIRED.error(
            f"This result link has expired. Read the job again (GET {job_url(job.id)}) with your bearer "
            "token for a fresh link; the job and its result stay as they are.",
            job_url=job_url(job.id),
        ) from None
    except LinkRefused:
        raise RESULT_LINK_INVALID.error(
            "This link does not open this job's result: it is incomplete, or its job id, expiry or "
            "signature was changed. Use a job view's result_url as it is given."
        ) from None
    assert attempt is not None  # a link is only ever valid for a committed result
    return results.respond(attempt.output, settings.results_dir, f"{job.kind}-{job.id}")


def _committed_result(conn: Connection, job_id: str) -> tuple[Job | None, Attempt | None]:
    """The job, whatever its tenant, and the attempt its result pointer names, read together."""
    job = queries.get_job(conn, job_id)
    return job, None if job is None else queries.committed_result(conn, job_id)


def _resolved_without_result(resolution: OperatorAction) -> Exception:
    at, note = clock.isoformat(resolution.at), resolution.note or ""
    return RESOLVED_WITHOUT_RESULT.error(
        f"An operator resolved this job as succeeded at {at} (note: {note}); no attempt committed an "
        "output, so there is no result to serve.",
        resolved_at=at,
        note=note,
    )


def _result_of(
    conn: Connection, job_id: str, tenant: str
) -> tuple[Job | None, Attempt | None, OperatorAction | None]:
    job = queries.get_job(conn, job_id, tenant=tenant)
    if job is None:
        return None, None, None
    if job.state is State.SUCCEEDED and job.result_attempt_id is None:
        return job, None, operator.resolution(job, queries.actions_of(conn, job_id))
    return job, queries.committed_result(conn, job_id, tenant=tenant), None
