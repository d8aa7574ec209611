"""The FastAPI application. Nothing is built at import time: `create_app(settings)` makes the engine and the
app; `create_app_from_env` is the factory uvicorn calls in each worker process."""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Engine

from outbox_bridge.api import docs, openapi, problems
from outbox_bridge.api.access import AccessLog
from outbox_bridge.api.auth import check_secret
from outbox_bridge.api.committer import GroupCommitter
from outbox_bridge.api.edge import Edge
from outbox_bridge.api.links import LinkSigner
from outbox_bridge.api.metrics import Metrics, store_reader
from outbox_bridge.api.routes import batches, jobs, probes
from outbox_bridge.core import version
from outbox_bridge.core.settings import Settings, load
from outbox_bridge.handlers.registry import accepted
from outbox_bridge.handlers.registry import load as load_kinds
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.heartbeats import Heartbeat
from outbox_bridge.telemetry import logs, tracing

log = logging.getLogger(__name__)

DESCRIPTION = """A durable job system. `POST /jobs` answers 202 only after the job and its outbox row are
committed in one transaction. Identity comes from the bearer token only. Every error is
`application/problem+json`; the statuses used are 200, 202, 400, 401, 403 (signed result links only), 404,
409, 413 and 503."""

# SQLite serializes writers; connections beyond a few serve concurrent reads, and many more only contend.
POOL_SIZE = 8
POOL_OVERFLOW = 24


def create_app(settings: Settings, *, beat: bool = False) -> FastAPI:
    """The API over the store `settings` names. The engine and the group committer are made here and
    closed at shutdown. With `beat` (the `api` command's processes), the app records a heartbeat while it
    serves, so `status` and the dashboard count it. `UnsafeSecret` when AUTH_SECRET is one anybody could
    sign tokens with."""
    check_secret(settings)
    load_kinds(settings.outbox_bridge_kinds)
    tracing.configure("api")
    engine = _make_engine(settings)
    committer = GroupCommitter(engine)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        heartbeat = Heartbeat(engine, settings, "api").start() if beat else None
        yield
        if heartbeat is not None:
            heartbeat.stop()
        committer.close()
        engine.dispose()

    app = FastAPI(
        title="outbox-bridge",
        version=version.installed(),
        description=DESCRIPTION,
        lifespan=lifespan,
        redirect_slashes=False,
        # Served by api.docs from local files instead: FastAPI's own pages load their scripts from a CDN.
        docs_url=None,
        redoc_url=None,
        # A job's trace is its accept, publishes and runs (`telemetry.tracing`), not the HTTP exchange; and
        # left on, FastAPI asks OpenTelemetry's global providers on every request whether it should trace.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.committer = committer
    app.state.links = LinkSigner.of(settings)
    app.state.metrics = Metrics(store_reader(engine, settings))
    problems.install(app)
    # The routes themselves, not the routers: each `APIRouter` already made its routes whole (prefix, tags,
    # responses), and FastAPI 0.165 matches an included router's routes through a layer of its own on every
    # request (py-spy put the routing at about a tenth of a submission's event-loop time that way).
    app.router.routes.extend(jobs.router.routes)
    app.router.routes.extend(batches.router.routes)
    app.router.routes.extend(probes.router.routes)
    _include_dashboard(app)
    openapi.install(app, accepted_kinds=accepted(settings))
    docs.install(app)
    # The body's limits, the answers' headers and their count: every answer gets the headers and is counted,
    # the 413s included (but for an unexpected error's, which the handler outside it gives; see problems).
    app.add_middleware(
        Edge,
        metrics=app.state.metrics,
        max_bytes=settings.max_body_bytes,
        read_seconds=settings.http_body_timeout_seconds,
    )
    if settings.access_log:  # outermost of the app's own: it times and sees every answer
        app.add_middleware(AccessLog)
    return app


def create_app_from_env() -> FastAPI:
    """The app for settings read from the environment (uvicorn's factory with `--workers N`): each worker
    process records its own heartbeat, and logs as its parent does."""
    settings = load()
    logs.configure("api", settings.log_format, job_events=settings.log_job_events)
    if settings.stats_dir is not None:  # each worker's own counters, beside its parent's (the benchmark's)
        db.start_stats_writer(settings.stats_dir, "api")
    return create_app(settings, beat=True)


def _make_engine(settings: Settings) -> Engine:
    return db.make_engine(
        settings,
        "api",
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW,
        pool_timeout=settings.store_lock_timeout_seconds,
    )


def _include_dashboard(app: FastAPI) -> None:
    """Mount the operator dashboard when its module is there; the API serves without it."""
    try:
        dashboard = importlib.import_module("outbox_bridge.api.dashboard")
    except ModuleNotFoundError as exc:
        if exc.name != "outbox_bridge.api.dashboard":
            log.error("the dashboard is not served: %s", exc)
        return
    app.include_router(dashboard.router)
