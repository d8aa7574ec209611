"""The dashboard's pages: the overview, the jobs with filters and paging, one job with everything an
operator needs to decide (payload, operation key, attempts and their errors, operator actions, the result),
and that result itself."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection

from outbox_bridge.api import results
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
from outbox_bridge.api.dashboard.batches import Workflow, workflow_of
from outbox_bridge.api.dashboard.charts import (
    DEFAULT_REFRESH_SECONDS,
    JobRow,
    age,
    job_row,
    refresh_seconds,
    throughput_chart,
)
from outbox_bridge.api.deps import EngineDep, SettingsDep
from outbox_bridge.api.liveness import liveness_block
from outbox_bridge.api.schemas import HELD_BY_MEANING, JobView
from outbox_bridge.broker.connection import queue_depth
from outbox_bridge.core import clock
from outbox_bridge.core.durations import FORMAT, parse_duration
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import conditions, db, operator, queries
from outbox_bridge.jobstore.conditions import lease_note
from outbox_bridge.jobstore.filters import NOTHING, JobFilter
from outbox_bridge.jobstore.overview import Liveness, overview
from outbox_bridge.jobstore.records import Attempt, Job, OperatorAction
from outbox_bridge.jobstore.states import REQUEUE, State

log = logging.getLogger(__name__)

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
FILTER_FIELDS = ("state", "kind", "tenant", "worker", "id", "since")


@router.get("")
@router.get("/")
def dashboard(request: Request, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep) -> Response:
    """The overview: counts by state, each queue's waiting and running jobs, the processes (lost ones
    marked, with the jobs each holds), outbox backlog, throughput, recent jobs, and the dead and unknown
    lists with their actions. Refreshes itself every few seconds (`?refresh=0` pauses it)."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    now = clock.now()
    try:
        view = db.read(engine, overview, now, Liveness.of(settings))
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    refresh = refresh_seconds(request.query_params.get("refresh"))
    context = {
        **page_context(request, now, refresh),
        "age": age,
        "view": view,
        "counts": [(state, view.counts.get(state.value, 0)) for state in State],
        "total": sum(view.counts.values()),
        "chart": throughput_chart(view, now),
        "dead_letters": _dead_letters(settings),
        "liveness": liveness_block(view),
        "lease_note": lease_note,
    }
    return with_flash(request, templates.TemplateResponse(request, "dashboard.html", context))


def _dead_letters(settings: Settings) -> int | None:
    """How many messages wait in `jobs.dead`; None when the broker does not answer within a second."""
    return queue_depth(settings, settings.dead_letter_queue, timeout=1.0)


# --- the jobs, filtered ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filtering:
    """The filter fields as the operator typed them (to show them again and to carry them to the next page
    or the bulk requeue), the jobs they ticked on the list (`selected`), what both mean, and what is wrong
    with them."""

    fields: dict[str, str]
    matching: JobFilter
    error: str | None = None
    selected: tuple[str, ...] = ()

    @property
    def query(self) -> str:
        return urlencode({name: value for name, value in self.fields.items() if value})

    @property
    def requeueable(self) -> bool:
        """A bulk requeue is offered for ticked jobs, or for a filter that names a state a requeue takes jobs
        from."""
        if self.error is not None:
            return False
        states = self.matching.states
        return bool(self.selected) or (bool(states) and states <= REQUEUE.sources)


def filtering(raw: Mapping[str, str], now: float, selected: Sequence[str] = ()) -> Filtering:
    """The filter `raw` (query or form fields) names: `state` (one state), `kind`, `tenant`, `worker` (a
    lease owner), `id` (a prefix), `since` (a duration: changed within it), narrowed to the `selected` job
    ids when there are any. Blank fields match everything; a bad state or duration, or more ticked jobs than
    a page shows, is an error, and the filter then matches nothing rather than more than the operator asked
    for."""
    fields = {name: str(raw.get(name, "")).strip() for name in FILTER_FIELDS}
    state, since = fields["state"], fields["since"]
    if state and state not in {s.value for s in State}:
        return Filtering(fields, NOTHING, f"There is no state {state!r}.")
    if len(selected) > MAX_PAGE_SIZE:
        return Filtering(fields, NOTHING, f"Tick at most {MAX_PAGE_SIZE} jobs at a time.")
    try:
        since_at = now - parse_duration(since) if since else None
    except ValueError:
        return Filtering(fields, NOTHING, f"'Changed within' takes {FORMAT}.")
    matching = JobFilter(
        states=frozenset({State(state)}) if state else frozenset(),
        kind=fields["kind"] or None,
        tenant=fields["tenant"] or None,
        lease_owner=fields["worker"] or None,
        id_prefix=fields["id"] or None,
        since=since_at,
        ids=frozenset(selected),
    )
    return Filtering(fields, matching, selected=tuple(selected))


def _page_size(raw: str | None) -> int:
    try:
        return min(max(int(raw or PAGE_SIZE), 1), MAX_PAGE_SIZE)
    except ValueError:
        return PAGE_SIZE


@dataclass(frozen=True)
class Listing:
    """One page of the job list: the jobs, as rows, and how many jobs match in all."""

    page: queries.Page
    total: int
    rows: list[JobRow]


def _listing(
    conn: Connection, matching: JobFilter, *, limit: int, cursor: str | None, now: float, heartbeat: float
) -> Listing:
    page = queries.find_jobs(conn, matching, limit=limit, cursor=cursor)
    workers = queries.last_workers(conn, [job.id for job in page.items])
    owners = conditions.lease_owners(conn, now, heartbeat)
    rows = [job_row(job, workers.get(job.id), owners, now) for job in page.items]
    return Listing(page, queries.count_jobs(conn, matching), rows)


