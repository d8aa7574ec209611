"""The dashboard's workflows: the batches at `/ui/batches` (newest first, of every tenant, filtered by tenant
and state), one batch at `/ui/batches/{id}` (its members with their states, its callback job), and what a
job's page shows of its workflow (the jobs it waits for, the jobs that wait for it, the batch it belongs to
or is the callback of). The same store reads as `outbox-bridge batches list|show`; nothing here changes a
batch: its members are jobs, acted on from their own pages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection

from outbox_bridge.api.dashboard.access import (
    VisitorDep,
    not_found,
    operator_of,
    page_context,
    router,
    templates,
    unavailable,
    with_flash,
)
from outbox_bridge.api.dashboard.charts import age
from outbox_bridge.api.deps import EngineDep
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, queries, workflows
from outbox_bridge.jobstore.filters import JobFilter
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import State
from outbox_bridge.jobstore.workflows import Batch

PAGE_SIZE = 50
BATCH_STATES = ("running", "done")
# A job's page lists at most this many of the jobs that wait for it (their count is exact).
DEPENDENTS_SHOWN = 100


def jobs_by_id(conn: Connection, ids: Sequence[str]) -> dict[str, Job]:
    """The jobs among `ids` that are still in the store (retention may have removed some), by id."""
    if not ids:
        return {}
    found = queries.find_jobs(conn, JobFilter(ids=frozenset(ids)), limit=len(ids)).items
    return {job.id: job for job in found}


def counts(batch: Batch) -> list[tuple[str, int]]:
    """The batch's members counted by state, in the order of the job states."""
    by_state = batch.counts
    return [(s.value, by_state[s.value]) for s in State if s.value in by_state]


# --- the batches -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchListing:
    """One page of batches, the filter as typed (to show it again and keep it on the next page's link),
    what is wrong with it, and the next page's cursor."""

    batches: list[Batch]
    fields: dict[str, str]
    error: str | None
    next_cursor: str | None

    @property
    def query(self) -> str:
        return urlencode({name: value for name, value in self.fields.items() if value})


def _listing(conn: Connection, raw: Mapping[str, str]) -> BatchListing:
    """The page of batches `raw` (the query) names: `tenant`, `state` (`running` or `done`), `cursor` (where
    the previous page ended). A bad state or cursor lists nothing and says why."""
    fields = {name: str(raw.get(name, "")).strip() for name in ("tenant", "state")}
    if fields["state"] and fields["state"] not in BATCH_STATES:
        return BatchListing([], fields, f"A batch is running or done, not {fields['state']!r}.", None)
    cursor = raw.get("cursor") or None
    try:
        before = None if cursor is None else queries.decode_cursor(cursor)
    except queries.BadCursor:
        return BatchListing([], fields, "That page link is stale.", None)
    found = workflows.list_batches(
        conn,
        tenant=fields["tenant"] or None,
        state=fields["state"] or None,
        limit=PAGE_SIZE + 1,
        before=before,
    )
    shown = found[:PAGE_SIZE]
    more = len(found) > PAGE_SIZE
    next_cursor = queries.encode_position(shown[-1].created_at, shown[-1].id) if more else None
    return BatchListing(shown, fields, None, next_cursor)


@router.get("/batches")
def batches_page(request: Request, visitor: VisitorDep, engine: EngineDep) -> Response:
    """Every batch, newest first, a page at a time, filtered by tenant and state: its members and their
    counts by state, its callback job, when it was accepted and when it was done."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    now = clock.now()
    try:
        listing = db.read(engine, _listing, request.query_params)
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    context = {
        **page_context(request, now, 0),
        "age": age,
        "listing": listing,
        "batch_states": BATCH_STATES,
        "counts": counts,
        "first_page": not request.query_params.get("cursor"),
    }
    return with_flash(request, templates.TemplateResponse(request, "batches.html", context))


# --- one batch -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchDetail:
    batch: Batch
    jobs: dict[str, Job]  # its members' and its callback's jobs, by id

    @property
    def callback(self) -> Job | None:
        return None if self.batch.callback_job_id is None else self.jobs.get(self.batch.callback_job_id)


def _detail(conn: Connection, batch_id: str) -> BatchDetail | None:
    batch = workflows.get_batch(conn, batch_id)
    if batch is None:
        return None
    ids = [*batch.jobs, *([batch.callback_job_id] if batch.callback_job_id else [])]
    return BatchDetail(batch, jobs_by_id(conn, ids))


@router.get("/batches/{batch_id}")
def batch_page(request: Request, batch_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """One batch, of any tenant: its state and counts, each member (in the request's order) with its state,
    attempts and error, linked to its page, and its callback job once every member has ended."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    now = clock.now()
    try:
        found = db.read(engine, _detail, batch_id)
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    if found is None:
        return not_found(request)
    context = {
        **page_context(request, now, 0),
        "age": age,
        "detail": found,
        "batch": found.batch,
        "counts": counts(found.batch),
    }
    return with_flash(request, templates.TemplateResponse(request, "batch.html", context))


# --- a job's workflow ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Related:
    """A job another job names in its workflow, and its record (None once retention has removed it)."""

    id: str
    job: Job | None
    waited_for: bool = False  # a dependency the job still waits for


@dataclass(frozen=True)
class Workflow:
    """What a job's page shows of its workflow: the jobs it waits or waited for, the jobs that wait or
    waited for it (the first `DEPENDENTS_SHOWN`, and how many in all), the batch it is a member of and the
    batch it is the callback of."""

    dependencies: list[Related]
    dependents: list[Related]
    dependents_total: int
    member_of: str | None
    callback_of: str | None

    @property
    def empty(self) -> bool:
        return not (self.dependencies or self.dependents or self.member_of or self.callback_of)

    @property
    def still_waiting(self) -> int:
        return sum(1 for d in self.dependencies if d.waited_for)


def workflow_of(conn: Connection, job_id: str) -> Workflow:
    """The workflow of the job `job_id`, read in the caller's transaction."""
    named = workflows.dependencies_of(conn, [job_id]).get(job_id, [])
    waited = set(workflows.waiting_for(conn, [job_id]).get(job_id, []))
    dependents = workflows.dependents_of(conn, job_id)
    shown = dependents[:DEPENDENTS_SHOWN]
    jobs = jobs_by_id(conn, [*named, *shown])
    return Workflow(
        dependencies=[Related(i, jobs.get(i), i in waited) for i in named],
        dependents=[Related(i, jobs.get(i)) for i in shown],
        dependents_total=len(dependents),
        member_of=workflows.batch_of_member(conn, job_id),
        callback_of=workflows.callbacks_of(conn, [job_id]).get(job_id),
    )
