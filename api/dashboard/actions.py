"""The dashboard's forms that change jobs: cancel, requeue and resolve one job, and requeue every job a
filter names after a page that shows how many that is. Each runs the same store function as the command
line, in its own transaction, recorded with the operator token's `sub`, and redirects back (303) with a
flash saying what happened, a refusal included."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from outbox_bridge.api.dashboard.access import (
    MAX_NOTE_CHARS,
    Flash,
    VisitorDep,
    operator_of,
    page_context,
    read_form,
    redirect_back,
    router,
    safe_back,
    templates,
    unavailable,
)
from outbox_bridge.api.dashboard.pages import Filtering, filtering
from outbox_bridge.api.deps import EngineDep
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, operator
from outbox_bridge.jobstore.errors import InvalidTransition, JobNotFound
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import RESOLVABLE_TO, State

log = logging.getLogger(__name__)


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs cancel` from the page: a queued job is cancelled at once, a running one is asked
    to stop; a finished one is refused."""
    return await _noted_move(request, job_id, visitor, engine, "cancelled", _cancelled)


@router.post("/jobs/{job_id}/requeue")
async def requeue(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs requeue` from the page: a failed, dead or unknown job goes back to the queue with
    a fresh budget."""
    return await _noted_move(request, job_id, visitor, engine, "requeued", operator.requeue)


async def _noted_move(
    request: Request, job_id: str, visitor: VisitorDep, engine: Engine, action: str, move: Callable[..., Job]
) -> Response:
    """A move whose note is optional (cancel, requeue), by the operator the visitor is, redirected back with
    what became of it."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    form = await read_form(request)
    note = _note(form)
    if isinstance(note, Flash):
        return redirect_back(request, form.get("back"), note)
    act = partial(move, actor=who.user, note=note)
    message = await run_in_threadpool(_apply, engine, action, act, job_id)
    return redirect_back(request, form.get("back"), message)


@router.post("/jobs/{job_id}/resolve")
async def resolve(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs resolve` from the page: settle an unknown job as succeeded or failed, with a note
    (required) saying how the operator knows."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    form = await read_form(request)
    outcome, note = form.get("outcome", ""), form.get("note", "").strip()
    if outcome not in {s.value for s in RESOLVABLE_TO}:
        message = Flash("error", "Choose what really happened: succeeded or failed.")
    elif not note or len(note) > MAX_NOTE_CHARS:
        message = Flash("error", f"Say how you know, in 1 to {MAX_NOTE_CHARS} characters.")
    else:
        act = partial(operator.resolve, outcome=State(outcome), note=note, actor=who.user)
        message = await run_in_threadpool(_apply, engine, "resolved", act, job_id)
    return redirect_back(request, form.get("back"), message)


def _cancelled(conn: Connection, job_id: str, *, now: float, actor: str, note: str | None) -> Job:
    return operator.cancel(conn, job_id, now, actor=actor, note=note)[1]


def _note(form: dict[str, str]) -> str | Flash | None:
    """The optional note of a cancel or requeue, or the flash refusing one that is too long."""
    note = form.get("note", "").strip()
    if len(note) > MAX_NOTE_CHARS:
        return Flash("error", f"Keep the note to {MAX_NOTE_CHARS} characters.")
    return note or None


def _apply(engine: Engine, action: str, fn: Callable[..., Job], job_id: str) -> Flash:
    """Run one store action on one job in its own transaction, as the CLI does, and say how it went."""
    try:
        job = db.transact(engine, fn, job_id, now=clock.now())
    except (JobNotFound, InvalidTransition) as exc:
        return Flash("error", f"Not {action}: {exc}.")
    except db.StoreUnavailable as exc:
        return Flash("error", f"Not {action}: the store is unavailable ({exc}); try again.")
    log.info("dashboard: %s job %s, now %s", action, job.id, job.state.value)
    return Flash("ok", f"Job {job.id} {action}: now {job.state.value}.")


# --- requeue every job a filter names --------------------------------------------------------------------


@router.post("/requeue")
async def requeue_matching(request: Request, visitor: VisitorDep, engine: EngineDep) -> Response:
    """Requeue every failed, dead or unknown job the posted filter names. Without `confirm=yes` nothing
    changes: the answer is a page that shows how many jobs that is and asks to confirm (the same filter,
    posted again with `confirm=yes`). Then one guarded UPDATE requeues what matches at that moment, and the
    flash says how many, and whether that differs from the count confirmed."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    form = await read_form(request)
    now = clock.now()
    chosen = filtering(form, now)
    back = safe_back(form.get("back") or f"/ui/jobs?{chosen.query}")
    note = _note(form)
    if not chosen.requeueable:
        return redirect_back(
            request, back, Flash("error", "Filter on failed, dead or unknown jobs to requeue them.")
        )
    if isinstance(note, Flash):
        return redirect_back(request, back, note)
    if form.get("confirm") != "yes":
        return await _confirmation(request, engine, chosen, back, now)
    try:
        moved = await run_in_threadpool(
            db.transact, engine, operator.requeue_matching, chosen.matching, now, actor=who.user, note=note
        )
    except db.StoreUnavailable as exc:
        return redirect_back(
            request, back, Flash("error", f"Nothing requeued: the store is unavailable ({exc}).")
        )
    log.info("dashboard: %s requeued %d jobs (%s)", who.user, len(moved), chosen.query)
    return redirect_back(request, back, Flash("ok", _requeued_text(len(moved), form.get("expected"))))


async def _confirmation(
    request: Request, engine: Engine, chosen: Filtering, back: str, now: float
) -> Response:
    try:
        count = await run_in_threadpool(db.read, engine, operator.count_requeueable, chosen.matching)
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    context = {**page_context(request, now, 0), "filtering": chosen, "count": count, "back": back}
    return templates.TemplateResponse(request, "confirm_requeue.html", context)


def _requeued_text(moved: int, expected: str | None) -> str:
    text = f"Requeued {moved} {'job' if moved == 1 else 'jobs'}."
    if expected is not None and expected != str(moved):
        text += f" {expected} matched when you confirmed: jobs changed state in between."
    return text
