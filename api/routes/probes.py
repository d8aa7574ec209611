"""Liveness and readiness, which need no token; and metrics, which need METRICS_TOKEN or an operator token
(the figures name every tenant, kind and schedule)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from outbox_bridge.api import metrics as metrics_module
from outbox_bridge.api.deps import EngineDep, MetricsDep, MetricsReader
from outbox_bridge.api.openapi import problems
from outbox_bridge.api.schemas import Status
from outbox_bridge.jobstore import db, heartbeats, queries

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
@router.get("/readyz", response_model=Status, summary="The store is reachable", responses=problems(400, 503))
def readyz(
    engine: EngineDep,
    write: Annotated[
        bool,
        Query(
            description="Also take a write transaction (that changes nothing): a read-only store is unready."
        ),
    ] = False,
) -> Status:
    """Ready when the store answers a read: the schema is there. With `write=true`, only when it also takes
    a write transaction, as accepting a job needs: a store that went read-only (a full or read-only disk, a
    PostgreSQL in read-only mode) answers `503` here while a plain `/readyz` still says ready."""
    if write:
        db.transact(engine, heartbeats.remove, PROBE_ID)  # deletes a row that never exists
    else:
        db.read(engine, queries.get_job, PROBE_ID)
    return Status(status="ready")


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    dependencies=[MetricsReader],
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4.",
            "content": {metrics_module.CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        **problems(401, 503),
    },
)
def metrics(counters: MetricsDep) -> Response:
    """This process's counters and histograms, and the store's figures read now. Needs a bearer token:
    METRICS_TOKEN (for a scraper: `authorization` in Prometheus's scrape config) or an operator token; any
    other request is 401, as the figures name every tenant, kind and schedule."""
    return Response(counters.render(), media_type=metrics_module.CONTENT_TYPE)
