"""Completion webhooks in the store: the endpoints an operator registers per tenant, and what an operator
does to them and to their deliveries (add, remove, rotate a secret, replay a delivery), each recorded with
who did it in the same transaction (`webhook_actions`).

The deliveries themselves are written by the store: a trigger on `jobs` (migration 0014) inserts one pending
delivery per matching endpoint of the job's tenant in the transaction that moves the job into a terminal
state, so a transition that does not commit writes none. The relay's side (what is due, what an attempt
did) is `jobstore.webhook_deliveries`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection

from outbox_bridge.core import destinations
from outbox_bridge.core.durations import parse_duration
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.signatures import new_secret
from outbox_bridge.jobstore import db, drivers
from outbox_bridge.jobstore.states import TERMINAL, State

# Every event an endpoint may ask for, one per terminal state, in the order the states are listed.
EVENTS: tuple[str, ...] = tuple(f"job.{state.value}" for state in State if state in TERMINAL)
MAX_URL_CHARS = 2048
# How long a rotated-out secret keeps signing unless the operator says otherwise.
DEFAULT_GRACE = "24h"
NO_GRACE = ("0", "0s")


class DeliveryState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class Action(StrEnum):
    """What an operator did, as `webhook_actions.action` records it."""

    ADD = "add"
    REMOVE = "remove"
    ROTATE = "rotate"
    REPLAY = "replay"


class InvalidEndpoint(ValueError):
    """An endpoint that cannot be registered; the message says why, in one line."""


class EndpointNotFound(LookupError):
    def __init__(self, endpoint_id: str) -> None:
        super().__init__(f"no webhook endpoint {endpoint_id}")


class DeliveryNotFound(LookupError):
    def __init__(self, delivery_id: str) -> None:
        super().__init__(f"no webhook delivery {delivery_id}")


class NotReplayable(ValueError):
    def __init__(self, delivery_id: str) -> None:
        super().__init__(f"delivery {delivery_id} is still pending: it is sent again without a replay")


@dataclass(frozen=True)
class Endpoint:
    id: str
    tenant: str
    url: str
    events: tuple[str, ...]
    secret: str  # sealed (`core.sealing`)
    previous_secret: str | None
    previous_secret_until: float | None
    created_at: float
    created_by: str

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Endpoint:
        """The endpoint of a row read in the order of the fields (`webhook_endpoint` and the like), its
        events stored joined by commas."""
        fields = list(row)
        fields[3] = tuple(str(fields[3]).split(","))
        return cls(*fields)

    def sealed_secrets(self, now: float) -> tuple[str, ...]:
        """The sealed secrets that sign at `now`: the current one, and the previous one during a rotation's
        grace."""
        until = self.previous_secret_until
        rotating = self.previous_secret is not None and until is not None and now < until
        return (self.secret, self.previous_secret) if rotating and self.previous_secret else (self.secret,)


@dataclass(frozen=True)
class WebhookDelivery:
    """One event sent to one endpoint, and where its attempts stand (`webhook_deliveries`)."""

    id: str
    endpoint_id: str
    tenant: str
    job_id: str
    event: str
    occurred_at: float
    created_at: float
    state: DeliveryState
    attempts: int
    next_attempt_at: float
    last_status: int | None
    last_error: str | None
    delivered_at: float | None
    replayed_at: float | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> WebhookDelivery:
        """The delivery of a row read in the order of the fields (`webhook_delivery` and the like)."""
        fields = list(row)
        fields[7] = DeliveryState(fields[7])
        return cls(*fields)

    @property
    def retrying_since(self) -> float:
        """Where its retry window starts: its last replay, else its creation."""
        return self.created_at if self.replayed_at is None else self.replayed_at


@dataclass(frozen=True)
class DeliveryAttempt:
    delivery_id: str
    attempt: int
    at: float
    status_code: int | None
    latency_ms: float
    error: str | None


def check_url(url: str) -> str:
    """`url` when the relay may POST to it: an absolute `http` or `https` URL with a host, no user
    information and no fragment; `InvalidEndpoint` saying what is wrong otherwise."""
    if len(url) > MAX_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        raise InvalidEndpoint(f"--url must be one line of at most {MAX_URL_CHARS} characters, without spaces")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as exc:
        raise InvalidEndpoint(f"--url {url!r} is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise InvalidEndpoint(f"--url {url!r}: only http:// and https:// URLs can receive webhooks")
    if not parts.hostname:
        raise InvalidEndpoint(f"--url {url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidEndpoint(f"--url {url!r}: credentials in the URL are not accepted")
    if parts.fragment:
        raise InvalidEndpoint(f"--url {url!r}: a fragment is never sent; leave it out")
    return url


def check_target(url: str, *, allow_private: bool) -> str:
    """`url` when it may be registered: it passes `check_url`, the relay's HTTP client can send to it, and,
    unless `allow_private`, its host resolves only to public addresses (`core.destinations`: disguised
    forms such as `http://2130706433/` read as the resolver reads them); `InvalidEndpoint` with the
    one-line refusal otherwise. A name that resolves to nothing now is accepted: every delivery checks the
    address it connects to again."""
    import httpx

    check_url(url)
    try:
        host = httpx.URL(url).raw_host.decode("ascii")
        unsendable = None
    except httpx.InvalidURL as exc:
        host, unsendable = urlsplit(url).hostname or "", exc
    if not allow_private:
        try:
            destinations.checked(host, 443)
        except destinations.PrivateDestination as exc:
            raise InvalidEndpoint(str(exc)) from exc
        except (OSError, UnicodeError):
            pass
    if unsendable is not None:
        raise InvalidEndpoint(f"--url {url!r} cannot be sent to: {unsendable}")
    return url


def check_events(events: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The events, each once, in `EVENTS`' order (all of them when none is named); `InvalidEndpoint`
    naming the first unknown one."""
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise InvalidEndpoint(f"--event {unknown[0]!r} is not one of {', '.join(EVENTS)}")
    return tuple(e for e in EVENTS if e in events) if events else EVENTS


