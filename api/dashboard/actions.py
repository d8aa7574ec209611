"""The dashboard's forms that change jobs: cancel, requeue and resolve one job, and requeue every job a
filter names, or the jobs ticked on the job list, after a page that shows how many that is. Each runs the
same store function as the command line, in its own transaction, recorded with the operator token's `sub`,
and redirects back (303) with a flash saying what happened, a refusal included."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from outbox_bridge.api.dashboard.access import (
    MAX_NOTE_CHARS,
    Flash,
    VisitorDep,
    operator_form,
    page_context,
    read_form_values,
    redirect_back,
    router,
    safe_back,
    templates,
    unavailable,
)
from outbox_bridge.api.dashboard.pages import Filtering, filtering
from outbox_bridge.api.deps import EngineDep
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, operator, queries
from outbox_bridge.jobstore.errors import InvalidTransition, JobNotFound
from outbox_bridge.jobstore.filters import NOTHING, JobFilter
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import RESOLVABLE_TO, State

log = logging.getLogger(__name__)
# The bulk requeue's confirm page lists this many of the jobs it would requeue, newest first (the job list,
# with the same filter, pages through the rest).
PREVIEW_JOBS = 50
# The form field the job list's checkboxes post, one per ticked job.
SELECTED = "selected"


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs cancel` from the page: a queued job is cancelled at once, a running one is asked
    to stop; a finished one is refused."""
    return await _noted_move(request, job_id, visitor, engine, "cancelled", _cancelled)


