"""What a job view says of workflows (`waiting_for`, `callback_of`), read for the jobs of one answer at once.

Most jobs take part in none, and their views must not pay for it: only a job that may wait (queued, and
due at no time: `WAITING_AT`) is looked up among the jobs that wait, and only a job whose key is a batch
callback's (`batch:<batch id>:callback`, the key the store gives it) among the callbacks. A page of jobs
costs at most one indexed query for each of the two, and none when no job on it is such a job. A client
may send a key of that form to `POST /jobs` itself; its job is then looked up, and is the callback of no
batch."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from outbox_bridge.api.schemas import NO_WORKFLOW, Workflow
from outbox_bridge.jobstore import workflows
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schema import WAITING_AT
from outbox_bridge.jobstore.states import State

Workflows = dict[str, Workflow]  # by job id; a job left out takes part in none


def may_wait(job: Job) -> bool:
    return job.state is State.QUEUED and job.available_at >= WAITING_AT


def may_be_callback(job: Job) -> bool:
    key = job.operation_key
    return key.startswith("batch:") and key.endswith(":callback")


def needs_reading(jobs: Sequence[Job]) -> bool:
    """Whether any of `jobs` may take part in a workflow (else `workflows_of` reads nothing)."""
    return any(may_wait(job) or may_be_callback(job) for job in jobs)


def workflows_of(conn: Connection, jobs: Sequence[Job]) -> Workflows:
    """The workflow fields of those of `jobs` that take part in one, in the caller's transaction."""
    waiting = workflows.waiting_for(conn, [job.id for job in jobs if may_wait(job)])
    callbacks = workflows.callbacks_of(conn, [job.id for job in jobs if may_be_callback(job)])
    return {
        job_id: Workflow(waiting.get(job_id, ()), callbacks.get(job_id)) for job_id in {*waiting, *callbacks}
    }


def workflow_of(conn: Connection, job: Job) -> Workflow:
    """`workflows_of` for one job."""
    return workflows_of(conn, [job]).get(job.id, NO_WORKFLOW)