def grace_seconds(text: str) -> float:
    """The seconds of a rotation's grace `text` names (`core.durations`), 0 for `0` or `0s` (the previous
    secret stops signing at once); `ValueError` saying what is accepted otherwise."""
    return 0.0 if text.strip().lower() in NO_GRACE else float(parse_duration(text))


def add_endpoint(
    conn: Connection,
    sealer: Sealer,
    *,
    tenant: str,
    url: str,
    events: tuple[str, ...],
    now: float,
    actor: str,
) -> tuple[Endpoint, str]:
    """Register an endpoint for `tenant` (its URL and events checked: `InvalidEndpoint`), recorded, with a
    new signing secret stored sealed by `sealer`. Returns the endpoint and its secret (`whsec_...`), which
    only its owner keeps: show it once."""
    secret, sealed_secret = new_secret(sealer)
    endpoint = Endpoint(
        id=str(uuid.uuid4()),
        tenant=tenant,
        url=check_url(url),
        events=check_events(events),
        secret=sealed_secret,
        previous_secret=None,
        previous_secret_until=None,
        created_at=now,
        created_by=actor,
    )
    values = {"id": endpoint.id, "tenant": tenant, "url": endpoint.url, "events": ",".join(endpoint.events)}
    db.execute(conn, "webhook_endpoint_add", values | {"secret": sealed_secret, "now": now, "actor": actor})
    _record(conn, endpoint.id, Action.ADD, actor=actor, now=now)
    return endpoint, secret


def list_endpoints(conn: Connection, *, tenant: str | None = None) -> list[Endpoint]:
    """Every endpoint (or `tenant`'s), oldest first."""
    if tenant is None:
        rows = db.execute(conn, "webhook_endpoints_all")
    else:
        rows = db.execute(conn, "webhook_endpoints_of_tenant", {"tenant": tenant})
    return [Endpoint.from_row(row) for row in rows]


def get_endpoint(conn: Connection, endpoint_id: str) -> Endpoint | None:
    rows = db.execute(conn, "webhook_endpoint", {"id": endpoint_id})
    return Endpoint.from_row(rows[0]) if rows else None


