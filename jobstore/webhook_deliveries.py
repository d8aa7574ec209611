"""The relay's side of completion webhooks in the store: which deliveries are due, what becomes of one after
an attempt, and how long the oldest pending one of each endpoint has waited.

Only the holder of the relay role sends, from reads: nothing is leased, so a relay killed during a request
leaves its delivery pending and due, and whoever holds the role next sends it again (at least once). An
attempt's outcome is one UPDATE guarded by the delivery still being pending with the attempt count the
sender read; it and the attempt's log row are written together, or neither is (another writer got there
first: a replay, a removal, or a relay that took the role over).
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import Connection

from outbox_bridge.core.backoff import Backoff, Jitter
from outbox_bridge.jobstore import db, drivers
from outbox_bridge.jobstore.webhooks import DeliveryState, Endpoint, WebhookDelivery

# What a failed attempt's log keeps of the error, at most.
MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class RetryPolicy:
    """How a delivery is retried: after its `attempts`-th failed attempt it waits `backoff.seconds(attempts)`
    (the webhooks' own base and cap, with `Jitter.FULL` so retries of many deliveries spread out), for
    `retry_seconds` from its creation (or replay)."""

    backoff: Backoff
    retry_seconds: float

    @classmethod
    def of(
        cls, base: float, cap: float, retry_seconds: float, rng: random.Random | None = None
    ) -> RetryPolicy:
        """Full-jitter backoff from `base` doubling to `cap`, retried for `retry_seconds`."""
        return cls(Backoff(base, cap, rng, Jitter.FULL), retry_seconds)


@dataclass(frozen=True)
class Attempted:
    """What one attempt at a delivery got: a status code (None: no answer), why it did not deliver (None:
    it did, the whole answer in time), and how long it took."""

    at: float
    status_code: int | None
    latency_ms: float
    error: str | None = None

    @property
    def delivered(self) -> bool:
        """A 2xx whose whole answer arrived in time."""
        return self.error is None and self.status_code is not None and 200 <= self.status_code < 300


@dataclass(frozen=True)
class RetryDecision:
    """What follows an attempt at a delivery (`decide`): the state it is left in, and when it is attempted
    next while pending."""

    state: DeliveryState
    next_attempt_at: float


def decide(delivery: WebhookDelivery, attempted: Attempted, policy: RetryPolicy, now: float) -> RetryDecision:
    """Delivered on a 2xx; otherwise pending again after the backoff, or failed once its retry window
    (`policy.retry_seconds` from `delivery.retrying_since`) is over. The last retry is never scheduled past
    the window's end."""
    if attempted.delivered:
        return RetryDecision(DeliveryState.DELIVERED, delivery.next_attempt_at)
    ends = delivery.retrying_since + policy.retry_seconds
    if now >= ends:
        return RetryDecision(DeliveryState.FAILED, delivery.next_attempt_at)
    retry_at = now + policy.backoff.seconds(delivery.attempts + 1)
    return RetryDecision(DeliveryState.PENDING, min(ends, retry_at))


@dataclass(frozen=True)
class Shares:
    """How many requests may be open at once: to one endpoint, for one tenant."""

    per_endpoint: int
    per_tenant: int


def due(
    conn: Connection,
    now: float,
    *,
    limit: int,
    shares: Shares,
    skip_endpoints: Collection[str] = (),
    skip_tenants: Collection[str] = (),
    skip_ids: Collection[str] = (),
) -> list[WebhookDelivery]:
    """Up to `limit` pending deliveries due at `now`, in turns: each tenant's first, then each tenant's
    second, and so on, where a tenant's deliveries take turns across its endpoints (each endpoint's longest
    due first, then each one's second). At most `shares.per_endpoint` of one endpoint and
    `shares.per_tenant` of one tenant are read. Those of `skip_endpoints` and `skip_tenants` (at their share
    of requests in flight) and `skip_ids` (in flight) are left out."""
    driver = drivers.of(conn)
    params = {
        "now": now,
        "limit": limit,
        "per_endpoint": shares.per_endpoint,
        "per_tenant": shares.per_tenant,
        "skip_endpoints": driver.array(list(skip_endpoints)),
        "skip_tenants": driver.array(list(skip_tenants)),
        "skip_ids": driver.array(list(skip_ids)),
    }
    return [WebhookDelivery.from_row(row) for row in db.execute(conn, "webhook_deliveries_due", params)]


def endpoints_of(conn: Connection, endpoint_ids: Collection[str]) -> dict[str, Endpoint]:
    """The endpoints among `endpoint_ids` that still exist, by id."""
    rows = db.execute(conn, "webhook_endpoints_of", {"ids": drivers.of(conn).array(list(endpoint_ids))})
    return {row[0]: Endpoint.from_row(row) for row in rows}


def record_attempt(
    conn: Connection, delivery: WebhookDelivery, attempted: Attempted, decision: RetryDecision
) -> bool:
    """Write what the attempt at `delivery` got and the decision it led to, with the attempt's log row,
    guarded by the delivery being pending with the attempt count read with it. False (nothing written)
    when another writer changed it meanwhile."""
    number = delivery.attempts + 1
    delivered = decision.state is DeliveryState.DELIVERED
    error = None if attempted.error is None else attempted.error[:MAX_ERROR_CHARS]
    outcome = {"id": delivery.id, "attempt": number, "status_code": attempted.status_code, "error": error}
    moved = db.execute(
        conn,
        "webhook_delivery_attempted",
        outcome
        | {
            "attempts_read": delivery.attempts,
            "state": decision.state.value,
            "next_attempt_at": decision.next_attempt_at,
            "delivered_at": attempted.at if delivered else None,
        },
    )
    if not moved:
        return False
    logged = {"at": attempted.at, "latency_ms": attempted.latency_ms}
    db.execute(conn, "webhook_attempt_add", outcome | logged)
    return True


def pending_ages(conn: Connection, now: float) -> dict[str, float]:
    """For each endpoint with pending deliveries, how long its oldest one has waited (since it was written
    or replayed), in seconds."""
    rows = db.execute(conn, "webhook_pending_ages")
    return {endpoint_id: max(0.0, now - float(oldest)) for endpoint_id, oldest in rows}