@router.post("/jobs/{job_id}/requeue")
async def requeue(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs requeue` from the page: a failed, dead or unknown job goes back to the queue with
    a fresh budget. An unknown job only when the form also says `effect_may_repeat=yes`: its external effect
    may have happened, and may happen again."""
    return await _noted_move(request, job_id, visitor, engine, "requeued", _requeued)


async def _noted_move(
    request: Request, job_id: str, visitor: VisitorDep, engine: Engine, action: str, move: Callable[..., Job]
) -> Response:
    """A move whose note is optional (cancel, requeue), by the operator the visitor is, redirected back with
    what became of it."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    note = _note(form)
    if isinstance(note, Flash):
        return redirect_back(request, form.get("back"), note)
    act = partial(move, actor=who.user, note=note, form=form)
    message = await run_in_threadpool(_apply, engine, action, act, job_id)
    return redirect_back(request, form.get("back"), message)


@router.post("/jobs/{job_id}/resolve")
async def resolve(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs resolve` from the page: settle an unknown job as succeeded or failed, with a note
    (required) saying how the operator knows."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    outcome, note = form.get("outcome", ""), form.get("note", "").strip()
    if outcome not in {s.value for s in RESOLVABLE_TO}:
        message = Flash("error", "Choose what really happened: succeeded or failed.")
    elif not note or len(note) > MAX_NOTE_CHARS:
        message = Flash("error", f"Say how you know, in 1 to {MAX_NOTE_CHARS} characters.")
    else:
        act = partial(operator.resolve, outcome=State(outcome), note=note, actor=who.user)
        message = await run_in_threadpool(_apply, engine, "resolved", act, job_id)
    return redirect_back(request, form.get("back"), message)


class EffectMayRepeat(InvalidTransition):
    """Requeueing an unknown job was not confirmed as running its external effect again."""

    def __init__(self, job_id: str) -> None:
        action = "requeue it unless you confirm that its external effect may happen again (tick the box)"
        super().__init__(job_id, State.UNKNOWN.value, action)


def _requeued(
    conn: Connection, job_id: str, *, now: float, actor: str, note: str | None, form: dict[str, str]
) -> Job:
    repeat = form.get("effect_may_repeat") == "yes"
    try:
        return operator.requeue(conn, job_id, now, actor=actor, note=note, unknown_too=repeat)
    except InvalidTransition:
        job = queries.get_job(conn, job_id)
        if job is not None and job.state is State.UNKNOWN:
            raise EffectMayRepeat(job_id) from None
        raise


def _cancelled(
    conn: Connection, job_id: str, *, now: float, actor: str, note: str | None, form: dict[str, str]
) -> Job:
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
    """Requeue every failed, dead or unknown job the posted filter names, or those of the jobs ticked on the
    job list (`selected`, one field per job; a ticked job in another state stays as it is). Without
    `confirm=yes` nothing changes: the answer is a page that shows how many jobs that is and asks to confirm
    (the same filter or ticks, posted again with `confirm=yes` and that count as `expected`). Then one
    guarded UPDATE requeues what matches, in a transaction that is rolled back unless exactly `expected`
    jobs moved: when the count changed in between, nothing moves and the page asks again with the new count.
    A requeue that may move an `unknown` job (the filter names that state, or a ticked job is unknown) also
    needs `effect_may_repeat=yes`: their external effect may happen again; without it no unknown job moves."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    who, form = posted
    now = clock.now()
    chosen = filtering(form, now, await read_form_values(request, SELECTED))
    back = safe_back(form.get("back") or f"/ui/jobs?{chosen.query}")
    note = _note(form)
    if not chosen.requeueable:
        return redirect_back(request, back, Flash("error", _nothing_chosen(form)))
    if isinstance(note, Flash):
        return redirect_back(request, back, note)
    expected = form.get("expected", "")
    if form.get("confirm") != "yes" or not expected.isdigit():
        return await _confirmation(request, engine, chosen, back, now)
    effect_may_repeat = form.get("effect_may_repeat") == "yes"
    if not effect_may_repeat and await run_in_threadpool(db.read, engine, _may_move_unknown, chosen):
        return await _confirmation(
            request, engine, chosen, back, now, "Tick the box: unknown jobs run again."
        )
    matching = chosen.matching if effect_may_repeat else _known_only(chosen.matching)
    try:
        moved = await run_in_threadpool(
            db.transact, engine, _requeue_exactly, matching, int(expected), now, actor=who.user, note=note
        )
    except CountChanged as changed:
        notice = f"{changed.moved} jobs match now, not the {expected} you confirmed; nothing was requeued."
        return await _confirmation(request, engine, chosen, back, now, notice)
    except db.StoreUnavailable as exc:
        return redirect_back(
            request, back, Flash("error", f"Nothing requeued: the store is unavailable ({exc}).")
        )
    log.info("dashboard: %s requeued %d jobs (%s)", who.user, len(moved), chosen.query or "ticked")
    return redirect_back(
        request, back, Flash("ok", f"Requeued {len(moved)} {'job' if len(moved) == 1 else 'jobs'}.")
    )


def _nothing_chosen(form: dict[str, str]) -> str:
    """Why a bulk requeue names no job it could requeue: nothing ticked on the list, or a filter on a state
    a requeue does not take jobs from."""
    if form.get("selection") == "yes":
        return "Tick the failed, dead or unknown jobs to requeue first."
    return "Filter on failed, dead or unknown jobs to requeue them."


def _may_move_unknown(conn: Connection, chosen: Filtering) -> bool:
    """Whether requeueing what `chosen` names may move an unknown job: its filter names the state, or one
    of the jobs ticked is unknown now."""
    if State.UNKNOWN in chosen.matching.states:
        return True
    if not chosen.selected or chosen.matching.states:
        return False
    unknown = replace(chosen.matching, states=frozenset({State.UNKNOWN}))
    return queries.count_jobs(conn, unknown) > 0


def _known_only(matching: JobFilter) -> JobFilter:
    """`matching` without the unknown jobs: what a requeue moves when its operator did not confirm that an
    external effect may happen again (nothing, rather than more, when that leaves no state)."""
    states = operator.requeueable(matching).states - {State.UNKNOWN}
    return replace(matching, states=states) if states else NOTHING


class CountChanged(Exception):
    """Not as many jobs matched as were confirmed: the transaction is rolled back."""

    def __init__(self, moved: int) -> None:
        super().__init__(moved)
        self.moved = moved


def _requeue_exactly(
    conn: Connection, matching: JobFilter, expected: int, now: float, *, actor: str, note: str | None
) -> list[str]:
    moved = operator.requeue_matching(conn, matching, now, actor=actor, note=note)
    if len(moved) != expected:
        raise CountChanged(len(moved))
    return moved


@dataclass(frozen=True)
class Preview:
    """What the confirm page shows: how many jobs a requeue would move now, the newest of them, and
    whether one may be unknown."""

    count: int
    jobs: list[Job]
    unknown: bool


def _preview(conn: Connection, chosen: Filtering) -> Preview:
    first = queries.find_jobs(conn, operator.requeueable(chosen.matching), limit=PREVIEW_JOBS)
    count = operator.count_requeueable(conn, chosen.matching)
    return Preview(count, first.items, _may_move_unknown(conn, chosen))


async def _confirmation(
    request: Request, engine: Engine, chosen: Filtering, back: str, now: float, notice: str | None = None
) -> Response:
    try:
        preview = await run_in_threadpool(db.read, engine, _preview, chosen)
    except db.StoreUnavailable as exc:
        return unavailable(request, exc)
    context = {
        **page_context(request, now, 0),
        "filtering": chosen,
        "count": preview.count,
        "preview": preview.jobs,
        "back": back,
        "notice": notice,
        "unknown": preview.unknown,
        "selected_field": SELECTED,
    }
    return templates.TemplateResponse(request, "confirm_requeue.html", context)
