"""`outbox-bridge batches`: list batches and show one, its members with their states and its callback job.
Read only: a batch's members are jobs, and `outbox-bridge jobs ...` acts on them."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer
from sqlalchemy import Connection

from outbox_bridge import views
from outbox_bridge.api.schemas import BatchView
from outbox_bridge.console import JsonOption, open_store, out, print_json, refuse, table
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, queries, workflows
from outbox_bridge.jobstore.filters import JobFilter
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import State
from outbox_bridge.jobstore.workflows import Batch

batches_app = typer.Typer(
    help="Batches: jobs accepted together, and the callback job each runs once they end."
)


class BatchState(StrEnum):
    running = "running"
    done = "done"


TenantOption = Annotated[str | None, typer.Option(help="Only this tenant's batches.")]


def batch_document(batch: Batch) -> dict[str, Any]:
    """The api's batch view of `batch` (`jobs`: the member ids in order; `counts` by state) plus the
    operator's `tenant` and `owner`."""
    return {**BatchView.of(batch).model_dump(mode="json"), "tenant": batch.tenant, "owner": batch.owner}


def counts_by_state(batch: Batch) -> dict[str, int]:
    """The batch's members counted by state, in the order of the job states."""
    counts = batch.counts
    return {s.value: counts[s.value] for s in State if s.value in counts}


def counts_text(batch: Batch) -> str:
    return " ".join(f"{state}={n}" for state, n in counts_by_state(batch).items())


@batches_app.command("list")
def batches_list(
    tenant: TenantOption = None,
    state: Annotated[BatchState | None, typer.Option(help="Only batches in this state.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="Where the previous page ended (its next_cursor).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List batches, newest first: each one's members, their counts by state, and its callback job once
    every member has ended (`-` until then, and for a batch without one)."""
    try:
        before = None if cursor is None else queries.decode_cursor(cursor)
    except queries.BadCursor:
        refuse("--cursor is not a next_cursor that `batches list --json` printed")
    _, engine = open_store()
    wanted = None if state is None else state.value
    found = db.read(
        engine, workflows.list_batches, tenant=tenant, state=wanted, limit=limit + 1, before=before
    )
    page = found[:limit]
    last = page[-1] if len(found) > limit else None
    if as_json:
        next_cursor = None if last is None else queries.encode_position(last.created_at, last.id)
        print_json({"items": [batch_document(b) for b in page], "next_cursor": next_cursor})
        return
    shown = table()
    for column in ("id", "tenant", "state", "members", "counts", "callback job", "created", "done"):
        shown.add_column(column)
    for b in page:
        shown.add_row(
            b.id,
            b.tenant,
            b.state,
            str(len(b.jobs)),
            counts_text(b),
            b.callback_job_id or "-",
            clock.isoformat(b.created_at),
            clock.isoformat(b.done_at) or "-",
        )
    out.print(shown)


@batches_app.command("show")
def batches_show(
    batch_id: Annotated[str, typer.Argument(metavar="ID", help="A batch id.")],
    tenant: Annotated[str | None, typer.Option(help="Only if the batch is this tenant's.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Show one batch: each member with its state, in the request's order, and its callback job."""
    _, engine = open_store()
    found = db.read(engine, _batch_with_jobs, batch_id.strip().lower(), tenant)
    if found is None:
        of_tenant = "" if tenant is None else f" of tenant {tenant!r}"
        refuse(f"no batch {batch_id!r}{of_tenant}: `outbox-bridge batches list` shows the ids there are")
    batch, jobs = found
    callback = None if batch.callback_job_id is None else jobs.get(batch.callback_job_id)
    if as_json:
        print_json(show_document(batch, jobs, callback))
        return
    _print_batch(batch, callback)
    _print_members(batch, jobs)


def _batch_with_jobs(
    conn: Connection, batch_id: str, tenant: str | None
) -> tuple[Batch, dict[str, Job]] | None:
    """The batch (of `tenant`, when given) and its members' and callback's jobs by id, in one read."""
    batch = workflows.get_batch(conn, batch_id, tenant)
    if batch is None:
        return None
    ids = [*batch.jobs, *([batch.callback_job_id] if batch.callback_job_id else [])]
    found = queries.find_jobs(conn, JobFilter(ids=frozenset(ids)), limit=len(ids)).items
    return batch, {job.id: job for job in found}


def show_document(batch: Batch, jobs: dict[str, Job], callback: Job | None) -> dict[str, Any]:
    """`batches show --json`: the batch, each member as `jobs show --json` has a job (in the request's
    order), and the callback job (null until every member has ended, and for a batch without one)."""
    return {
        "batch": batch_document(batch),
        "members": [views.job_document(jobs[job_id]) for job_id in batch.jobs if job_id in jobs],
        "callback": None if callback is None else views.job_document(callback),
    }


def _print_batch(batch: Batch, callback: Job | None) -> None:
    for name, value in (
        ("id", batch.id),
        ("tenant", batch.tenant),
        ("owner", batch.owner),
        ("state", batch.state),
        ("members", str(len(batch.jobs))),
        ("counts", counts_text(batch)),
        ("created", clock.isoformat(batch.created_at)),
        ("done", clock.isoformat(batch.done_at) or "-"),
    ):
        out.print(f"{name:>13}: {value}", markup=False, highlight=False)
    if callback is not None:
        said = f"{callback.id} ({callback.kind}, {callback.state.value})"
    elif batch.state == "running":
        said = "- (accepted once every member has ended, when the batch names one)"
    else:
        said = "none"
    out.print(f"{'callback job':>13}: {said}", markup=False, highlight=False)


def _print_members(batch: Batch, jobs: dict[str, Job]) -> None:
    shown = table(title="members")
    for column in ("#", "id", "kind", "state", "attempts", "error"):
        shown.add_column(column)
    for position, (job_id, state) in enumerate(batch.jobs.items()):
        job = jobs.get(job_id)
        shown.add_row(
            str(position),
            job_id,
            "" if job is None else job.kind,
            state.value,
            "" if job is None else str(job.attempts),
            "" if job is None else job.error_code or "",
        )
    out.print(shown)
