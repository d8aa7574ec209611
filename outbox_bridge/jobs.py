"""`outbox-bridge jobs`: list and show jobs, and the operator's moves (cancel, requeue, resolve), each
recorded with the OS user who ran it."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated

import typer
from rich.markup import escape
from sqlalchemy import Engine

from outbox_bridge import views
from outbox_bridge.api.schemas import HELD_BY_MEANING, JobView
from outbox_bridge.console import (
    IdArgument,
    JsonOption,
    load_settings,
    open_store,
    os_user,
    out,
    print_json,
    ready_engine,
    refuse,
    table,
)
from outbox_bridge.core import clock
from outbox_bridge.core.durations import FORMAT, format_duration, parse_duration
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import conditions, db, operator, queries
from outbox_bridge.jobstore.conditions import LeaseOwners, lease_note
from outbox_bridge.jobstore.errors import InvalidTransition, JobNotFound
from outbox_bridge.jobstore.filters import JobFilter
from outbox_bridge.jobstore.records import Attempt, Job, OperatorAction
from outbox_bridge.jobstore.states import REQUEUE, State

jobs_app = typer.Typer(help="Inspect and operate on jobs.")


@jobs_app.command("list")
def jobs_list(
    state: State | None = None,
    tenant: str | None = None,
    kind: str | None = None,
    since: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help=f"Only jobs that changed within this span: {FORMAT}."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="Where the previous page ended (its next_cursor).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List jobs, newest first."""
    try:
        since_at = None if since is None else clock.now() - parse_duration(since)
    except ValueError as exc:
        refuse(f"--since {exc}")
    states = frozenset() if state is None else frozenset({state})
    matching = JobFilter(states=states, kind=kind, tenant=tenant, since=since_at)
    settings, engine = open_store()
    try:
        page = db.read(engine, queries.find_jobs, matching, limit=limit, cursor=cursor)
    except queries.BadCursor:
        refuse("--cursor is not a next_cursor that `jobs list --json` printed")
    if as_json:
        print_json(views.list_document(page.items, page.next_cursor))
        return
    now = clock.now()
    owners = db.read(engine, conditions.lease_owners, now, settings.heartbeat_seconds)
    _print_jobs(page.items, owners, now)


def _print_jobs(found: list[Job], owners: LeaseOwners, now: float) -> None:
    """The jobs as a table; a running job's lease says so when its worker is lost."""
    shown = table()
    columns = ("id", "tenant", "kind", "priority", "state", "attempts", "epoch", "created", "worker", "lease")
    for column in (*columns, "error"):
        shown.add_column(column)
    for job in found:
        running = job.state is State.RUNNING
        lost = owners.worker_lost(job.lease_owner)
        shown.add_row(
            job.id,
            job.tenant,
            job.kind,
            job.priority.label,
            job.state.value,
            str(job.attempts),
            str(job.epoch),
            clock.isoformat(job.created_at),
            (job.lease_owner or "") if running else "",
            lease_note(job.lease_expires_at, now, worker_lost=lost) if running else "",
            job.error_code or "",
        )
    out.print(shown)


@jobs_app.command("show")
def jobs_show(job_id: IdArgument, as_json: JsonOption = False) -> None:
    """Show one job, its attempts and what operators did to it."""
    _, engine = open_store()
    job = _job_by_prefix(engine, job_id)
    attempts = db.read(engine, queries.attempts_of, job.id)
    actions = db.read(engine, queries.actions_of, job.id)
    if as_json:
        print_json(views.show_document(job, attempts, actions))
        return
    for name in ("id", "tenant", "owner", "kind", "state", "epoch", "attempts", "cancel_requested"):
        out.print(f"{name:>17}: {getattr(job, name)}")
    _print_schedule_and_progress(JobView.of(job))
    resolution = operator.resolution(job, actions)
    if resolution is not None:
        out.print(f"{'note':>17}: resolved by {resolution.actor}: {resolution.note or ''}")
    else:
        out.print(f"{'error':>17}: {job.error_code or '-'} {job.error_message or ''}")
    out.print(f"{'result attempt':>17}: {job.result_attempt_id or '-'}")
    _print_attempts(attempts)
    _print_actions(actions)


def _print_schedule_and_progress(view: JobView) -> None:
    progress = view.progress
    done = (
        "-" if progress is None else f"{progress.done} of {'?' if progress.total is None else progress.total}"
    )
    out.print(f"{'priority':>17}: {view.priority}")
    out.print(f"{'queue':>17}: {view.queue}")
    out.print(f"{'concurrency key':>17}: {escape(view.concurrency_key or '-')}")  # the client's own text
    out.print(f"{'run at':>17}: {view.run_at or '-'}")
    out.print(f"{'progress':>17}: {done}")
    if view.waited_seconds is not None:
        out.print(f"{'waited':>17}: {view.waited_seconds:.1f}s since it came due")
    if view.held_by is not None:
        out.print(f"{'held back by':>17}: {HELD_BY_MEANING[view.held_by]}")


