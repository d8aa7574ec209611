"""The dashboard's completion webhooks at `/ui/webhooks`: the endpoints (never their stored secrets) with
their oldest pending age, a form that adds one, each one's secret rotation and removal, the recent
deliveries (of all endpoints, or of one) with their attempts, and the replay of a delivered or failed
delivery. The same store functions as `outbox-bridge webhooks add|remove|rotate|list|deliveries|replay`,
each change in its own transaction, recorded with the operator token's `sub`.

A signing secret made by an add or a rotation is shown once, on the page that answers the form (200), and
never again: not through a redirect, whose flash is a cookie the browser keeps in clear, and not on any
later page (the store keeps it sealed). A refused add answers 400 with the page, what was wrong above the
form and what was typed still in it, and writes nothing; a removal, a refused rotation and a replay
redirect back (303) with a flash saying what became of them."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from outbox_bridge.api.auth import NAME_RULE, is_valid_name
from outbox_bridge.api.dashboard.access import (
    Flash,
    VisitorDep,
    operator_form,
    operator_of,
    page_context,
    read_form_values,
    redirect_back,
    router,
    templates,
    unavailable,
    with_flash,
)
from outbox_bridge.api.dashboard.charts import age, refresh_seconds
from outbox_bridge.api.deps import EngineDep, SettingsDep
from outbox_bridge.core import clock
from outbox_bridge.core.durations import FORMAT, format_age
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, webhook_deliveries, webhooks
from outbox_bridge.jobstore.webhooks import DeliveryAttempt, Endpoint, WebhookDelivery

log = logging.getLogger(__name__)

PAGE = "/ui/webhooks"
RECENT_DELIVERIES = 50


@dataclass(frozen=True)
class NewSecret:
    """A signing secret just made for `endpoint` (by an add, or a rotation), shown on the page that answers
    the form and never again."""

    endpoint: Endpoint
    secret: str
    rotated: bool


@dataclass(frozen=True)
class AddForm:
    """The add form as typed (shown again after a refusal) and why it was refused."""

    tenant: str = ""
    url: str = ""
    events: tuple[str, ...] = webhooks.EVENTS
    error: str | None = None


def _listing(
    conn: Connection, endpoint_id: str | None, now: float
) -> tuple[list[Endpoint], list[WebhookDelivery], dict[str, list[DeliveryAttempt]], dict[str, float]]:
    endpoints = webhooks.list_endpoints(conn)
    found = webhooks.list_deliveries(conn, endpoint_id=endpoint_id, limit=RECENT_DELIVERIES)
    attempts = webhooks.attempts_of(conn, [d.id for d in found])
    return endpoints, found, attempts, webhook_deliveries.pending_ages(conn, now)


@router.get("/webhooks")
def webhooks_page(request: Request, visitor: VisitorDep, engine: EngineDep) -> Response:
    """The endpoints with the add form, and the newest deliveries, all endpoints' or `?endpoint=ID`'s.
    Refreshes itself only when asked to (`?refresh=5`): its forms would lose what was typed."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    chosen = request.query_params.get("endpoint") or None
    refresh = request.query_params.get("refresh")
    page = _page(request, engine, chosen=chosen, refresh=refresh_seconds(refresh) if refresh else 0)
    return with_flash(request, page)


def _page(
    request: Request,
    engine: Engine,
    *,
    chosen: str | None = None,
    refresh: int = 0,
    new_secret: NewSecret | None = None,
    add_form: AddForm | None = None,
) -> Response:
    """The page, showing `new_secret` once, or the add form as typed with why it was refused (then 400)."""
    now = clock.now()
    try:
        endpoints, found, attempts, pending = db.read(engine, _listing, chosen, now)
    except db.StoreUnavailable as exc:
        if new_secret is None:
            return unavailable(request, exc)
        endpoints, found, attempts, pending = [], [], {}, {}  # the secret is shown all the same: only here
    context = {
        **page_context(request, now, refresh),
        "age": age,
        "format_age": format_age,
        "endpoints": endpoints,
        "chosen": chosen,
        "deliveries": found,
        "attempts": attempts,
        "pending": pending,
        "events": webhooks.EVENTS,
        "default_grace": webhooks.DEFAULT_GRACE,
        "grace_format": FORMAT,
        "new_secret": new_secret,
        "add_form": add_form or AddForm(),
    }
    if request.method == "POST":  # the answer to a form: its links and forms lead to the page, not the form
        context["back"] = PAGE
    refused = add_form is not None and add_form.error is not None
    return templates.TemplateResponse(request, "webhooks.html", context, status_code=400 if refused else 200)


# --- endpoints -------------------------------------------------------------------------------------------


