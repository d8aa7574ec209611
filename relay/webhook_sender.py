"""The relay's completion webhook sender: while this relay holds the relay role, due deliveries are read from
the store and sent on a pool of `WEBHOOK_SENDERS` threads sharing one pool of kept connections.

The promises:
- only the role holder sends, and it reads rather than leases: a delivery stays pending until an attempt's
  outcome is written, so one interrupted by a kill is sent again by whoever holds the role next;
- the threads are shared by turns: at most `WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT` requests are open to one
  endpoint and at most `WEBHOOK_TENANT_SHARE` of the threads serve one tenant, and due deliveries are handed
  out across tenants by turns (and within a tenant across its endpoints), not by age alone. The tenant's
  share holds even while no other tenant has work: a request in flight cannot be taken back, so a tenant
  whose endpoints hang always leaves threads free for the next tenant's deliveries;
- unless `WEBHOOK_ALLOW_PRIVATE` is set, every connection goes to a public address only
  (`webhook_deadline`): a refused one is a failed attempt, retried like any other (the name may resolve
  elsewhere later);
- every attempt is logged (`webhook_attempts`) with its outcome, and the delivery is delivered on a 2xx,
  pending again after a full-jitter backoff otherwise, failed once `WEBHOOK_RETRY_SECONDS` have passed;
- `stop` takes no new work and waits (bounded) for requests in flight; what it does not wait for stays
  pending.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from outbox_bridge.api.links import LinkSigner
from outbox_bridge.api.schemas import view_fields
from outbox_bridge.core import clock
from outbox_bridge.core.sealing import SealBroken, Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore import webhook_deliveries as store
from outbox_bridge.jobstore.webhook_deliveries import Attempted, RetryPolicy, Shares
from outbox_bridge.jobstore.webhooks import DeliveryState, Endpoint, WebhookDelivery
from outbox_bridge.relay import webhook_request
from outbox_bridge.telemetry import instruments

if TYPE_CHECKING:
    import httpcore

log = logging.getLogger("relay.webhooks")

STOP_WAIT_SECONDS = 5.0
UNSEALABLE = (
    "the endpoint's signing secret does not open under this AUTH_SECRET (it changed since the secret was "
    "made): rotate it with `outbox-bridge webhooks rotate {id}` and give the receiver the new one"
)
_OUTCOMES = {
    DeliveryState.DELIVERED: instruments.WEBHOOK_DELIVERED,
    DeliveryState.PENDING: instruments.WEBHOOK_RETRY,
    DeliveryState.FAILED: instruments.WEBHOOK_FAILED,
}


@dataclass(frozen=True)
class _Send:
    delivery: WebhookDelivery
    endpoint: Endpoint


class WebhookSender:
    """One of the relay's services (`relay.services`): construct, `start()`, and `stop()` when the relay
    stops. `holds_role()` says whether this relay is the leader and may send now; it is asked before each
    read and before each request."""

    def __init__(self, settings: Settings, engine: Engine, holds_role: Callable[[], bool]) -> None:
        self.settings = settings
        self.engine = engine
        self._holds_role = holds_role
        self._policy = RetryPolicy.of(
            settings.webhook_backoff_base_seconds,
            settings.webhook_backoff_max_seconds,
            settings.webhook_retry_seconds,
        )
        self._sealer = Sealer.of(settings.auth_secret)
        self._links = LinkSigner.of(settings)
        self._client: httpcore.ConnectionPool | None = None  # made at the first request
        self._work: queue.SimpleQueue[_Send | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._in_flight: dict[str, str] = {}  # delivery id -> endpoint id
        self._per_endpoint: Counter[str] = Counter()
        self._per_tenant: Counter[str] = Counter()
        self._shares = Shares(
            per_endpoint=settings.webhook_max_in_flight_per_endpoint,
            per_tenant=max(1, int(settings.webhook_senders * settings.webhook_tenant_share)),
        )
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._failures = 0  # store reads that failed in a row

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._dispatch, name="webhook-dispatch", daemon=True)]
        self._threads += [
            threading.Thread(target=self._send_loop, name=f"webhook-sender-{n}", daemon=True)
            for n in range(self.settings.webhook_senders)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, wait: float = STOP_WAIT_SECONDS) -> None:
        """Take no more deliveries; wait up to `wait` seconds for requests in flight, then close the
        client."""
        self._stopping.set()
        self._wake.set()
        for _ in range(self.settings.webhook_senders):
            self._work.put(None)
        deadline = time.monotonic() + wait
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._client is not None and not any(thread.is_alive() for thread in self._threads):
            self._client.close()

    # -- choosing what to send -------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while not self._stopping.is_set():
            again = False
            if self._holds_role():
                try:
                    again = self._dispatch_once()
                    self._failures = 0
                except Exception as exc:
                    self._failures += 1
                    if self._failures <= 3 or self._failures % 10 == 0:
                        log.warning(
                            "webhooks: reading due deliveries failed (%d in a row): %s", self._failures, exc
                        )
            if not again:
                self._wake.wait(self.settings.webhook_poll_seconds)
                self._wake.clear()

    def _dispatch_once(self) -> bool:
        """Hand due deliveries to free threads by turns, none to an endpoint or a tenant at its share. True
        when there may be more to hand out at once (a read was cut short while threads are free)."""
        shares = self._shares
        with self._lock:
            free = self.settings.webhook_senders - len(self._in_flight)
            full_endpoints = {e for e, n in self._per_endpoint.items() if n >= shares.per_endpoint}
            full_tenants = {t for t, n in self._per_tenant.items() if n >= shares.per_tenant}
            busy = set(self._in_flight)
        if free <= 0:
            return False
        # Rows of endpoints and tenants with requests in flight may be passed over below: read that many more.
        limit = free + 2 * len(busy)
        found = db.read(
            self.engine,
            store.due,
            clock.now(),
            limit=limit,
            shares=shares,
            skip_endpoints=full_endpoints,
            skip_tenants=full_tenants,
            skip_ids=busy,
        )
        if not found:
            return False
        endpoints = db.read(self.engine, store.endpoints_of, {d.endpoint_id for d in found})
        for delivery in found:
            endpoint = endpoints.get(delivery.endpoint_id)
            if endpoint is None:  # removed meanwhile, with its deliveries
                continue
            if not self._take(delivery, endpoint):
                continue
            self._work.put(_Send(delivery, endpoint))
        with self._lock:
            return len(found) == limit and len(self._in_flight) < self.settings.webhook_senders

    def _take(self, delivery: WebhookDelivery, endpoint: Endpoint) -> bool:
        """Count `delivery` in flight, unless every thread is taken or its endpoint or tenant is at its
        share."""
        with self._lock:
            if (
                len(self._in_flight) >= self.settings.webhook_senders
                or self._per_endpoint[endpoint.id] >= self._shares.per_endpoint
                or self._per_tenant[delivery.tenant] >= self._shares.per_tenant
            ):
                return False
            self._in_flight[delivery.id] = endpoint.id
            self._per_endpoint[endpoint.id] += 1
            self._per_tenant[delivery.tenant] += 1
            return True

    # -- sending ---------------------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        while True:
            send = self._work.get()
            if send is None:
                return
            try:
                if not self._stopping.is_set() and self._holds_role():
                    self._deliver(send.delivery, send.endpoint)
            except Exception:
                log.exception(
                    "webhooks: delivery %s to %s failed unexpectedly", send.delivery.id, send.endpoint.url
                )
            finally:
                self._release(send)

    def _release(self, send: _Send) -> None:
        with self._lock:
            self._in_flight.pop(send.delivery.id, None)
            self._per_endpoint[send.endpoint.id] -= 1
            if self._per_endpoint[send.endpoint.id] <= 0:
                del self._per_endpoint[send.endpoint.id]
            self._per_tenant[send.delivery.tenant] -= 1
            if self._per_tenant[send.delivery.tenant] <= 0:
                del self._per_tenant[send.delivery.tenant]
        self._wake.set()

    def _deliver(self, delivery: WebhookDelivery, endpoint: Endpoint) -> None:
        """One attempt at `delivery`, its outcome written back."""
        job = db.read(self.engine, queries.get_job, delivery.job_id)
        if job is None:  # deleted since (its deliveries go with it)
            return
        now = clock.now()
        try:
            keys = [self._sealer.open(sealed) for sealed in endpoint.sealed_secrets(now)]
        except SealBroken:
            message = UNSEALABLE.format(id=endpoint.id)
            log.error("webhooks: delivery %s not sent: %s", delivery.id, message)
            attempted = Attempted(at=now, status_code=None, latency_ms=0.0, error=message)
        else:
            body = webhook_request.cloud_event(delivery, view_fields(job, now, self._links))
            sent_headers = webhook_request.headers(delivery.id, int(now), body, keys)
            timeout = self.settings.webhook_timeout_seconds
            attempted = webhook_request.post(self._http(), endpoint.url, body, sent_headers, timeout)
            instruments.WEBHOOK_SECONDS.observe(attempted.latency_ms / 1000.0)
        decision = store.decide(delivery, attempted, self._policy, clock.now())
        if db.transact(self.engine, store.record_attempt, delivery, attempted, decision):
            instruments.WEBHOOK_ATTEMPTS.labels(_OUTCOMES[decision.state]).inc()
            self._log(delivery, endpoint, attempted, decision.state)

    def _http(self) -> httpcore.ConnectionPool:
        with self._lock:
            if self._client is None:
                self._client = webhook_request.new_client(
                    self.settings.webhook_senders, allow_private=self.settings.webhook_allow_private
                )
            return self._client

    def _log(
        self, delivery: WebhookDelivery, endpoint: Endpoint, attempted: Attempted, state: DeliveryState
    ) -> None:
        if state is DeliveryState.FAILED:
            log.warning(
                "webhooks: delivery %s to endpoint %s failed for good after %d attempts: %s",
                delivery.id,
                endpoint.id,
                delivery.attempts + 1,
                attempted.error,
            )
        elif state is DeliveryState.PENDING:
            log.info(
                "webhooks: delivery %s to endpoint %s: %s; retrying",
                delivery.id,
                endpoint.id,
                attempted.error,
            )
