"""Serving a registry: the text format, the store's figures as gauges read at scrape time, the store
client's counters, and the small HTTP server a relay, consumer or worker runs on `METRICS_PORT`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# The text format every Prometheus server reads (what the api has always answered with).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class ScheduleFigures:
    """One schedule that is not paused: its next slot, and how long that slot has been due without a job
    (0 when it is not due yet)."""

    tenant: str
    name: str
    next_slot_at: float
    due_age_seconds: float


@dataclass(frozen=True)
class QueueFigures:
    """One named queue: its due queued jobs (`waiting`, but for those of a paused kind, which wait on
    purpose), its running jobs, and how long the oldest waiting one has been due (0 when none waits)."""

    name: str
    waiting: int
    running: int
    oldest_seconds: float


@dataclass(frozen=True)
class StoreFigures:
    """The store as a scrape sees it: jobs by state, the oldest due queued job, the outbox, who is alive,
    the schedules that are not paused, the paused kinds (each with when it was paused), the jobs flow
    limits hold back, the named queues, and the batches by state (`running`, `done`)."""

    jobs_by_state: Mapping[str, int]
    queued_oldest_age_seconds: float
    outbox_pending: int
    outbox_oldest_age_seconds: float
    alive: Mapping[str, int]
    schedules: Sequence[ScheduleFigures] = ()
    paused_kinds: Mapping[str, float] = field(default_factory=dict)
    held: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (kind, limit) -> queued jobs held
    queues: Sequence[QueueFigures] = ()
    batches: Mapping[str, int] = field(default_factory=dict)  # state -> batches


class StoreCollector(Collector):
    """The store's figures as gauges, read by `read()` at every scrape, and the dead-letter queue's depth
    from `dead_letters()` when given (left out when it returns None: the broker did not answer). When
    `strict`, a failing read fails the scrape (the api answers 503); otherwise it is logged and the store's
    gauges are left out of that scrape, so a worker's metrics stay up while its store is not."""

    def __init__(
        self,
        read: Callable[[], StoreFigures],
        dead_letters: Callable[[], int | None] | None = None,
        *,
        strict: bool = False,
    ) -> None:
        self._read = read
        self._dead_letters = dead_letters
        self._strict = strict

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # read at scrape time only: registering must not touch the store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            figures = self._read()
        except Exception as exc:
            if self._strict:
                raise
            log.warning("metrics: the store's figures left out of this scrape: %s", exc)
        else:
            yield from store_families(figures)
        depth = self._dead_letters() if self._dead_letters is not None else None
        if depth is not None:
            yield GaugeMetricFamily(
                "outbox_bridge_dead_letter_messages",
                "Messages waiting in the dead-letter queue.",
                value=depth,
            )


def store_families(figures: StoreFigures) -> Iterator[GaugeMetricFamily]:
    jobs = GaugeMetricFamily("outbox_bridge_jobs", "Jobs in the store, by state.", labels=["state"])
    for state, n in sorted(figures.jobs_by_state.items()):
        jobs.add_metric([state], n)
    yield jobs
    yield GaugeMetricFamily(
        "outbox_bridge_queued_oldest_age_seconds",
        "How long the oldest due, queued job has waited to start (0 when none waits).",
        value=figures.queued_oldest_age_seconds,
    )
    yield GaugeMetricFamily(
        "outbox_bridge_outbox_pending", "Outbox rows due and not yet published.", value=figures.outbox_pending
    )
    yield GaugeMetricFamily(
        "outbox_bridge_outbox_oldest_age_seconds",
        "How long the oldest due, unpublished outbox row has waited.",
        value=figures.outbox_oldest_age_seconds,
    )
    alive = GaugeMetricFamily(
        "outbox_bridge_processes_alive", "Processes whose heartbeat is fresh, by role.", labels=["role"]
    )
    for role, n in figures.alive.items():
        alive.add_metric([role], n)
    yield alive
    yield from _queue_families(figures.queues)
    yield from _schedule_families(figures)
    batches = GaugeMetricFamily(
        "outbox_bridge_batches",
        "Batches in the store, by state: running (a member has not ended yet) or done (every member has).",
        labels=["state"],
    )
    for state, n in sorted(figures.batches.items()):
        batches.add_metric([state], n)
    yield batches


