"""What `outbox-bridge status --json`, `jobs list --json` and `jobs show --json` print: plain JSON
documents with stable keys, whole ids, and times as the api's job view gives them (RFC 3339 UTC, from
`core.clock.isoformat`).

A job here is the api's job view (`api.schemas.JobView`, so the two never drift apart) plus what only an
operator sees: the tenant and owner, the epoch, the attempt budget, the lease and the result pointer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from outbox_bridge.api.schemas import JobView
from outbox_bridge.core.clock import isoformat
from outbox_bridge.jobstore.heartbeats import Process
from outbox_bridge.jobstore.overview import Overview
from outbox_bridge.jobstore.records import Attempt, Job, OperatorAction

if TYPE_CHECKING:
    from outbox_bridge.broker.connection import QueueDepth


def job_document(job: Job) -> dict[str, Any]:
    """The api's job view of `job` plus the operator's fields (not the payload: `show_document` has it)."""
    return {
        **JobView.of(job).model_dump(mode="json"),
        "tenant": job.tenant,
        "owner": job.owner,
        "epoch": job.epoch,
        "max_attempts": job.max_attempts,
        "lease_owner": job.lease_owner,
        "lease_expires_at": isoformat(job.lease_expires_at),
        "started_at": isoformat(job.started_at),
        "finished_at": isoformat(job.finished_at),
        "result_attempt_id": job.result_attempt_id,
    }


def attempt_document(attempt: Attempt) -> dict[str, Any]:
    return {
        "id": attempt.id,
        "epoch": attempt.epoch,
        "worker": attempt.worker,
        "outcome": attempt.outcome,
        "started_at": isoformat(attempt.started_at),
        "ended_at": isoformat(attempt.ended_at),
        "external_started_at": isoformat(attempt.external_started_at),
        "error": _error(attempt.error_code, attempt.error_message),
    }


def action_document(action: OperatorAction) -> dict[str, Any]:
    return {"action": action.action, "actor": action.actor, "note": action.note, "at": isoformat(action.at)}


def show_document(job: Job, attempts: list[Attempt], actions: list[OperatorAction]) -> dict[str, Any]:
    """`jobs show --json`: the job, its input (payload, operation key), every attempt and every operator
    action, oldest first."""
    return {
        "job": job_document(job),
        "payload": job.payload,
        "operation_key": job.operation_key,
        "attempts": [attempt_document(a) for a in attempts],
        "operator_actions": [action_document(a) for a in actions],
    }


def list_document(jobs: list[Job], next_cursor: str | None) -> dict[str, Any]:
    """`jobs list --json`: the api's page shape, `{"items": [...], "next_cursor": ...}`."""
    return {"items": [job_document(j) for j in jobs], "next_cursor": next_cursor}


def process_document(process: Process) -> dict[str, Any]:
    """A live process as its heartbeat row says (`detail` is what it reports about itself)."""
    return {
        "id": process.id,
        "role": process.role,
        "host": process.host,
        "pid": process.pid,
        "version": process.version,
        "started": isoformat(process.started_at),
        "last_seen": isoformat(process.last_seen_at),
        "detail": process.detail,
    }


def status_document(view: Overview, dead_letter_queue: str, dead_letters: QueueDepth) -> dict[str, Any]:
    """`status --json`: the dashboard's figures. The dead-letter queue's `messages` is null when they could
    not be counted, and its `problem` says why (the broker did not answer, or has no such queue).
    `processes` lists every live relay, consumer and worker (`alive` counts them by role); `warnings` is
    what the dashboard shows in red, each with a stable `code` (`no-consumer`, `no-relay`,
    `queued-too-long`), empty when all is well."""
    return {
        "warnings": [{"code": a.code, "message": a.message} for a in view.alerts],
        "alive": view.alive,
        "processes": [process_document(p) for p in view.processes],
        "counts": view.counts,
        "queued_due": {"jobs": view.due.jobs, "oldest_age_seconds": view.due.oldest_age_seconds},
        "outbox": {"pending": view.backlog.pending, "oldest_age_seconds": view.backlog.oldest_age_seconds},
        "finished_per_minute": [{"minute": isoformat(start), "jobs": n} for start, n in view.throughput],
        "dead": [job_document(j) for j in view.dead],
        "unknown": [job_document(j) for j in view.unknown],
        "dead_letter_queue": {
            "name": dead_letter_queue,
            "messages": dead_letters.messages,
            "problem": dead_letters.problem,
        },
    }


def _error(code: str | None, message: str | None) -> dict[str, str] | None:
    return {"code": code, "message": message or ""} if code else None
