"""`/jobs`: submit, read, list, cancel, and fetch the committed result. Every route sees only the caller's
tenant; another tenant's job answers exactly as an unknown id does. The one exception is a signed result
link (`api.links`), which opens one job's result without a bearer token, whatever its tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import Connection, Engine

from outbox_bridge.api import results, submission
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
from outbox_bridge.api.schemas import JobCreate, JobPage, JobView, job_url, view_json
from outbox_bridge.core import clock, faults
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, operator, queries
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
    job: Job, links: LinkSigner, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """The job's view as `_json(JobView.of(job, links=links))` answers it, encoded without the model."""
    return Response(view_json(job, links=links), status_code=status, media_type=JSON, headers=headers)


async def submit_job(
    job: JobCreate,
    key: IdempotencyKey,
    identity: IdentityDep,
    settings: SettingsDep,
    committer: CommitterDep,
    metrics: MetricsDep,
    links: LinksDep,
    traceparent: Traceparent = None,
) -> Response:
    """Accept a job. The answer comes only after the job and its outbox row are committed together; the
    same Idempotency-Key with the same request (kind, payload as validated, deadline, the start as named
    (the same `delay_seconds` or the same `run_at` instant), priority and concurrency key) returns the
    original job again (202, same id). A delayed job waits `queued` until its `run_at`; a job whose
    `concurrency_key` already has CONCURRENCY_KEY_MAX_RUNNING running jobs of the tenant waits `queued` until
    one of them ends."""
    fields = submission.accept_fields(
        job, settings, clock.now(), tenant=identity.tenant, owner=identity.user, key=key
    )
    kind = fields["kind"]
    # Validation above is CPU only and runs on the event loop; the write waits for the group commit.
    with tracing.span("accept", traceparent, "server", {"job.kind": kind}) as span:
        accepted = await committer.accept(**fields, traceparent=span.traceparent)
        span.set_attribute("job.id", accepted.job.id)
        span.set_attribute("job.created", accepted.created)
    faults.hit("api.after_commit")
    if accepted.created:
        metrics.job_accepted(kind)
    return _job_json(accepted.job, links, 202, {"Location": job_url(accepted.job.id)})


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
    page = db.read(engine, queries.list_jobs, tenant=identity.tenant, state=state, limit=limit, cursor=cursor)
    now = clock.now()  # one instant for the whole page
    items = [JobView.of(j, now, links) for j in page.items]
    return _json(JobPage(items=items, next_cursor=page.next_cursor))


@router.get("/{job_id}", response_model=JobView, summary="Read a job", responses=problems(401, 404, 503))
def read_job(job_id: str, identity: IdentityDep, engine: EngineDep, links: LinksDep) -> Response:
    """The job view; 404 for an unknown id and for another tenant's job alike. A succeeded job's view
    carries a fresh signed `result_url` each time it is read; reading it changes nothing."""
    job = db.read(engine, queries.get_job, job_id, tenant=identity.tenant)
    if job is None:
        raise JobNotFound(job_id)
    return _job_json(job, links)


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
    outcome, job = db.transact(engine, _cancel, job_id, clock.now(), identity.tenant)
    status = 202 if outcome is operator.CancelOutcome.REQUESTED else 200
    return _job_json(job, links, status)


def _cancel(conn: Connection, job_id: str, now: float, tenant: str) -> tuple[operator.CancelOutcome, Job]:
    outcome = operator.request_cancel(conn, job_id, now, tenant=tenant)
    job = queries.get_job(conn, job_id, tenant=tenant)
    assert job is not None  # request_cancel raised JobNotFound otherwise
    return outcome, job


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
