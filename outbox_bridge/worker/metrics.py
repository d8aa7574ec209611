"""`/metrics` for a relay, consumer or worker process, on `METRICS_PORT` (off unless set): the instruments of
its role (`telemetry.instruments`), its store client counters, and the store's figures read at each scrape
(jobs by state, the oldest due queued job, the outbox, who is alive). A relay adds the dead-letter queue's
depth and its webhooks' oldest pending delivery per endpoint. A store or broker that does not answer leaves
its figures out of that scrape; a port that cannot be bound is logged and the process runs on without
metrics."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from outbox_bridge.broker.connection import queue_depth
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, webhook_deliveries
from outbox_bridge.jobstore.overview import store_figures
from outbox_bridge.telemetry import exposition, instruments
from outbox_bridge.telemetry.exposition import (
    PendingWebhooksCollector,
    StoreClientCollector,
    StoreCollector,
    StoreFigures,
)

# A scrape waits at most this long for the broker to say how deep the dead-letter queue is.
DEAD_LETTER_TIMEOUT_SECONDS = 1.0


def registry_for(
    engine: Engine,
    settings: Settings,
    role: str,
    *,
    in_flight: Callable[[], int] | None = None,
    dead_letters: bool = False,
) -> CollectorRegistry:
    """The registry a process of `role` serves. `in_flight()` says how many jobs it holds (consumers and
    workers); `dead_letters` adds the dead-letter queue's depth (relays)."""
    registry = instruments.register(CollectorRegistry(), role)
    registry.register(StoreClientCollector(db.stats.snapshot))
    depth = partial(queue_depth, settings, settings.dead_letter_queue, DEAD_LETTER_TIMEOUT_SECONDS)
    registry.register(StoreCollector(_reader(engine, settings), depth if dead_letters else None))
    if role == "relay":
        registry.register(
            PendingWebhooksCollector(lambda: db.read(engine, webhook_deliveries.pending_ages, clock.now()))
        )
    if in_flight is not None:
        instruments.IN_FLIGHT.set_function(in_flight)
    return registry


def serve_metrics(
    engine: Engine,
    settings: Settings,
    role: str,
    *,
    in_flight: Callable[[], int] | None = None,
    dead_letters: bool = False,
) -> bool:
    """Serve this process's `/metrics` when `METRICS_PORT` is set; True when it is served."""
    if settings.metrics_port is None:
        return False
    registry = registry_for(engine, settings, role, in_flight=in_flight, dead_letters=dead_letters)
    return exposition.serve(registry, settings.metrics_port, settings.metrics_host)


def _reader(engine: Engine, settings: Settings) -> Callable[[], StoreFigures]:
    return lambda: db.read(engine, store_figures, clock.now(), settings.alive_within_seconds)
