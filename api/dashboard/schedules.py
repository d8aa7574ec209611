"""The dashboard's schedules and kinds at `/ui/schedules`: every schedule with its pause, resume and remove, a
form that adds one, and the kinds the deployment accepts with their pause and resume. The same store
functions as `outbox-bridge schedules add|pause|resume|remove` and `outbox-bridge kinds pause|resume`, the
add form read and checked as the command reads its options (`api.schedule_request`), each change in its own
transaction, recorded with the operator token's `sub`.

A refused add answers 400 with the page, what was wrong above the form and what was typed still in it, and
writes nothing; every other action redirects back (303) with a flash saying what became of it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from outbox_bridge.api.dashboard.access import (
    MAX_NOTE_CHARS,
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
from outbox_bridge.api.dashboard.charts import age
from outbox_bridge.api.deps import EngineDep, SettingsDep
from outbox_bridge.api.schedule_request import ScheduleRefused, read_new_schedule
from outbox_bridge.core import clock
from outbox_bridge.core.recurrence import CatchUp
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.registry import KINDS, accepted
from outbox_bridge.jobstore import db, pausing, priorities, queries
from outbox_bridge.jobstore import schedules as store
from outbox_bridge.jobstore.filters import JobFilter
from outbox_bridge.jobstore.pausing import PausedKind
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.schedules import PeriodicSchedule, ScheduleExists, ScheduleNotFound
from outbox_bridge.jobstore.states import State

log = logging.getLogger(__name__)

PAGE = "/ui/schedules"
# The add form's fields, as the page names them in what it says.
FIELD_LABELS = {
    "tenant": "Tenant", "name": "Name", "kind": "Kind", "payload": "Payload", "cron": "Cron",
    "timezone": "Time zone", "every": "Every", "priority": "Priority", "catch_up": "Catch-up",
    "concurrency_key": "Concurrency key",
}  # fmt: skip
ADD_FIELDS = (
    "tenant", "name", "kind", "payload", "cron", "timezone", "every", "priority", "catch_up",
    "concurrency_key",
)  # fmt: skip


@dataclass(frozen=True)
class KindRow:
    """A kind as the page lists it: its queued jobs, and its pause while it is paused."""

    kind: str
    queued: int
    pause: PausedKind | None


def _listing(conn: Connection, kinds: tuple[str, ...]) -> tuple[list[PeriodicSchedule], list[KindRow]]:
    """Every schedule, and the kinds `kinds` names with any other paused kind, by name."""
    paused = {p.kind: p for p in pausing.paused(conn)}
    rows = []
    for kind in sorted(set(kinds) | set(paused)):
        queued = _queued(conn, kind) if kind not in paused else paused[kind].queued
        rows.append(KindRow(kind, queued, paused.get(kind)))
    return store.list_all(conn), rows


def _queued(conn: Connection, kind: str) -> int:
    return queries.count_jobs(conn, JobFilter(states=frozenset({State.QUEUED}), kind=kind))


@router.get("/schedules")
def schedules_page(
    request: Request, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep
) -> Response:
    """Every schedule with its actions, the add form, and the kinds with theirs."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    return _page(request, settings, engine, {}, None)


def _page(
    request: Request, settings: Settings, engine: Engine, typed: dict[str, str], error: str | None
) -> Response:
    """The page, with the add form holding `typed` and saying `error` (then answered 400)."""
    now = clock.now()
    try:
        found, kinds = db.read(engine, _listing, accepted(settings))
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    context = {
        **page_context(request, now, 0),
        "age": age,
        "schedules": found,
        "kinds": kinds,
        "accepted": accepted(settings),
        "typed": typed,
        "add_error": error,
        "priorities": priorities.LABELS,
        "catch_ups": [c.value for c in CatchUp],
        "max_note": MAX_NOTE_CHARS,
    }
    response = templates.TemplateResponse(
        request, "schedules.html", context, status_code=400 if error else 200
    )
    return with_flash(request, response)


# --- schedules -------------------------------------------------------------------------------------------


@router.post("/schedules")
async def add(request: Request, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep) -> Response:
    """`outbox-bridge schedules add` from the page: a cron expression (in a time zone) or an interval, and
    each slot's job. Anything the command refuses is refused here, in its words, and nothing is written."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    typed = {field: form.get(field, "").strip() for field in ADD_FIELDS}
    try:
        added = await run_in_threadpool(_add, settings, engine, typed, who.user)
    except db.StoreUnavailable as exc:
        return redirect_back(request, PAGE, Flash("error", f"Not added: the store is unavailable ({exc})."))
    if isinstance(added, str):
        return await run_in_threadpool(_page, request, settings, engine, typed, f"Not added: {added}.")
    log.info("dashboard: %s added schedule %s/%s", who.user, added.tenant, added.name)
    said = f"Schedule {added.tenant}/{added.name} added: {added.recurrence.describe()}, the first slot at "
    return redirect_back(request, PAGE, Flash("ok", f"{said}{clock.isoformat(added.next_slot_at)}."))


def _add(settings: Settings, engine: Engine, typed: dict[str, str], actor: str) -> PeriodicSchedule | str:
    """The schedule the typed fields name, added in its own transaction as the command adds it; or why not,
    with nothing written (`ScheduleRefused`, or its name taken)."""
    now = clock.now()
    try:
        schedule = read_new_schedule(settings, **_optional(typed), now=now, owner=actor, label=_label)
        return db.transact(engine, store.add, **schedule.fields(), now=now, actor=actor)
    except ScheduleRefused as exc:
        return str(exc)
    except (ScheduleExists, IntegrityError):
        return f"tenant {typed['tenant']} already has a schedule named {typed['name']}"


def _optional(typed: dict[str, str]) -> dict[str, Any]:
    """The typed fields as `read_new_schedule` takes them: a field left empty is not given (the cron
    expression, its time zone, the interval, the concurrency key); the priority and catch-up default as on
    the command line."""
    fields: dict[str, Any] = {name: typed[name] for name in ("tenant", "name", "kind", "payload")}
    fields |= {name: typed[name] or None for name in ("cron", "timezone", "every", "concurrency_key")}
    return fields | {
        "priority": typed["priority"] or Priority.NORMAL.label,
        "catch_up": typed["catch_up"] or CatchUp.LATEST.value,
    }


def _label(field: str) -> str:
    return FIELD_LABELS.get(field, field)


@router.post("/schedules/{tenant}/{name}/pause")
async def pause(request: Request, tenant: str, name: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge schedules pause` from the page: it makes no job until resumed."""
    return await _schedule_action(request, visitor, engine, store.pause, tenant, name, "paused")


