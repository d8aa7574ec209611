"""The process-wide instruments, one of each, created unregistered: a process registers them into the
registry it serves (`register`), so the api's per-app registry and a worker's `METRICS_PORT` registry
report the same objects. Label sets are bounded: a job's kind (allowlisted) and queue (named in a kind's
code), a delivery's or a job's outcome (the names below), never a job id or a tenant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# A `_created` sample beside every counter and histogram doubles the series for nothing an alert uses.
disable_created_metrics()

# Seconds, from a few milliseconds to a few minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

# What became of a delivery a consumer took: the only values `DELIVERIES` is labelled with.
RAN = "ran"
LEASED_ELSEWHERE = "leased_elsewhere"
ALREADY_FINISHED = "already_finished"
NOT_FOUND = "not_found"
NOT_DUE = "not_due"
NEEDS_SWEEP = "needs_sweep"
TENANT_BUSY = "tenant_busy"  # its tenant ran TENANT_MAX_RUNNING jobs: delivered again later
KIND_PAUSED = "kind_paused"  # its kind is paused: announced again when it is resumed
HELD = "held"  # a flow limit held it back: announced again when it has room
OTHER_QUEUE = "other_queue"  # of a named queue the consumer does not run: announced again for its own
DEAD_LETTERED = "dead_lettered"
DELIVERY_OUTCOMES = (
    RAN, LEASED_ELSEWHERE, ALREADY_FINISHED, NOT_FOUND, NOT_DUE, NEEDS_SWEEP, TENANT_BUSY, KIND_PAUSED, HELD,
    OTHER_QUEUE, DEAD_LETTERED,
)  # fmt: skip

ACCEPT_TO_START = Histogram(
    "outbox_bridge_job_accept_to_start_seconds",
    "From a job's acceptance to the start of its first attempt (a delayed job's delay included), by kind.",
    ["kind"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
RUN_SECONDS = Histogram(
    "outbox_bridge_job_run_seconds",
    "How long an attempt's kind ran, by kind (whatever its outcome).",
    ["kind"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
PUBLISH_TO_CONFIRM = Histogram(
    "outbox_bridge_relay_confirm_seconds",
    "From a relay's publish of an outbox row to the broker's confirm of it.",
    buckets=STORE_BUCKETS,
    registry=None,
)
STORE_WRITE_SECONDS = Histogram(
    "outbox_bridge_store_write_seconds",
    "A write transaction, from the head of the writer queue (or first try) to its end: the time it held "
    "other writers.",
    buckets=STORE_BUCKETS,
    registry=None,
)
DELIVERIES = Counter(
    "outbox_bridge_deliveries",
    "Deliveries a consumer settled, by what became of them.",
    ["outcome"],
    registry=None,
)
FENCED_WRITES = Counter(
    "outbox_bridge_fenced_writes",
    "Attempt outcomes the fence refused (a newer epoch or an expired lease): nothing was written for them.",
    registry=None,
)
BROKER_RECONNECTS = Counter(
    "outbox_bridge_broker_reconnects",
    "Times this process's broker connection was lost or could not be opened, and tried again.",
    registry=None,
)
# The states an attempt's end (or its expired lease) can leave a job in that `JOBS_FINISHED` counts: the
# terminal states (`jobstore.states.TERMINAL`). A job queued again for another attempt is a retry
# (`JOB_RETRIES`).
FINISHED_OUTCOMES = ("succeeded", "failed", "dead", "cancelled", "unknown")
RETRIED = "queued"
JOBS_FINISHED = Counter(
    "outbox_bridge_jobs_finished",
    "Jobs an attempt's commit (or the sweep of an expired lease or a passed deadline) moved to a terminal "
    "state, by kind, queue and that state.",
    ["kind", "queue", "outcome"],
    registry=None,
)
JOB_RETRIES = Counter(
    "outbox_bridge_job_retries",
    "Attempts that ended with their job queued again for another attempt after a backoff (a failure within "
    "its attempt budget, or an expired lease), by kind and queue.",
    ["kind", "queue"],
    registry=None,
)
IN_FLIGHT = Gauge(
    "outbox_bridge_jobs_in_flight",
    "Jobs this process holds claimed now (running, or waiting for a thread or their commit).",
    registry=None,
)
# What became of an attempt at a completion webhook: the only values `WEBHOOK_ATTEMPTS` is labelled with.
WEBHOOK_DELIVERED = "delivered"
WEBHOOK_RETRY = "retry"
WEBHOOK_FAILED = "failed"
WEBHOOK_OUTCOMES = (WEBHOOK_DELIVERED, WEBHOOK_RETRY, WEBHOOK_FAILED)
WEBHOOK_ATTEMPTS = Counter(
    "outbox_bridge_webhook_attempts",
    "Attempts at completion webhook deliveries, by outcome: delivered (a 2xx), retry (due again after a "
    "backoff), failed (its retry window is over).",
    ["outcome"],
    registry=None,
)
WEBHOOK_SECONDS = Histogram(
    "outbox_bridge_webhook_request_seconds",
    "A completion webhook's request, from sending it to its answer (or to the error that ended it).",
    buckets=LATENCY_BUCKETS,
    registry=None,
)

# What each kind of process reports: an instrument a process never records into is left out of its
# registry, not shown as a zero.
_STORE = (STORE_WRITE_SECONDS,)
_ENDINGS = (JOBS_FINISHED, JOB_RETRIES)  # the relay's sweeper ends jobs too
_RUNNER = (ACCEPT_TO_START, RUN_SECONDS, FENCED_WRITES, IN_FLIGHT, *_ENDINGS)
BY_ROLE = {
    "api": _STORE,
    "relay": (*_STORE, *_ENDINGS, PUBLISH_TO_CONFIRM, BROKER_RECONNECTS, WEBHOOK_ATTEMPTS, WEBHOOK_SECONDS),
    "consumer": (*_STORE, *_RUNNER, DELIVERIES, BROKER_RECONNECTS),
    "worker": (*_STORE, *_RUNNER),
}

for _outcome in DELIVERY_OUTCOMES:  # every outcome is reported, 0 until it happens
    DELIVERIES.labels(_outcome)
for _outcome in WEBHOOK_OUTCOMES:
    WEBHOOK_ATTEMPTS.labels(_outcome)


# Each label set's child, looked up once: `labels()` takes a lock and builds a key every time. A race
# between two threads makes the same child twice, which `labels()` returns as one object.
_finished: dict[tuple[str, str, str], Any] = {}
_retries: dict[tuple[str, str], Any] = {}


def job_moved(kind: str, queue: str, state: str, count: int = 1) -> None:
    """Count `count` jobs of `kind` on `queue` that an attempt's end moved to `state`: a terminal state
    (`FINISHED_OUTCOMES`) in `JOBS_FINISHED`, `queued` (`RETRIED`: another attempt, after a backoff) in
    `JOB_RETRIES`. Any other state is not counted. Called once the move is committed."""
    if state in FINISHED_OUTCOMES:
        key = (kind, queue, state)
        child = _finished.get(key)
        if child is None:
            child = _finished[key] = JOBS_FINISHED.labels(kind, queue, state)
    elif state == RETRIED:
        child = _retries.get((kind, queue))
        if child is None:
            child = _retries[(kind, queue)] = JOB_RETRIES.labels(kind, queue)
    else:
        return
    child.inc(count)


def jobs_moved(moves: Mapping[tuple[str, str, str], int]) -> None:
    """`job_moved` of each (kind, queue, state) in `moves`, by its count (what a committed sweep moved)."""
    for (kind, queue, state), count in moves.items():
        job_moved(kind, queue, state, count)


def register(registry: CollectorRegistry, role: str) -> CollectorRegistry:
    """Register the instruments a process of `role` records into `registry` (one of several, maybe: the
    instruments stay shared)."""
    for instrument in BY_ROLE[role]:
        registry.register(instrument)
    return registry
