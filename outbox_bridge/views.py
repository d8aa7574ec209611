"""What `outbox-bridge status --json`, `jobs list --json` and `jobs show --json` print: plain JSON
documents with stable keys, whole ids, and times as the api's job view gives them (RFC 3339 UTC, from
`core.clock.isoformat`).

A job here is the api's job view (`api.schemas.JobView`, so the two never drift apart) plus what only an
operator sees: the tenant and owner, the epoch, the attempt budget, the lease and the result pointer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from outbox_bridge.api.schemas import JobView
from outbox_bridge.core.clock import isoformat
from outbox_bridge.core.recurrence import slot_text
from outbox_bridge.jobstore.conditions import ProcessStatus, lease_note
from outbox_bridge.jobstore.heartbeats import Process
from outbox_bridge.jobstore.overview import Overview
from outbox_bridge.jobstore.pausing import PausedKind
from outbox_bridge.jobstore.records import Attempt, Job, OperatorAction
from outbox_bridge.jobstore.schedules import PeriodicSchedule

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
    """A process as its heartbeat row says (`detail` is what it reports about itself)."""
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


def status_process_document(status: ProcessStatus) -> dict[str, Any]:
    """A process as `status --json` lists it: its heartbeat row, its `condition` (`alive`, `late` or
    `lost`), whether it was found gone on this host (`pid_gone`), and the running jobs it holds, counted
    from the store (`held_jobs`, `soonest_lease_expires_at`)."""
    return {
        **process_document(status.process),
        "condition": status.condition.value,
        "pid_gone": status.pid_gone,
        "held_jobs": status.leases.jobs,
        "soonest_lease_expires_at": isoformat(status.leases.soonest_expiry),
    }


def lost_process_document(status: ProcessStatus, worker_lost: list[Job]) -> dict[str, Any]:
    """A lost process as `status --json` lists it, with the ids of the running jobs it held (`jobs`)."""
    held = [j.id for j in worker_lost if status.worker is not None and j.lease_owner == status.worker]
    return {**status_process_document(status), "jobs": held}


def worker_lost_document(job: Job, now: float) -> dict[str, Any]:
    """A running job whose worker is lost: the job, and its lease as `status` prints it."""
    return {**job_document(job), "lease": lease_note(job.lease_expires_at, now, worker_lost=True)}


def schedule_document(schedule: PeriodicSchedule, now: float) -> dict[str, Any]:
    """A schedule as `schedules list --json` and `status --json` list it: whether it is `declared` in code
    (`outbox_bridge.schedule`), its slots (`cron` and `timezone`, or `every_seconds`), its job (with the
    `concurrency_key` its jobs carry, or null), its `next_slot` (null while paused), `due_seconds` (how long
    that slot has been due without its job: null when it is not due), the last slot fired and its job, and
    who paused it and when (null while it runs). Slots are RFC 3339 UTC to the second, as the slots' keys
    name them."""
    s, age = schedule, schedule.due_age(now)
    return {
        "tenant": s.tenant,
        "name": s.name,
        "declared": s.declared,
        "kind": s.kind,
        "payload": s.payload,
        "priority": s.priority.label,
        "cron": s.recurrence.cron,
        "timezone": s.recurrence.timezone,
        "every_seconds": s.recurrence.every_seconds,
        "catch_up": s.catch_up.value,
        "concurrency_key": s.concurrency_key,
        "paused": s.paused,
        "paused_at": isoformat(s.paused_at),
        "paused_by": s.paused_by,
        "next_slot": None if s.paused else slot_text(s.next_slot_at),
        "due_seconds": None if age is None else round(age, 3),
        "last_fired_slot": None if s.last_slot_at is None else slot_text(s.last_slot_at),
        "last_job_id": s.last_job_id,
        "created_at": isoformat(s.created_at),
        "created_by": s.created_by,
    }


def paused_kind_document(paused: PausedKind) -> dict[str, Any]:
    """A paused kind: since when, by whom, why, and how many of its jobs are queued."""
    return {
        "kind": paused.kind,
        "paused_at": isoformat(paused.paused_at),
        "paused_by": paused.paused_by,
        "note": paused.note,
        "queued": paused.queued,
    }


def status_document(view: Overview, dead_letter_queue: str, dead_letters: QueueDepth) -> dict[str, Any]:
    """`status --json`: the dashboard's figures. The dead-letter queue's `messages` is null when they could
    not be counted, and its `problem` says why (the broker did not answer, or has no such queue).
    `processes` lists every live (alive or late) api process, relay, consumer and worker (`alive` counts
    them by role); `lost_processes` those whose row is still there but that are lost, each with the ids of
    the running jobs it held (`jobs`); `worker_lost_jobs` every running job whose worker is lost (a lost
    process, or no live one). `warnings` is what the dashboard shows in red, each with a stable `code`
    (`no-consumer`, `no-relay`, `worker-lost`, `queued-too-long`), empty when all is well. `paused_kinds`
    and `schedules` are as `paused_kind_document` and `schedule_document` say; `queued_due` leaves out the
    jobs of paused kinds. `held` counts the queued jobs each flow limit holds back, by kind (`limit`: `kind`,
    `key` or `rate`). `queues` lists each named queue with a due or a running job, and `default` always, by
    name: `waiting` (due, as `queued_due` counts them), `running`, `oldest_seconds` (0 when none waits)."""
    return {
        "warnings": [{"code": a.code, "message": a.message} for a in view.alerts],
        "alive": view.alive,
        "processes": [status_process_document(s) for s in view.statuses if s.live],
        "lost_processes": [lost_process_document(s, view.worker_lost) for s in view.lost],
        "worker_lost_jobs": [worker_lost_document(j, view.at) for j in view.worker_lost],
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
        "paused_kinds": [paused_kind_document(p) for p in view.paused_kinds],
        "schedules": [schedule_document(s, view.at) for s in view.schedules],
        "held": [{"kind": h.kind, "limit": h.held_by, "queued": h.queued} for h in view.held],
        "queues": [
            {"name": q.name, "waiting": q.waiting, "running": q.running, "oldest_seconds": q.oldest_seconds}
            for q in view.queues
        ],
    }


def _error(code: str | None, message: str | None) -> dict[str, str] | None:
    return {"code": code, "message": message or ""} if code else None
