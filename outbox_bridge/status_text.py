"""What `outbox-bridge status` prints on a terminal or into a pipe: the warnings first (bold red on a
terminal), who is alive, then the dashboard's figures. `status --json` prints `views.status_document`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from outbox_bridge.broker.connection import QueueDepth
from outbox_bridge.core.durations import format_duration
from outbox_bridge.jobstore.overview import Overview

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
    out.print(
        f"outbox: {view.backlog.pending} pending, oldest waiting {view.backlog.oldest_age_seconds:.1f}s"
    )
    out.print("finished per minute (last 10): " + " ".join(str(n) for _, n in view.throughput))
    out.print(f"dead: {len(view.dead)}  unknown: {len(view.unknown)}  (outbox-bridge jobs list --state ...)")
    queue, depth = dead_letters
    out.print(f"dead-letter queue {queue}: {depth}", style="red" if depth.messages else None)


def print_warnings(out: Console, view: Overview) -> None:
    plain: dict[str, Any] = {"markup": False, "highlight": False}
    for alert in view.alerts:
        out.print(f"WARNING {alert.code}: {alert.message}", style="bold red", **plain)


def print_processes(out: Console, make_table: TableMaker, view: Overview, now: float) -> None:
    out.print("alive: " + ", ".join(f"{role} {n}" for role, n in view.alive.items()))
    if not view.processes:
        return
    table = make_table(title="live processes")
    for column in ("role", "host", "pid", "version", "up", "last seen", "detail"):
        table.add_column(column)
    for p in view.processes:
        detail = " ".join(f"{k}={v}" for k, v in sorted(p.detail.items()))
        up = format_duration(max(0.0, now - p.started_at))
        seen = f"{max(0.0, now - p.last_seen_at):.1f}s ago"
        table.add_row(p.role, p.host, str(p.pid), p.version, up, seen, detail)
    out.print(table)