def remove_endpoint(conn: Connection, endpoint_id: str, now: float, *, actor: str) -> Endpoint:
    """Remove the endpoint with its deliveries and their attempts (nothing more is sent to it), recorded;
    `EndpointNotFound` when there is none."""
    endpoint = get_endpoint(conn, endpoint_id)
    if endpoint is None:
        raise EndpointNotFound(endpoint_id)
    # Foreign keys cascade too; said here so no store setting decides it.
    for statement in (
        "webhook_endpoint_remove_attempts",
        "webhook_endpoint_remove_deliveries",
        "webhook_endpoint_remove",
    ):
        db.execute(conn, statement, {"id": endpoint_id})
    _record(conn, endpoint_id, Action.REMOVE, actor=actor, now=now)
    return endpoint


def rotate_secret(
    conn: Connection, sealer: Sealer, endpoint_id: str, now: float, *, grace: float, actor: str
) -> tuple[Endpoint, str]:
    """Give the endpoint a new secret, stored sealed by `sealer`; the current one keeps signing beside it
    for `grace` seconds (a previous secret still in its grace is dropped). Recorded; `EndpointNotFound` when
    there is none. Returns the endpoint and the new secret (`whsec_...`), to be shown once."""
    secret, sealed_secret = new_secret(sealer)
    params = {
        "id": endpoint_id,
        "secret": sealed_secret,
        "keep_previous": grace > 0,
        "previous_until": now + grace if grace > 0 else None,
    }
    rows = db.execute(conn, "webhook_endpoint_rotate", params)
    if not rows:
        raise EndpointNotFound(endpoint_id)
    _record(conn, endpoint_id, Action.ROTATE, actor=actor, now=now)
    return Endpoint.from_row(rows[0]), secret


def list_deliveries(
    conn: Connection, *, endpoint_id: str | None = None, limit: int = 50
) -> list[WebhookDelivery]:
    """Deliveries, newest first (all endpoints', or `endpoint_id`'s)."""
    if endpoint_id is None:
        rows = db.execute(conn, "webhook_deliveries_newest", {"limit": limit})
    else:
        params = {"endpoint_id": endpoint_id, "limit": limit}
        rows = db.execute(conn, "webhook_deliveries_newest_of_endpoint", params)
    return [WebhookDelivery.from_row(row) for row in rows]


def get_delivery(conn: Connection, delivery_id: str) -> WebhookDelivery | None:
    rows = db.execute(conn, "webhook_delivery", {"id": delivery_id})
    return WebhookDelivery.from_row(rows[0]) if rows else None


def attempts_of(conn: Connection, delivery_ids: list[str]) -> dict[str, list[DeliveryAttempt]]:
    """Each delivery's attempts, oldest first."""
    rows = db.execute(conn, "webhook_attempts_of", {"ids": drivers.of(conn).array(delivery_ids)})
    found: dict[str, list[DeliveryAttempt]] = {d: [] for d in delivery_ids}
    for row in rows:
        found[row[0]].append(DeliveryAttempt(*row))
    return found


def replay(conn: Connection, delivery_id: str, now: float, *, actor: str) -> WebhookDelivery:
    """Make a delivered or failed delivery pending again, due now, under the same id (so a receiver that
    kept it can tell), with a fresh retry window; recorded. `DeliveryNotFound`, or `NotReplayable` for one
    still pending."""
    rows = db.execute(conn, "webhook_delivery_replay", {"id": delivery_id, "now": now})
    if not rows:
        if get_delivery(conn, delivery_id) is None:
            raise DeliveryNotFound(delivery_id)
        raise NotReplayable(delivery_id)
    delivery = WebhookDelivery.from_row(rows[0])
    _record(conn, delivery.endpoint_id, Action.REPLAY, actor=actor, now=now, delivery_id=delivery_id)
    return delivery


def _record(
    conn: Connection,
    endpoint_id: str,
    action: Action,
    *,
    actor: str,
    now: float,
    delivery_id: str | None = None,
) -> None:
    values = {"endpoint_id": endpoint_id, "delivery_id": delivery_id, "action": action.value}
    db.execute(conn, "webhook_action_record", values | {"actor": actor, "now": now})