@router.post("/schedules/{tenant}/{name}/resume")
async def resume(
    request: Request, tenant: str, name: str, visitor: VisitorDep, engine: EngineDep
) -> Response:
    """`outbox-bridge schedules resume` from the page: it goes on from its first slot after now."""
    return await _schedule_action(request, visitor, engine, store.resume, tenant, name, "resumed")


@router.post("/schedules/{tenant}/{name}/remove")
async def remove(
    request: Request, tenant: str, name: str, visitor: VisitorDep, engine: EngineDep
) -> Response:
    """`outbox-bridge schedules remove` from the page; the jobs it made stay."""
    return await _schedule_action(request, visitor, engine, store.remove, tenant, name, "removed")


async def _schedule_action(
    request: Request,
    visitor: VisitorDep,
    engine: Engine,
    change: Callable[..., bool | None],
    tenant: str,
    name: str,
    done: str,
) -> Response:
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    message = await run_in_threadpool(_change_schedule, engine, change, tenant, name, done, who.user)
    return redirect_back(request, form.get("back") or PAGE, message)


def _change_schedule(
    engine: Engine, change: Callable[..., bool | None], tenant: str, name: str, done: str, actor: str
) -> Flash:
    """Run `change` (`pause`, `resume`, `remove`) in its own transaction and say how it went: False from
    `pause` or `resume` means it was so already, and nothing was recorded."""
    try:
        changed = db.transact(engine, change, tenant, name, clock.now(), actor=actor)
    except ScheduleNotFound as exc:
        return Flash("error", f"Not {done}: {exc}.")
    except db.StoreUnavailable as exc:
        return Flash("error", f"Not {done}: the store is unavailable ({exc}); try again.")
    if changed is False:
        already = "paused already" if done == "paused" else "not paused"
        return Flash("error", f"Not {done}: schedule {tenant}/{name} is {already}.")
    log.info("dashboard: %s %s schedule %s/%s", actor, done, tenant, name)
    return Flash("ok", f"Schedule {tenant}/{name} {done}.")


# --- kinds -----------------------------------------------------------------------------------------------


@router.post("/kinds/{kind}/pause")
async def pause_kind(request: Request, kind: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge kinds pause` from the page: its queued jobs wait, its running ones finish."""
    return await _kind_action(request, kind, visitor, engine, _paused)


@router.post("/kinds/{kind}/resume")
async def resume_kind(request: Request, kind: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge kinds resume` from the page: its queued jobs start, in their order."""
    return await _kind_action(request, kind, visitor, engine, _resumed)


async def _kind_action(
    request: Request, kind: str, visitor: VisitorDep, engine: Engine, act: Callable[..., Flash]
) -> Response:
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    back = form.get("back") or PAGE
    note = form.get("note", "").strip() or None
    if note is not None and len(note) > MAX_NOTE_CHARS:
        return redirect_back(request, back, Flash("error", f"Keep the note to {MAX_NOTE_CHARS} characters."))
    try:
        message = await run_in_threadpool(act, engine, kind, who.user, note)
    except db.StoreUnavailable as exc:
        message = Flash("error", f"Nothing changed: the store is unavailable ({exc}); try again.")
    return redirect_back(request, back, message)


def _paused(engine: Engine, kind: str, actor: str, note: str | None) -> Flash:
    if kind not in KINDS:
        return Flash("error", f"Not paused: this deployment runs no kind {kind!r}.")
    if not db.transact(engine, pausing.pause, kind, clock.now(), actor=actor, note=note):
        return Flash("error", f"Not paused: kind {kind} is paused already.")
    log.info("dashboard: %s paused kind %s", actor, kind)
    return Flash("ok", f"Kind {kind} paused: its queued jobs wait, its running ones finish.")


def _resumed(engine: Engine, kind: str, actor: str, note: str | None) -> Flash:
    announced = db.transact(engine, pausing.resume, kind, clock.now(), actor=actor, note=note)
    if announced is None:
        return Flash("error", f"Not resumed: kind {kind} is not paused.")
    log.info("dashboard: %s resumed kind %s", actor, kind)
    return Flash("ok", f"Kind {kind} resumed: {announced} queued jobs announced again.")