def _print_attempts(attempts: list[Attempt]) -> None:
    shown = table(title="attempts")
    for column in ("epoch", "attempt", "worker", "outcome", "started", "ended", "external", "error"):
        shown.add_column(column)
    for a in attempts:
        shown.add_row(
            str(a.epoch),
            a.id,
            a.worker,
            a.outcome,
            clock.isoformat(a.started_at),
            clock.isoformat(a.ended_at) or "",
            "yes" if a.external_started_at else "",
            a.error_code or "",
        )
    out.print(shown)


def _print_actions(actions: list[OperatorAction]) -> None:
    if not actions:
        out.print("operator actions: none")
        return
    shown = table(title="operator actions")
    for column in ("at", "actor", "action", "note"):
        shown.add_column(column)
    for a in actions:
        shown.add_row(clock.isoformat(a.at), a.actor, a.action, a.note or "")
    out.print(shown)


def _job_by_prefix(engine: Engine, prefix: str) -> Job:
    """The one job whose id starts with `prefix` (a whole id, or enough of one), else exit 1 saying how
    many matched."""
    match = db.read(engine, queries.match_id_prefix, prefix)
    if match.job is not None:
        return match.job
    if match.count == 0:
        refuse(f"no job id starts with {prefix!r}: `outbox-bridge jobs list` shows the ids there are")
    refuse(f"{match.count} jobs have ids starting with {prefix!r}: give more of the id")


def _operate(action: str, fn: Callable[..., Job], prefix: str, *args: object, **options: object) -> None:
    """Run the operator action `fn(conn, job_id, *args, **options)` on the job `prefix` names; exit 1 with
    one line when there is no such job or its state does not allow the action."""
    _, engine = open_store()
    job_id = _job_by_prefix(engine, prefix).id
    try:
        job: Job = db.transact(engine, fn, job_id, *args, **options)
    except (JobNotFound, InvalidTransition) as exc:
        refuse(str(exc))
    out.print(f"{action}: job {job.id} is now {job.state.value}")


StateOption = Annotated[
    list[str] | None,
    typer.Option(
        "--state",
        metavar="STATE",
        help="Requeue every job in this state: failed, dead or unknown (repeatable).",
    ),
]
NoteOption = Annotated[str | None, typer.Option(help="Why, for whoever looks at the job next.")]


@jobs_app.command("requeue")
def jobs_requeue(
    job_id: Annotated[
        str | None, typer.Argument(metavar="ID", help="A job id, or enough of its start.")
    ] = None,
    state: StateOption = None,
    kind: Annotated[str | None, typer.Option(help="Only jobs of this kind.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs.")] = None,
    since: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help=f"Only jobs that changed within this span: {FORMAT}."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the jobs it would requeue; change none.")
    ] = False,
    note: NoteOption = None,
    as_json: JsonOption = False,
) -> None:
    """Put a failed, dead or unknown job back in the queue with a fresh attempt budget: the job ID names, or
    every job the filter names (--state, with --kind, --tenant, --since). --dry-run lists them first (each
    id, state, kind and tenant; --json: `{"dry_run": true, "count": N, "jobs": [...]}`)."""
    matching = _requeue_filter(state, kind, tenant, since)
    if job_id is not None and matching is not None:
        refuse("give a job ID or a filter (--state, --kind, --tenant, --since), not both")
    if job_id is not None:
        _requeue_one(job_id, dry_run, note)
    elif matching is not None and matching.states:
        _requeue_matching(matching, dry_run, note, as_json)
    else:
        refuse("give a job ID, or --state failed|dead|unknown (with --kind, --tenant, --since) for many jobs")


def _requeue_filter(
    states: list[str] | None, kind: str | None, tenant: str | None, since: str | None
) -> JobFilter | None:
    """The filter the options name (None when they name none), or exit 1 saying which option is wrong."""
    if not (states or kind or tenant or since):
        return None
    allowed = {s.value for s in REQUEUE.sources}
    wrong = sorted(set(states or ()) - allowed)
    if wrong:
        refuse(f"--state {wrong[0]}: only {', '.join(sorted(allowed))} jobs can be requeued")
    try:
        since_at = None if since is None else clock.now() - parse_duration(since)
    except ValueError as exc:
        refuse(f"--since {exc}")
    return JobFilter(
        states=frozenset(State(s) for s in states or ()), kind=kind, tenant=tenant, since=since_at
    )


