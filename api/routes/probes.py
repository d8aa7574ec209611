"""Liveness, readiness and metrics: no token needed."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Response
from sqlalchemy import Connection

from api import metrics as metrics_module
from api.deps import EngineDep, MetricsDep, SettingsDep
from api.openapi import problems
from api.schemas import Status
from core import clock
from jobstore import db, heartbeats, outbox, queries

router = APIRouter(tags=["operations"])

# A primary-key lookup that finds nothing: proves the store opens and the schema is there, at the cost of
# one index probe.
PROBE_ID = "readiness-probe"


@router.get("/healthz", response_model=Status, summary="The process is up", responses=problems())
async def healthz() -> Status:
    return Status(status="ok")


# Readiness is about this api process only: it can take jobs when its store answers. A missing relay or
# consumer does not make it unready (taking it out of a load balancer would refuse jobs the outbox would
# otherwise keep safely); who is alive is what `status`, the dashboard and /metrics report.
@router.get("/readyz", response_model=Status, summary="The store is reachable", responses=problems(503))
def readyz(engine: EngineDep) -> Status:
    db.read(engine, queries.get_job, PROBE_ID)
    return Status(status="ready")


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4.",
            "content": {metrics_module.CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        **problems(503),
    },
)
def metrics(engine: EngineDep, counters: MetricsDep, settings: SettingsDep) -> Response:
    """Request and acceptance counters of this process, and the store's figures read now."""
    figures = db.read(engine, _store_figures, clock.now(), settings.alive_within_seconds)
    text = counters.render(
        figures.jobs_by_state,
        figures.backlog,
        db.stats.snapshot(),
        alive=figures.alive,
        oldest_queued_age=figures.due.oldest_age_seconds,
    )
    return Response(text, media_type=metrics_module.CONTENT_TYPE)


@dataclass(frozen=True)
class StoreFigures:
    jobs_by_state: dict[str, int]
    backlog: outbox.Backlog
    due: queries.DueQueue
    alive: dict[str, int]


def _store_figures(conn: Connection, now: float, alive_within: float) -> StoreFigures:
    return StoreFigures(
        queries.counts_by_state(conn),
        outbox.backlog(conn, now),
        queries.due_queue(conn, now),
        heartbeats.by_role(heartbeats.alive(conn, now, alive_within)),
    )