@router.get("/jobs")
def jobs_page(request: Request, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep) -> Response:
    """Every job, newest first, a page at a time, with how many match in all, filtered by state, kind,
    tenant, worker, id prefix and how recently it changed; each row with how long the job ran, its worker
    and its lease (flagged when the worker is lost). Failed, dead and unknown jobs can be ticked and
    requeued together, and a filter on those states offers to requeue them all (both after a page that
    asks to confirm). Refreshes itself only when asked to (`?refresh=5`)."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    now = clock.now()
    chosen = filtering(request.query_params, now)
    limit, cursor = _page_size(request.query_params.get("limit")), request.query_params.get("cursor") or None
    heartbeat = settings.heartbeat_seconds
    try:
        found = db.read(
            engine, _listing, chosen.matching, limit=limit, cursor=cursor, now=now, heartbeat=heartbeat
        )
    except queries.BadCursor:
        found = Listing(queries.Page([], None), 0, [])
        chosen = Filtering(chosen.fields, chosen.matching, "That page link is stale.")
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    refresh = request.query_params.get("refresh")
    context = {
        **page_context(request, now, refresh_seconds(refresh) if refresh else 0),
        "age": age,
        "filtering": chosen,
        "states": [s.value for s in State],
        "listing": found,
        "page": found.page,
        "limit": limit,
        "first_page": cursor is None,
        "tick_all": request.query_params.get("select") == "all",
        "selectable": any(row.job.state in REQUEUE.sources for row in found.rows),
        "links": _list_links(request.query_params),
        "auto_refresh": DEFAULT_REFRESH_SECONDS,
    }
    return with_flash(request, templates.TemplateResponse(request, "jobs.html", context))


def _list_links(params: Mapping[str, str]) -> dict[str, str]:
    """The job list's own links, keeping its filter and page: read again now (`refresh`), every few seconds
    (`auto_refresh`) or no longer (`stop_refresh`), with every row ticked (`tick_all`) or none
    (`untick_all`)."""
    kept = {name: value for name, value in params.items() if name not in {"refresh", "select"}}

    def link(**extra: object) -> str:
        query = urlencode({**kept, **extra})
        return f"/ui/jobs?{query}" if query else "/ui/jobs"

    refresh = {"refresh": params["refresh"]} if params.get("refresh") else {}
    ticked = {"select": "all"} if params.get("select") == "all" else {}
    return {
        "refresh": link(**refresh, **ticked),
        "auto_refresh": link(refresh=DEFAULT_REFRESH_SECONDS, **ticked),
        "stop_refresh": link(**ticked),
        "tick_all": link(**refresh, select="all"),
        "untick_all": link(**refresh),
    }


# --- one job ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobDetail:
    job: Job
    attempts: list[Attempt]
    actions: list[OperatorAction]
    row: JobRow  # its worker, run time and lease, as the job list shows them
    workflow: Workflow  # the jobs it waits for, those that wait for it, its batch

    def view(self, now: float) -> JobView:
        """The job as its owner sees it at `now` (its progress and wait read as the api reads them)."""
        return JobView.of(self.job, now)

    @property
    def resolution(self) -> OperatorAction | None:
        return operator.resolution(self.job, self.actions)


def _detail(conn: Connection, job_id: str, now: float, heartbeat: float) -> JobDetail | None:
    job = queries.get_job(conn, job_id)
    if job is None:
        return None
    tried = queries.attempts_of(conn, job_id)
    worker = next((a.worker for a in tried if a.epoch == job.epoch), None)
    row = job_row(job, worker, conditions.lease_owners(conn, now, heartbeat), now)
    return JobDetail(job, tried, queries.actions_of(conn, job_id), row, workflow_of(conn, job_id))


@router.get("/jobs/{job_id}")
def job_page(
    request: Request, job_id: str, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep
) -> Response:
    """One job: its input (payload, operation key), when it may start and its progress (as the job view has
    them), its worker and lease (flagged when the worker is lost), its workflow (the jobs it waits for and
    those that wait for it, with their states; the batch it belongs to or is the callback of), every attempt
    (epoch, worker, outcome, external effect, error), what operators did to it, the link to its result, and
    the actions its state allows."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    now = clock.now()
    try:
        found = db.read(engine, _detail, job_id, now, settings.heartbeat_seconds)
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    if found is None:
        return not_found(request)
    context = {
        **page_context(request, now, 0),
        "detail": found,
        "job": found.job,
        "view": found.view(now),
        "held_by_meaning": HELD_BY_MEANING,
    }
    return with_flash(request, templates.TemplateResponse(request, "job.html", context))


@router.get("/jobs/{job_id}/result")
def job_result(
    request: Request, job_id: str, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep
) -> Response:
    """The job's committed result, whatever its tenant, as the api serves it to the job's owner; the plain
    not-found page while it has none."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    try:
        found = db.read(engine, _committed, job_id)
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    if found is None:
        return not_found(request)
    job, attempt = found
    return results.respond(attempt.output, settings.results_dir, f"{job.kind}-{job.id}")


def _committed(conn: Connection, job_id: str) -> tuple[Job, Attempt] | None:
    job = queries.get_job(conn, job_id)
    attempt = queries.committed_result(conn, job_id)
    return None if job is None or attempt is None else (job, attempt)
