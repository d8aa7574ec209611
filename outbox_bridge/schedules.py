"""`outbox-bridge schedules`: add, list, pause, resume and remove schedules, each change recorded with the OS
user who made it. A refused `add` says why in one line, exits 1 and writes nothing; with `--if-missing` a
schedule that exists as asked is no refusal, so a deployment script may add it at every run."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from outbox_bridge import views
from outbox_bridge.api.auth import NAME_RULE
from outbox_bridge.console import (
    JsonOption,
    load_kinds,
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
from outbox_bridge.core.durations import FORMAT, format_age
from outbox_bridge.core.recurrence import CatchUp, slot_text
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore import schedules as store
from outbox_bridge.jobstore.schedules import ScheduleExists, ScheduleNotFound

if TYPE_CHECKING:
    from outbox_bridge.api.schedule_request import NewSchedule

schedules_app = typer.Typer(
    help="Jobs on a schedule: one job per slot of a cron expression or of an interval, made by the relay."
)


class PriorityName(StrEnum):
    high = "high"
    normal = "normal"
    low = "low"


TenantOption = Annotated[str, typer.Option(help="The tenant the schedule and its jobs belong to.")]
NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name in its tenant.")]


@schedules_app.command("add")
def schedules_add(
    tenant: TenantOption,
    name: Annotated[str, typer.Option(help=f"The schedule's name in its tenant: {NAME_RULE}.")],
    kind: Annotated[str, typer.Option(help="The kind of each slot's job (one the deployment accepts).")],
    payload: Annotated[str, typer.Option(metavar="JSON", help="Each job's payload, a JSON object.")],
    cron: Annotated[
        str | None, typer.Option(metavar="EXPR", help="A cron expression, such as '0 9 * * 1-5'.")
    ] = None,
    timezone: Annotated[
        str | None,
        typer.Option(metavar="TZ", help="The time zone the cron expression reads in (default UTC)."),
    ] = None,
    every: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help=f"A fixed interval instead, counted from the epoch: {FORMAT}."),
    ] = None,
    priority: PriorityName = PriorityName.normal,
    catch_up: Annotated[
        CatchUp,
        typer.Option(help="After downtime: make the latest missed slot's job, or none of the missed ones."),
    ] = CatchUp.LATEST,
    concurrency_key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY",
            help="Every job of the schedule carries this concurrency key: at most "
            "CONCURRENCY_KEY_MAX_RUNNING (default 1) of the tenant's jobs with it run at once, so a slot's "
            "job waits for the last one's.",
        ),
    ] = None,
    if_missing: Annotated[
        bool,
        typer.Option(
            "--if-missing",
            help="Exit 0 when the tenant has this schedule already, as asked; still exit 1 when it has "
            "one of this name defined otherwise.",
        ),
    ] = False,
) -> None:
    """Add a schedule: TENANT gets a job of KIND with PAYLOAD for every slot of --cron (in --timezone) or of
    --every, under the idempotency key schedule:NAME:SLOT, so that no slot ever makes two jobs."""
    # Imported here: the request's rules read the api's payload models, which no other command needs.
    from outbox_bridge.api.schedule_request import ScheduleRefused, read_new_schedule

    settings = load_settings()
    load_kinds(settings)
    try:
        schedule = read_new_schedule(
            settings, tenant=tenant, name=name, kind=kind, payload=payload, cron=cron, timezone=timezone,
            every=every, priority=priority.value, catch_up=catch_up.value, now=clock.now(), owner=os_user(),
            label=_option, concurrency_key=concurrency_key,
        )  # fmt: skip
    except ScheduleRefused as exc:
        refuse(str(exc))
    engine = ready_engine(settings)
    try:
        added = db.transact(engine, store.add, **schedule.fields(), now=clock.now(), actor=os_user())
    except (ScheduleExists, IntegrityError):
        taken = f"tenant {tenant} already has a schedule named {name}"
        if if_missing:
            _exists_as_asked(engine, schedule, taken)
        refuse(f"{taken} (`outbox-bridge schedules list`)")
    out.print(
        f"added: schedule {tenant}/{name}; a job of kind {added.kind} {schedule.recurrence.describe()}, the "
        f"first at {slot_text(added.next_slot_at)}",
        markup=False,
        highlight=False,
    )


def _exists_as_asked(engine: Engine, schedule: NewSchedule, taken: str) -> None:
    """Exit 0 when the schedule stored under the name of `schedule` is `schedule` (its slots, job,
    catch-up and concurrency key; paused or not); else exit 1 saying what differs."""
    try:
        stored = db.read(engine, store.get, schedule.tenant, schedule.name)
    except ScheduleNotFound:  # removed a moment ago
        refuse(f"schedule {schedule.tenant}/{schedule.name} was removed as this ran: run the command again")
    wanted = schedule.fields()
    differs = stored.differences(
        {field: wanted[field] for field in wanted if field not in ("tenant", "name")}
    )
    if differs:
        named = ", ".join("--cron/--every/--timezone" if f == "recurrence" else _option(f) for f in differs)
        refuse(f"{taken}, defined otherwise ({named}) (`outbox-bridge schedules list`)")
    out.print(f"exists: schedule {schedule.tenant}/{schedule.name}, as asked", markup=False, highlight=False)
    raise typer.Exit(0)


def _option(field: str) -> str:
    """A field as this command names it: `--catch-up`."""
    return f"--{field.replace('_', '-')}"


@schedules_app.command("list")
def schedules_list(as_json: JsonOption = False) -> None:
    """Every schedule: whether it is declared in code (`outbox_bridge.schedule`), its slots, its next slot
    (and how long it has been due, when a relay has not fired it yet), the last slot it fired and that
    slot's job, and whether it is paused."""
    _, engine = open_store()
    found = db.read(engine, store.list_all)
    now = clock.now()
    if as_json:
        print_json({"schedules": [views.schedule_document(s, now) for s in found]})
        return
    shown = table()
    columns = (
        "tenant",
        "name",
        "in code",
        "kind",
        "slots",
        "catch-up",
        "key",
        "state",
        "next slot",
        "due",
        "last fired",
        "job",
    )
    for column in columns:
        shown.add_column(column)
    for s in found:
        age = s.due_age(now)
        shown.add_row(
            s.tenant,
            s.name,
            "yes" if s.declared else "",
            s.kind,
            s.recurrence.describe(),
            s.catch_up.value,
            s.concurrency_key or "",
            f"paused by {s.paused_by} at {clock.isoformat(s.paused_at)}" if s.paused else "active",
            "-" if s.paused else slot_text(s.next_slot_at),
            "" if age is None else f"{format_age(age)} ago",
            "-" if s.last_slot_at is None else slot_text(s.last_slot_at),
            s.last_job_id or "",
        )
    out.print(shown)


