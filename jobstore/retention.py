"""The job retention in the store: jobs finished before a cutoff are deleted, a batch per transaction, and
what a sweep of the results directory needs to know about the jobs it finds there.

A job is deleted only by one guarded DELETE whose WHERE clause holds the retention's rule (a `PRUNABLE`
state, finished before the cutoff), so a job chosen for deletion that an operator requeued (and a worker
may have claimed) since then is left alone. Its attempts and outbox rows go with it, by the foreign keys'
ON DELETE CASCADE (on for every SQLite connection, see `jobstore.db`), as do the rows of any other table
that references a job that way (its completion webhooks' deliveries and their attempts). `unknown` jobs are
never deleted: they wait for an operator; nor is a job whose webhook delivery is still pending, until it
is delivered or has failed. The rule is written once in each of the driver's statements that apply it
(`upkeep.sql`: `jobs_expired`, `jobs_expired_after`, `jobs_delete_expired`), with `PRUNABLE`'s states.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, drivers

# Jobs deleted per transaction: small enough that SQLite's write lock is held briefly.
BATCH = 500


def expired(
    conn: Connection, cutoff: float, *, limit: int = BATCH, after: tuple[float, str] | None = None
) -> list[tuple[float, str]]:
    """(finish time, id) of up to `limit` jobs the retention deletes at `cutoff`, oldest first (read from
    the finished jobs' index, `ix_jobs_finished_state_finished_at`), after the job `after` in that order."""
    if after is None:
        rows = db.execute(conn, "jobs_expired", {"cutoff": cutoff, "limit": limit})
    else:
        params = {"cutoff": cutoff, "limit": limit, "after_finished_at": after[0], "after_id": after[1]}
        rows = db.execute(conn, "jobs_expired_after", params)
    return [(float(finished_at), str(job_id)) for finished_at, job_id in rows]


def delete_expired(conn: Connection, job_ids: Collection[str], cutoff: float) -> list[str]:
    """Delete those of `job_ids` that the retention still deletes at `cutoff`, with their attempts and
    outbox rows, in one guarded DELETE. Returns the ids it deleted: a job that is no longer finished before
    `cutoff` (requeued, then perhaps running, since it was chosen) is not deleted and not returned."""
    if not job_ids:
        return []
    params = {"ids": drivers.of(conn).array(list(job_ids)), "cutoff": cutoff}
    return [str(job_id) for (job_id,) in db.execute(conn, "jobs_delete_expired", params)]


def prune(conn: Connection, cutoff: float, *, limit: int = BATCH) -> list[str]:
    """Delete up to `limit` of the jobs the retention deletes at `cutoff`; returns their ids. The batches done
    before `cutoff` go too (a finished member of a batch still running stays until the batch is done)."""
    deleted = delete_expired(conn, [job_id for _, job_id in expired(conn, cutoff, limit=limit)], cutoff)
    db.execute(conn, "batches_delete_expired", {"cutoff": cutoff})
    return deleted


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
    ids = drivers.of(conn).array(list(job_ids))
    results = dict(db.execute(conn, "jobs_result_attempts", {"ids": ids}))
    rows = db.execute(conn, "jobs_attempt_outcomes", {"ids": ids})
    every: defaultdict[str, set[str]] = defaultdict(set)
    keep: defaultdict[str, set[str]] = defaultdict(set)
    for job_id, attempt_id, outcome in rows:
        every[job_id].add(attempt_id)
        if outcome == "running" or attempt_id == results.get(job_id):
            keep[job_id].add(attempt_id)
    return {job_id: JobFiles(frozenset(keep[job_id]), frozenset(every[job_id])) for job_id in results}
