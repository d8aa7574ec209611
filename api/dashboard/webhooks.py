"""The dashboard's completion webhooks: the endpoints (never their secrets) with their oldest pending age,
the recent deliveries (of all endpoints, or of one) with their attempts, and the replay of a
delivered or failed delivery: the same store functions as `outbox-bridge webhooks list|deliveries|replay`,
a replay recorded with the operator token's `sub`."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from outbox_bridge.api.dashboard.access import (
    Flash,
    VisitorDep,
    operator_form,
    operator_of,
    page_context,
    redirect_back,
    router,
    templates,
    unavailable,
    with_flash,
)
from outbox_bridge.api.dashboard.charts import age, refresh_seconds
from outbox_bridge.api.deps import EngineDep
from outbox_bridge.core import clock
from outbox_bridge.core.durations import format_age
from outbox_bridge.jobstore import db, webhook_deliveries, webhooks
from outbox_bridge.jobstore.webhooks import Delivery, DeliveryAttempt, Endpoint

RECENT_DELIVERIES = 50


def _listing(
    conn: Connection, endpoint_id: str | None, now: float
) -> tuple[list[Endpoint], list[Delivery], dict[str, list[DeliveryAttempt]], dict[str, float]]:
    endpoints = webhooks.list_endpoints(conn)
    found = webhooks.list_deliveries(conn, endpoint_id=endpoint_id, limit=RECENT_DELIVERIES)
    attempts = webhooks.attempts_of(conn, [d.id for d in found])
    return endpoints, found, attempts, webhook_deliveries.pending_ages(conn, now)


@router.get("/webhooks")
def webhooks_page(request: Request, visitor: VisitorDep, engine: EngineDep) -> Response:
    """The endpoints and the newest deliveries, all endpoints' or `?endpoint=ID`'s."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    now = clock.now()
    chosen = request.query_params.get("endpoint") or None
    try:
        endpoints, found, attempts, pending = db.read(engine, _listing, chosen, now)
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    context = {
        **page_context(request, now, refresh_seconds(request.query_params.get("refresh"))),
        "age": age,
        "format_age": format_age,
        "endpoints": endpoints,
        "chosen": chosen,
        "deliveries": found,
        "attempts": attempts,
        "pending": pending,
    }
    return with_flash(request, templates.TemplateResponse(request, "webhooks.html", context))


@router.post("/webhooks/deliveries/{delivery_id}/replay")
async def replay(request: Request, delivery_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge webhooks replay` from the page: a delivered or failed delivery is pending again, under
    its id; a pending one is refused."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    message = await run_in_threadpool(_replay, engine, delivery_id, who.user)
    return redirect_back(request, form.get("back") or "/ui/webhooks", message)


def _replay(engine: Engine, delivery_id: str, actor: str) -> Flash:
    try:
        db.transact(engine, webhooks.replay, delivery_id, clock.now(), actor=actor)
    except (webhooks.DeliveryNotFound, webhooks.NotReplayable) as exc:
        return Flash("error", f"Not replayed: {exc}.")
    except db.StoreUnavailable as exc:
        return Flash("error", f"Not replayed: the store is unavailable ({exc}); try again.")
    return Flash("ok", f"Delivery {delivery_id} replayed: pending again.")