def _queue_families(queues: Sequence[QueueFigures]) -> Iterator[GaugeMetricFamily]:
    """Labelled by queue: its name comes from a kind's code, not from a request."""
    waiting = GaugeMetricFamily(
        "outbox_bridge_queue_waiting",
        "Queued jobs due to start, by queue (a paused kind's left out); `default` is always listed.",
        labels=["queue"],
    )
    running = GaugeMetricFamily("outbox_bridge_queue_running", "Running jobs, by queue.", labels=["queue"])
    oldest = GaugeMetricFamily(
        "outbox_bridge_queue_oldest_seconds",
        "How long the oldest due, queued job of each queue has waited to start (0 when none waits).",
        labels=["queue"],
    )
    for queue in queues:
        waiting.add_metric([queue.name], queue.waiting)
        running.add_metric([queue.name], queue.running)
        oldest.add_metric([queue.name], queue.oldest_seconds)
    yield waiting
    yield running
    yield oldest


def _schedule_families(figures: StoreFigures) -> Iterator[GaugeMetricFamily]:
    """Schedules are labelled by tenant and name: they are few, and each one an operator added. A kind is
    allowlisted."""
    labels = ["tenant", "schedule"]
    next_slot = GaugeMetricFamily(
        "outbox_bridge_schedule_next_slot_timestamp_seconds",
        "When each schedule that is not paused next makes a job (Unix seconds).",
        labels=labels,
    )
    due_age = GaugeMetricFamily(
        "outbox_bridge_schedule_due_age_seconds",
        "How long each schedule's next slot has been due without its job being made (0 until it is due): "
        "above a few seconds, no relay holds the relay role.",
        labels=labels,
    )
    for s in figures.schedules:
        next_slot.add_metric([s.tenant, s.name], s.next_slot_at)
        due_age.add_metric([s.tenant, s.name], s.due_age_seconds)
    yield next_slot
    yield due_age
    paused = GaugeMetricFamily(
        "outbox_bridge_kind_paused_since_timestamp_seconds",
        "When each paused kind was paused (Unix seconds); a kind that is not paused is not listed.",
        labels=["kind"],
    )
    for kind, since in sorted(figures.paused_kinds.items()):
        paused.add_metric([kind], since)
    yield paused
    held = GaugeMetricFamily(
        "outbox_bridge_jobs_held",
        "Queued jobs a flow limit holds back, by kind and limit (kind: KIND_MAX_RUNNING, key: "
        "CONCURRENCY_KEY_MAX_RUNNING, rate: KIND_RATE_LIMITS); a kind with none held is not listed.",
        labels=["kind", "limit"],
    )
    for (kind, limit), count in sorted(figures.held.items()):
        held.add_metric([kind, limit], count)
    yield held


class PendingWebhooksCollector(Collector):
    """How long each endpoint's oldest pending webhook delivery has waited, from `read()` (endpoint id ->
    seconds) at every scrape; left out of a scrape (logged) when the store does not answer. Labelled by
    endpoint id only: endpoints are few, and registered by an operator."""

    def __init__(self, read: Callable[[], Mapping[str, float]]) -> None:
        self._read = read

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # read at scrape time only: registering must not touch the store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            ages = self._read()
        except Exception as exc:
            log.warning("metrics: the pending webhooks left out of this scrape: %s", exc)
            return
        gauge = GaugeMetricFamily(
            "outbox_bridge_webhook_oldest_pending_age_seconds",
            "How long the oldest pending completion webhook delivery of each endpoint has waited since it "
            "was written (or replayed); an endpoint with none pending is not listed.",
            labels=["endpoint"],
        )
        for endpoint_id, age in sorted(ages.items()):
            gauge.add_metric([endpoint_id], age)
        yield gauge


class StoreClientCollector(Collector):
    """This process's store client counters (`snapshot()`: write and read transactions, retries)."""

    NAMES = ("write_transactions", "read_transactions", "retries")

    def __init__(self, snapshot: Callable[[], Mapping[str, float]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self._snapshot()
        for name in self.NAMES:
            if name in counts:
                yield CounterMetricFamily(
                    f"outbox_bridge_store_{name}",
                    f"Store {name.replace('_', ' ')} made by this process.",
                    value=counts[name],
                )


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the text format (`CONTENT_TYPE`)."""
    return generate_latest(registry)


def serve(registry: CollectorRegistry, port: int, host: str) -> bool:
    """Serve `registry` at `http://host:port/metrics` from a daemon thread; False (logged) when the port
    cannot be bound: metrics are never a reason for a worker to stop."""
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("metrics: cannot serve on %s:%d: %s; running without /metrics", host, port, exc)
        return False
    log.info("metrics on http://%s:%d/metrics", host, port)
    return True
