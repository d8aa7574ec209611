"""`outbox-bridge webhooks`: register a tenant's completion webhook endpoints, rotate their signing secrets,
and look at (and replay) their deliveries. Every change is recorded with the OS user who made it."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from sqlalchemy import Engine

from outbox_bridge.console import (
    JsonOption,
    open_store,
    os_user,
    out,
    print_json,
    refuse,
    require_safe_secret,
    table,
)
from outbox_bridge.core import clock
from outbox_bridge.core.durations import FORMAT
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore import webhooks as store
from outbox_bridge.jobstore.webhooks import DeliveryAttempt, Endpoint, WebhookDelivery

webhooks_app = typer.Typer(help="Completion webhooks: endpoints per tenant, their secrets and deliveries.")

EndpointArgument = Annotated[str, typer.Argument(metavar="ID", help="An endpoint's id.")]


@webhooks_app.command("add")
def webhooks_add(
    tenant: Annotated[str, typer.Option(help="The tenant whose jobs it hears of.")],
    url: Annotated[str, typer.Option(help="Where the relay POSTs each event: an http:// or https:// URL.")],
    event: Annotated[
        list[str] | None,
        typer.Option(
            "--event",
            metavar="EVENT",
            help=f"Send only this event (repeatable): {', '.join(store.EVENTS)}. Default: all of them.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Register an endpoint for TENANT's finished jobs. Prints its id and its signing secret, which is shown
    this once: give it to the receiver, which checks each request's `webhook-signature` with it."""
    from outbox_bridge.api.auth import NAME_RULE, is_valid_name

    if not is_valid_name(tenant):
        refuse(f"--tenant must be {NAME_RULE}")
    settings, engine = _open()
    try:
        events = store.check_events(event or [])
        store.check_target(url, allow_private=settings.webhook_allow_private)
    except store.InvalidEndpoint as exc:
        refuse(str(exc))
    endpoint, secret = db.transact(
        engine,
        store.add_endpoint,
        Sealer.of(settings.auth_secret),
        tenant=tenant,
        url=url,
        events=events,
        now=clock.now(),
        actor=os_user(),
    )
    if as_json:
        print_json(_endpoint_document(endpoint) | {"secret": secret})
        return
    _say(f"endpoint {endpoint.id} for tenant {tenant}: {', '.join(events)}")
    _say(f"secret (shown once): {secret}")


@webhooks_app.command("list")
def webhooks_list(as_json: JsonOption = False) -> None:
    """The endpoints, oldest first (never their secrets)."""
    _, engine = open_store()
    found = db.read(engine, store.list_endpoints)
    if as_json:
        print_json({"endpoints": [_endpoint_document(e) for e in found]})
        return
    shown = table()
    for column in ("id", "tenant", "url", "events", "created", "by", "previous secret signs until"):
        shown.add_column(column)
    for e in found:
        rotating = e.previous_secret_until is not None and e.previous_secret_until > clock.now()
        shown.add_row(
            e.id,
            e.tenant,
            e.url,
            ",".join(e.events),
            clock.isoformat(e.created_at),
            e.created_by,
            clock.isoformat(e.previous_secret_until) if rotating else "",
        )
    out.print(shown)


@webhooks_app.command("remove")
def webhooks_remove(endpoint_id: EndpointArgument) -> None:
    """Remove an endpoint with its deliveries: nothing more is sent to it."""
    _, engine = open_store()
    try:
        endpoint = db.transact(engine, store.remove_endpoint, endpoint_id, clock.now(), actor=os_user())
    except store.EndpointNotFound as exc:
        refuse(f"{exc}: `outbox-bridge webhooks list` shows the ids there are")
    _say(f"removed endpoint {endpoint.id} ({endpoint.url})")