@router.post("/webhooks")
async def add(request: Request, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep) -> Response:
    """`outbox-bridge webhooks add` from the page: an endpoint for a tenant's finished jobs, answered with
    the page showing its signing secret this once. A tenant, URL or event the command refuses is refused
    here, in its words, and nothing is written."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    typed = AddForm(
        tenant=form.get("tenant", "").strip(),
        url=form.get("url", "").strip(),
        events=tuple(await read_form_values(request, "event")),
    )
    try:
        made = await run_in_threadpool(_add, settings, engine, typed, who.user)
    except db.StoreUnavailable as exc:
        return redirect_back(request, PAGE, Flash("error", f"Not added: the store is unavailable ({exc})."))
    if isinstance(made, AddForm):
        return await run_in_threadpool(_page, request, engine, add_form=made)
    log.info(
        "dashboard: %s added webhook endpoint %s for tenant %s", who.user, made.endpoint.id, typed.tenant
    )
    return await run_in_threadpool(_page, request, engine, new_secret=made)


def _add(settings: Settings, engine: Engine, typed: AddForm, actor: str) -> NewSecret | AddForm:
    """The endpoint the form names, added in its own transaction with a new secret; or the form again with
    why not, nothing written."""
    if not is_valid_name(typed.tenant):
        return _refused(typed, f"the tenant must be {NAME_RULE}")
    if not typed.events:
        return _refused(typed, "tick at least one event")
    try:
        events = webhooks.check_events(typed.events)
        webhooks.check_target(typed.url, allow_private=settings.webhook_allow_private)
    except webhooks.InvalidEndpoint as exc:
        # The store words it for the command line (`--url`, `--event`): the form's fields, without dashes.
        return _refused(typed, str(exc).removeprefix("--"))
    endpoint, secret = db.transact(
        engine,
        webhooks.add_endpoint,
        Sealer.of(settings.auth_secret),
        tenant=typed.tenant,
        url=typed.url,
        events=events,
        now=clock.now(),
        actor=actor,
    )
    return NewSecret(endpoint, secret, rotated=False)


def _refused(typed: AddForm, why: str) -> AddForm:
    return AddForm(typed.tenant, typed.url, typed.events, error=f"Not added: {why}.")


@router.post("/webhooks/endpoints/{endpoint_id}/rotate")
async def rotate(
    request: Request, endpoint_id: str, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep
) -> Response:
    """`outbox-bridge webhooks rotate` from the page: a new signing secret, shown this once on the page
    that answers; the current one keeps signing beside it for the grace typed (`grace`, 24h when empty,
    0 for none)."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    try:
        grace = webhooks.grace_seconds(form.get("grace", "").strip() or webhooks.DEFAULT_GRACE)
    except ValueError as exc:
        return redirect_back(request, form.get("back") or PAGE, Flash("error", f"Not rotated: grace {exc}."))
    made = await run_in_threadpool(_rotate, settings, engine, endpoint_id, grace, who.user)
    if isinstance(made, Flash):
        return redirect_back(request, form.get("back") or PAGE, made)
    log.info("dashboard: %s rotated the secret of webhook endpoint %s", who.user, endpoint_id)
    return await run_in_threadpool(_page, request, engine, new_secret=made)


def _rotate(
    settings: Settings, engine: Engine, endpoint_id: str, grace: float, actor: str
) -> NewSecret | Flash:
    sealer = Sealer.of(settings.auth_secret)
    try:
        endpoint, secret = db.transact(
            engine, webhooks.rotate_secret, sealer, endpoint_id, clock.now(), grace=grace, actor=actor
        )
    except webhooks.EndpointNotFound as exc:
        return Flash("error", f"Not rotated: {exc}.")
    except db.StoreUnavailable as exc:
        return Flash("error", f"Not rotated: the store is unavailable ({exc}); try again.")
    return NewSecret(endpoint, secret, rotated=True)


@router.post("/webhooks/endpoints/{endpoint_id}/remove")
async def remove(request: Request, endpoint_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge webhooks remove` from the page: the endpoint goes with its deliveries, and nothing
    more is sent to it."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    message = await run_in_threadpool(_remove, engine, endpoint_id, who.user)
    back = form.get("back") or PAGE
    # Its deliveries' list is gone with it: back to every endpoint's.
    return redirect_back(request, PAGE if endpoint_id in back else back, message)


def _remove(engine: Engine, endpoint_id: str, actor: str) -> Flash:
    try:
        endpoint = db.transact(engine, webhooks.remove_endpoint, endpoint_id, clock.now(), actor=actor)
    except webhooks.EndpointNotFound as exc:
        return Flash("error", f"Not removed: {exc}.")
    except db.StoreUnavailable as exc:
        return Flash("error", f"Not removed: the store is unavailable ({exc}); try again.")
    log.info("dashboard: %s removed webhook endpoint %s", actor, endpoint.id)
    return Flash("ok", f"Endpoint {endpoint.id} ({endpoint.url}) removed, with its deliveries.")


# --- deliveries ------------------------------------------------------------------------------------------


@router.post("/webhooks/deliveries/{delivery_id}/replay")
async def replay(request: Request, delivery_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge webhooks replay` from the page: a delivered or failed delivery is pending again, under
    its id; a pending one is refused."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    message = await run_in_threadpool(_replay, engine, delivery_id, who.user)
    return redirect_back(request, form.get("back") or PAGE, message)


def _replay(engine: Engine, delivery_id: str, actor: str) -> Flash:
    try:
        db.transact(engine, webhooks.replay, delivery_id, clock.now(), actor=actor)
    except (webhooks.DeliveryNotFound, webhooks.NotReplayable) as exc:
        return Flash("error", f"Not replayed: {exc}.")
    except db.StoreUnavailable as exc:
        return Flash("error", f"Not replayed: the store is unavailable ({exc}); try again.")
    return Flash("ok", f"Delivery {delivery_id} replayed: pending again.")
