"""Prometheus metrics for the API process, on `prometheus_client`.

Each app has a registry of its own: its counters (requests by route template and status, jobs accepted by
kind), the process-wide instruments (`telemetry.instruments`: the store's write transaction seconds among
them), this process's store client counters, and the store's figures (jobs by state, the outbox, the oldest
due queued job, the live processes by role) read at scrape time; a store that does not answer fails the
scrape with `503`. With `--workers N` each worker process counts its own requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.overview import store_figures
from outbox_bridge.telemetry import instruments
from outbox_bridge.telemetry.exposition import (
    CONTENT_TYPE,
    StoreClientCollector,
    StoreCollector,
    StoreFigures,
    render,
)

__all__ = ["CONTENT_TYPE", "KNOWN_METHODS", "UNMATCHED", "Metrics", "store_reader"]

UNMATCHED = "unmatched"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    """One app's registry. `read_store()` gives the store's figures at each scrape."""

    def __init__(self, read_store: Callable[[], StoreFigures]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "outbox_bridge_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self._accepted = Counter(
            "outbox_bridge_jobs_accepted",
            "Jobs created by this process (idempotent repeats not counted), by kind.",
            ["kind"],
            registry=self.registry,
        )
        # Each label set's child, looked up once: `labels()` takes a lock and builds a key every time.
        self._request_counters: dict[tuple[str, str, int], Any] = {}
        self._accepted_counters: dict[str, Any] = {}
        instruments.register(self.registry, "api")
        self.registry.register(StoreClientCollector(db.stats.snapshot))
        self.registry.register(StoreCollector(read_store, strict=True))

    def request_done(self, method: str, route: str, status: int) -> None:
        key = (method, route, status)
        counter = self._request_counters.get(key)
        if counter is None:  # the label sets are bounded: known methods, route templates, statuses
            counter = self._request_counters[key] = self._requests.labels(method, route, str(status))
        counter.inc()

    def job_accepted(self, kind: str) -> None:
        counter = self._accepted_counters.get(kind)
        if counter is None:
            counter = self._accepted_counters[kind] = self._accepted.labels(kind)
        counter.inc()

    def render(self) -> bytes:
        return render(self.registry)


def store_reader(engine: Engine, settings: Settings) -> Callable[[], StoreFigures]:
    """Reads the store's figures for a scrape, in one read transaction."""
    return lambda: db.read(engine, store_figures, clock.now(), settings.alive_within_seconds)
