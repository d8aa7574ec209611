"""What `outbox-bridge status` prints on a terminal or into a pipe: the warnings first (bold red on a
terminal), who is alive and which processes are lost, with the jobs they hold, then the dashboard's
figures. `status --json` prints `views.status_document`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from outbox_bridge.broker.connection import QueueDepth
from outbox_bridge.core.clock import isoformat
from outbox_bridge.core.durations import format_age, format_duration
from outbox_bridge.core.recurrence import slot_text
from outbox_bridge.jobstore.conditions import ProcessStatus, lease_note
from outbox_bridge.jobstore.overview import Overview

# What `jobs.held_by` names, as `status` says it.
HELD_BY = {"kind": "kind cap", "key": "concurrency key", "rate": "rate"}

TableMaker = Callable[..., Table]


def print_status(
    out: Console, make_table: TableMaker, view: Overview, now: float, dead_letters: tuple[str, QueueDepth]
) -> None:
    """Print `view` as of `now`; `dead_letters` is the queue's name and what a probe of it found."""
    print_warnings(out, view)
    print_processes(out, make_table, view, now)
    table = make_table(title="jobs by state")
    table.add_column("state")
    table.add_column("jobs", justify="right")
    for state, count in view.counts.items():
        table.add_row(state, str(count))
    out.print(table)
    out.print(f"queued and due: {view.due.jobs}, oldest waiting {view.due.oldest_age_seconds:.1f}s")
    print_queues(out, make_table, view)
    out.print(
        f"outbox: {view.backlog.pending} pending, oldest waiting {view.backlog.oldest_age_seconds:.1f}s"
    )
    out.print("finished per minute (last 10): " + " ".join(str(n) for _, n in view.throughput))
    out.print(f"dead: {len(view.dead)}  unknown: {len(view.unknown)}  (outbox-bridge jobs list --state ...)")
    queue, depth = dead_letters
    out.print(f"dead-letter queue {queue}: {depth}", style="red" if depth.messages else None)
    print_paused_and_schedules(out, make_table, view, now)


def print_queues(out: Console, make_table: TableMaker, view: Overview) -> None:
    """Each named queue's due jobs, running jobs and how long its oldest due job has waited."""
    table = make_table(title="queues")
    table.add_column("queue")
    for column in ("waiting", "running", "oldest waiting"):
        table.add_column(column, justify="right")
    for queue in view.queues:
        table.add_row(queue.name, str(queue.waiting), str(queue.running), f"{queue.oldest_seconds:.1f}s")
    out.print(table)


def print_paused_and_schedules(out: Console, make_table: TableMaker, view: Overview, now: float) -> None:
    """The paused kinds in a line (since when, by whom, their queued jobs), then the schedules with their
    next slot and, for a slot due and not fired yet, its age."""
    paused = [
        f"{p.kind} (since {isoformat(p.paused_at)} by {p.paused_by}, {p.queued} queued)"
        for p in view.paused_kinds
    ]
    style = "yellow" if paused else None
    out.print(f"paused kinds: {', '.join(paused) or 'none'}", style=style, markup=False, highlight=False)
    if view.held:
        held = ", ".join(f"{h.kind} {h.queued} ({HELD_BY[h.held_by]})" for h in view.held)
        out.print(f"held back by limits: {held}", markup=False, highlight=False)
    if not view.schedules:
        return
    table = make_table(title="schedules")
    for column in ("tenant", "name", "kind", "slots", "next slot", "due", "last fired"):
        table.add_column(column)
    for s in view.schedules:
        age = s.due_age(now)
        table.add_row(
            s.tenant,
            s.name,
            s.kind,
            s.recurrence.describe(),
            "paused" if s.paused else slot_text(s.next_slot_at),
            "" if age is None else f"{format_age(age)} ago",
            "-" if s.last_slot_at is None else slot_text(s.last_slot_at),
        )
    out.print(table)


def print_warnings(out: Console, view: Overview) -> None:
    plain: dict[str, Any] = {"markup": False, "highlight": False}
    for alert in view.alerts:
        out.print(f"WARNING {alert.code}: {alert.message}", style="bold red", **plain)


def print_processes(out: Console, make_table: TableMaker, view: Overview, now: float) -> None:
    """Who is alive by role, then every process whose row is still there (lost ones in red) with the jobs it
    holds, then the running jobs whose worker is lost."""
    out.print("alive: " + ", ".join(f"{role} {n}" for role, n in view.alive.items()))
    if not view.statuses:
        return
    table = make_table(title="processes")
    columns = ("role", "host", "pid", "version", "up", "last seen", "condition", "jobs held", "soonest lease")
    for column in (*columns, "detail"):
        table.add_column(column)
    for s in view.statuses:
        p = s.process
        table.add_row(
            p.role,
            p.host,
            str(p.pid),
            p.version,
            format_duration(max(0.0, now - p.started_at)),
            f"{format_age(now - p.last_seen_at)} ago",
            condition_text(s),
            str(s.leases.jobs),
            lease_note(s.leases.soonest_expiry, now, worker_lost=not s.live),
            " ".join(f"{k}={v}" for k, v in sorted(p.detail.items())),
            style=None if s.live else "red",
        )
    out.print(table)
    print_worker_lost(out, make_table, view, now)


def condition_text(status: ProcessStatus) -> str:
    """`alive`, `late`, `lost`, or `lost (pid gone)` when its host found its pid gone."""
    return f"{status.condition.value} (pid gone)" if status.pid_gone else status.condition.value


def print_worker_lost(out: Console, make_table: TableMaker, view: Overview, now: float) -> None:
    if not view.worker_lost:
        return
    table = make_table(title="running jobs whose worker is lost")
    for column in ("id", "tenant", "kind", "worker", "lease"):
        table.add_column(column)
    for job in view.worker_lost:
        lease = lease_note(job.lease_expires_at, now, worker_lost=True)
        table.add_row(job.id, job.tenant, job.kind, job.lease_owner or "", lease, style="red")
    out.print(table)
