"""Liveness, readiness and metrics: no token needed."""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import Connection

from api import metrics as metrics_module
from api.deps import EngineDep, MetricsDep
from api.openapi import problems
from api.schemas import Status
from core import clock
from jobstore import db, outbox, queries
from jobstore.outbox import Backlog

router = APIRouter(tags=["operations"])

# A primary-key lookup that finds nothing: proves the store opens and the schema is there, at the cost of
# one index probe.
PROBE_ID = "readiness-probe"


@router.get("/healthz", response_model=Status, summary="The process is up", responses=problems())
async def healthz() -> Status:
    return Status(status="ok")


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
def metrics(engine: EngineDep, counters: MetricsDep) -> Response:
    """Request and acceptance counters of this process, and the store's figures read now."""
    jobs_by_state, backlog = db.read(engine, _store_figures, clock.now())
    text = counters.render(jobs_by_state, backlog, db.stats.snapshot())
    return Response(text, media_type=metrics_module.CONTENT_TYPE)


def _store_figures(conn: Connection, now: float) -> tuple[dict[str, int], Backlog]:
    return queries.counts_by_state(conn), outbox.backlog(conn, now)