@webhooks_app.command("rotate")
def webhooks_rotate(
    endpoint_id: EndpointArgument,
    grace: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help=f"How long the current secret keeps signing beside the new one: {FORMAT}.",
        ),
    ] = store.DEFAULT_GRACE,
    as_json: JsonOption = False,
) -> None:
    """Give an endpoint a new signing secret, shown this once. During the grace period every request
    carries both signatures, so the receiver can switch to the new secret at any time within it."""
    try:
        grace_seconds = store.grace_seconds(grace)
    except ValueError as exc:
        refuse(f"--grace {exc}")
    settings, engine = _open()
    sealer = Sealer.of(settings.auth_secret)
    try:
        rotated = (sealer, endpoint_id, clock.now())
        endpoint, secret = db.transact(
            engine, store.rotate_secret, *rotated, grace=grace_seconds, actor=os_user()
        )
    except store.EndpointNotFound as exc:
        refuse(f"{exc}: `outbox-bridge webhooks list` shows the ids there are")
    if as_json:
        print_json(_endpoint_document(endpoint) | {"secret": secret})
        return
    until = clock.isoformat(endpoint.previous_secret_until)
    _say(f"endpoint {endpoint.id}: new secret (shown once): {secret}")
    _say(f"the previous secret signs too until {until}" if until else "the previous secret no longer signs")


@webhooks_app.command("deliveries")
def webhooks_deliveries(
    endpoint: Annotated[str | None, typer.Option(metavar="ID", help="Only this endpoint's.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonOption = False,
) -> None:
    """Deliveries, newest first: their state, attempts, last answer and next attempt (`--json`: with each
    attempt's time, status, latency and error)."""
    _, engine = open_store()
    found = db.read(engine, store.list_deliveries, endpoint_id=endpoint, limit=limit)
    if as_json:
        logs = db.read(engine, store.attempts_of, [d.id for d in found])
        print_json({"deliveries": [_delivery_document(d, logs[d.id]) for d in found]})
        return
    shown = table()
    columns = ("id", "endpoint", "job", "event", "state", "attempts", "last status", "next attempt")
    for column in (*columns, "created", "last error"):
        shown.add_column(column)
    for d in found:
        pending = d.state is store.DeliveryState.PENDING
        shown.add_row(
            d.id,
            d.endpoint_id,
            d.job_id,
            d.event,
            d.state.value,
            str(d.attempts),
            "" if d.last_status is None else str(d.last_status),
            clock.isoformat(d.next_attempt_at) if pending else "",
            clock.isoformat(d.created_at),
            d.last_error or "",
        )
    out.print(shown)


@webhooks_app.command("replay")
def webhooks_replay(
    delivery_id: Annotated[str, typer.Argument(metavar="DELIVERY_ID", help="A delivery's id.")],
) -> None:
    """Send a delivered or failed delivery again, under the same id, retried as a new one would be."""
    _, engine = open_store()
    try:
        delivery = db.transact(engine, store.replay, delivery_id, clock.now(), actor=os_user())
    except (store.DeliveryNotFound, store.NotReplayable) as exc:
        refuse(str(exc))
    out.print(f"replayed: delivery {delivery.id} is pending again")


def _say(line: str) -> None:
    out.print(line, markup=False, highlight=False)


def _open() -> tuple[Settings, Engine]:
    """The settings and the store, once AUTH_SECRET is one that protects the secrets sealed under it."""
    settings, engine = open_store()
    require_safe_secret(settings)
    return settings, engine


def _endpoint_document(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": endpoint.id,
        "tenant": endpoint.tenant,
        "url": endpoint.url,
        "events": list(endpoint.events),
        "created_at": clock.isoformat(endpoint.created_at),
        "created_by": endpoint.created_by,
        "previous_secret_until": clock.isoformat(endpoint.previous_secret_until),
    }


def _delivery_document(delivery: WebhookDelivery, attempts: list[DeliveryAttempt]) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "endpoint_id": delivery.endpoint_id,
        "tenant": delivery.tenant,
        "job_id": delivery.job_id,
        "event": delivery.event,
        "state": delivery.state.value,
        "attempts": delivery.attempts,
        "occurred_at": clock.isoformat(delivery.occurred_at),
        "created_at": clock.isoformat(delivery.created_at),
        "next_attempt_at": clock.isoformat(delivery.next_attempt_at),
        "last_status": delivery.last_status,
        "last_error": delivery.last_error,
        "delivered_at": clock.isoformat(delivery.delivered_at),
        "replayed_at": clock.isoformat(delivery.replayed_at),
        "attempt_log": [
            {
                "attempt": a.attempt,
                "at": clock.isoformat(a.at),
                "status_code": a.status_code,
                "latency_ms": round(a.latency_ms, 1),
                "error": a.error,
            }
            for a in attempts
        ],
    }