def _change(fn: Any, tenant: str, name: str) -> Any:
    """`fn(conn, tenant, name, now, actor=...)` in a transaction, or exit 1 when there is no such schedule."""
    _, engine = open_store()
    try:
        return db.transact(engine, fn, tenant, name, clock.now(), actor=os_user())
    except ScheduleNotFound as exc:
        refuse(f"{exc} (`outbox-bridge schedules list`)")


@schedules_app.command("pause")
def schedules_pause(name: NameArgument, tenant: TenantOption) -> None:
    """Pause a schedule: it makes no job until resumed (the slots it passes meanwhile make none)."""
    changed = _change(store.pause, tenant, name)
    out.print(f"{'paused' if changed else 'already paused'}: schedule {tenant}/{name}", markup=False)


@schedules_app.command("resume")
def schedules_resume(name: NameArgument, tenant: TenantOption) -> None:
    """Resume a paused schedule from its next slot after now."""
    changed = _change(store.resume, tenant, name)
    out.print(f"{'resumed' if changed else 'not paused'}: schedule {tenant}/{name}", markup=False)


@schedules_app.command("remove")
def schedules_remove(name: NameArgument, tenant: TenantOption) -> None:
    """Remove a schedule. The jobs it made stay."""
    _change(store.remove, tenant, name)
    out.print(f"removed: schedule {tenant}/{name}", markup=False)