def _requeue_one(prefix: str, dry_run: bool, note: str | None) -> None:
    if not dry_run:
        _operate("requeued", operator.requeue, prefix, clock.now(), actor=os_user(), note=note)
        return
    _, engine = open_store()
    job = _job_by_prefix(engine, prefix)
    if job.state not in REQUEUE.sources:
        refuse(str(InvalidTransition(job.id, job.state.value, "requeue")))
    out.print(f"dry run: job {job.id} ({job.state.value}) would be requeued; nothing was changed")


def _requeue_matching(matching: JobFilter, dry_run: bool, note: str | None, as_json: bool) -> None:
    _, engine = open_store()
    if dry_run:
        found = db.read(engine, operator.requeueable_jobs, matching)
        if as_json:
            print_json({"dry_run": True, "count": len(found), "jobs": [views.job_document(j) for j in found]})
            return
        out.print(f"dry run: {len(found)} {_jobs(len(found))} would be requeued; nothing was changed")
        for job in found:
            out.print(f"{job.id}  {job.state.value}  {job.kind}  {job.tenant}", markup=False, highlight=False)
        return
    moved = db.transact(engine, operator.requeue_matching, matching, clock.now(), actor=os_user(), note=note)
    if as_json:
        print_json({"dry_run": False, "count": len(moved), "requeued": moved})
        return
    out.print(f"requeued {len(moved)} {_jobs(len(moved))}")
    for job_id in moved:
        out.print(job_id)


def _jobs(count: int) -> str:
    return "job" if count == 1 else "jobs"


@jobs_app.command("cancel")
def jobs_cancel(job_id: IdArgument, note: NoteOption = None) -> None:
    """Cancel a job: a queued one at once, a running one at its next safe point. A finished job is left as
    it is (exit 1)."""
    _, engine = open_store()
    found = _job_by_prefix(engine, job_id)
    try:
        outcome, job = db.transact(engine, operator.cancel, found.id, clock.now(), actor=os_user(), note=note)
    except (JobNotFound, InvalidTransition) as exc:
        refuse(str(exc))
    if outcome is operator.CancelOutcome.REQUESTED:
        out.print(f"cancel requested: job {job.id} is running; it stops at its next safe point")
    else:
        out.print(f"cancelled: job {job.id} is now {job.state.value}")


class Resolution(StrEnum):
    succeeded = "succeeded"
    failed = "failed"


@jobs_app.command("resolve")
def jobs_resolve(
    job_id: IdArgument,
    outcome: Annotated[Resolution, typer.Option(help="What really happened.")],
    note: Annotated[str, typer.Option(help="How you know (recorded, and shown by `jobs show`).")] = (
        "checked by operator"
    ),
) -> None:
    """Settle an unknown job as succeeded or failed."""
    _operate("resolved", operator.resolve, job_id, State(outcome.value), note, clock.now(), actor=os_user())


@jobs_app.command("prune")
def jobs_prune(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Finished longer ago than this (7d, 12h, 30m, 90s); default JOB_RETENTION_SECONDS.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; remove nothing.")] = False,
) -> None:
    """Delete jobs finished longer ago than the retention, with their attempts, outbox rows and files, and
    remove attempt outputs that never became a result. `unknown` jobs stay until resolved."""
    from outbox_bridge.worker.retention import OutputSweep, preview_prune, prune_finished

    settings = load_settings()
    age = _prune_age(older_than, settings)
    engine = ready_engine(settings)
    now = clock.now()
    verb = "would remove" if dry_run else "removed"
    if age is None:
        out.print("finished jobs are kept: JOB_RETENTION_SECONDS is 0 (give --older-than to delete some)")
    else:
        cutoff = now - age
        pruned = (preview_prune if dry_run else prune_finished)(engine, settings, cutoff)
        out.print(
            f"{verb} {pruned.jobs} jobs finished more than {format_duration(age)} ago (before "
            f"{clock.isoformat(cutoff)}) and {pruned.files} of their files"
        )
    swept = OutputSweep().run(engine, settings, now, dry_run=dry_run)
    out.print(
        f"{verb} {swept.files} files of attempts that never became a result or of jobs no longer in the "
        f"store, and {swept.directories} directories of such jobs"
    )
    if dry_run:
        out.print("dry run: nothing was removed")


def _prune_age(older_than: str | None, settings: Settings) -> float | None:
    """The age `jobs prune` deletes finished jobs at: `--older-than`, else JOB_RETENTION_SECONDS, None when
    that is 0 (kept forever); exit 1 saying what a duration looks like when `--older-than` is not one."""
    if older_than is None:
        return settings.job_retention_seconds or None
    try:
        return parse_duration(older_than)
    except ValueError as exc:
        refuse(f"--older-than: {exc}")
