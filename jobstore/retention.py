"""The job retention in the store: jobs finished before a cutoff are deleted, a batch per transaction, and
what a sweep of the results directory needs to know about the jobs it finds there.

A job is deleted only by one guarded DELETE whose WHERE clause holds the retention's rule (a `PRUNABLE`
state, finished before the cutoff), so a job chosen for deletion that an operator requeued (and a worker
may have claimed) since then is left alone. Its attempts and outbox rows go with it, by the foreign keys'
ON DELETE CASCADE (on for every SQLite connection, see `jobstore.db`), as do the rows of any other table
that references a job that way (its completion webhooks' deliveries and their attempts). `unknown` jobs are
never deleted: they wait for an operator; nor is a job whose webhook delivery is still pending, until it
is delivered or has failed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, and_, delete, select, tuple_

from outbox_bridge.jobstore.schema import attempts, jobs, state_in, webhook_deliveries
from outbox_bridge.jobstore.states import PRUNABLE

# Jobs deleted per transaction: small enough that SQLite's write lock is held briefly.
BATCH = 500


def _expired(cutoff: float) -> ColumnElement[bool]:
    # A job whose completion webhook is still pending waits for it: its delivery goes with it.
    pending = (
        select(webhook_deliveries.c.id)
        .where(webhook_deliveries.c.job_id == jobs.c.id, webhook_deliveries.c.state == "pending")
        .exists()
    )
    return and_(state_in(PRUNABLE), jobs.c.finished_at < cutoff, ~pending)


def expired(
    conn: Connection, cutoff: float, *, limit: int = BATCH, after: tuple[float, str] | None = None
) -> list[tuple[float, str]]:
    """(finish time, id) of up to `limit` jobs the retention deletes at `cutoff`, oldest first (read from
    the finished jobs' index, `ix_jobs_finished_state_finished_at`), after the job `after` in that order."""
    query = (
        select(jobs.c.finished_at, jobs.c.id)
        .where(_expired(cutoff))
        .order_by(jobs.c.finished_at, jobs.c.id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(tuple_(jobs.c.finished_at, jobs.c.id) > after)
    return [(float(finished_at), str(job_id)) for finished_at, job_id in conn.execute(query).all()]


def delete_expired(conn: Connection, job_ids: Collection[str], cutoff: float) -> list[str]:
    """Delete those of `job_ids` that the retention still deletes at `cutoff`, with their attempts and
    outbox rows, in one guarded DELETE. Returns the ids it deleted: a job that is no longer finished before
    `cutoff` (requeued, then perhaps running, since it was chosen) is not deleted and not returned."""
    if not job_ids:
        return []
    statement = delete(jobs).where(jobs.c.id.in_(list(job_ids)), _expired(cutoff)).returning(jobs.c.id)
    return list(conn.execute(statement).scalars())


def prune(conn: Connection, cutoff: float, *, limit: int = BATCH) -> list[str]:
    """Delete up to `limit` of the jobs the retention deletes at `cutoff`; returns their ids."""
    return delete_expired(conn, [job_id for _, job_id in expired(conn, cutoff, limit=limit)], cutoff)


@dataclass(frozen=True)
class JobFiles:
    """What the store says about the files of one job: the attempts whose files stay (the one the result
    pointer names, and any still running) and every attempt it ever had."""

    keep: frozenset[str]
    attempts: frozenset[str]


def job_files(conn: Connection, job_ids: Sequence[str]) -> dict[str, JobFiles]:
    """`JobFiles` for each of `job_ids` that exists; a job that does not is absent."""
    if not job_ids:
        return {}
    results = dict(
        conn.execute(select(jobs.c.id, jobs.c.result_attempt_id).where(jobs.c.id.in_(job_ids))).all()
    )
    rows = conn.execute(
        select(attempts.c.job_id, attempts.c.id, attempts.c.outcome).where(attempts.c.job_id.in_(job_ids))
    ).all()
    every: defaultdict[str, set[str]] = defaultdict(set)
    keep: defaultdict[str, set[str]] = defaultdict(set)
    for job_id, attempt_id, outcome in rows:
        every[job_id].add(attempt_id)
        if outcome == "running" or attempt_id == results.get(job_id):
            keep[job_id].add(attempt_id)
    return {job_id: JobFiles(frozenset(keep[job_id]), frozenset(every[job_id])) for job_id in results}
