"""Typed, immutable views of rows, as the store hands them out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.states import State


@dataclass(frozen=True)
class Job:
    id: str
    tenant: str
    owner: str
    operation_key: str
    fingerprint: str
    kind: str
    payload: dict[str, Any]
    state: State
    epoch: int
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: float | None
    available_at: float
    deadline_at: float | None
    cancel_requested: bool
    external_epoch: int | None
    checkpoint: dict[str, Any] | None
    checkpoint_epoch: int | None
    result_attempt_id: str | None
    error_code: str | None
    error_message: str | None
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    run_at: float | None = None  # the start the request asked for; None: as soon as possible
    traceparent: str | None = None  # the job's trace context (`telemetry.tracing`); None without tracing
    priority: Priority = Priority.NORMAL
    schedule_name: str | None = None  # the schedule that made it for one of its slots (`jobstore.schedules`)
    concurrency_key: str | None = None  # at most CONCURRENCY_KEY_MAX_RUNNING of its tenant's run at once
    # While queued, the flow limit that holds it back (`limits.HoldReason`); `paused` as the reads of a job's
    # view give it, when its kind is paused (`pausing`).
    held_by: str | None = None
    running_since: float | None = None  # running: when its thread began; None while it waits for one
    queue: str = "default"  # the named queue its kind runs on
    snoozes: int = 0  # how often its kind snoozed it (`outbox_bridge.Snooze`)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        values = dict(row)
        values["payload"] = json.loads(values["payload"])
        values["checkpoint"] = json.loads(values["checkpoint"]) if values["checkpoint"] else None
        values["state"] = State(values["state"])
        values["cancel_requested"] = bool(values["cancel_requested"])
        values["priority"] = Priority(values.get("priority", Priority.NORMAL))
        return cls.made(values)

    @classmethod
    def made(cls, values: dict[str, Any]) -> Job:
        """`Job(**values)`, `values` naming fields only, without the frozen dataclass's `__init__`, which
        sets each of the 32 fields through `object.__setattr__` (about ten times the cost, on every job
        read and every job accepted). A field `values` leaves out reads as its default."""
        job = object.__new__(cls)
        job.__dict__.update(values)
        return job


@dataclass(frozen=True)
class Attempt:
    id: str
    job_id: str
    epoch: int
    worker: str
    started_at: float
    ended_at: float | None
    outcome: str
    external_started_at: float | None
    output: dict[str, Any] | None
    error_code: str | None
    error_message: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Attempt:
        values = dict(row)
        values["output"] = json.loads(values["output"]) if values["output"] else None
        return cls(**values)


@dataclass(frozen=True)
class OperatorAction:
    """One thing an operator did to a job: `action` (see `jobstore.operator.Action`), by `actor`, at `at`."""

    id: int
    job_id: str
    action: str
    actor: str
    note: str | None
    at: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> OperatorAction:
        return cls(**dict(row))


@dataclass(frozen=True)
class Claim:
    """What a worker holds after a successful claim: the fence it must present on every write."""

    job_id: str
    attempt_id: str
    epoch: int
    attempts: int
    worker: str
    kind: str
    payload: dict[str, Any]
    tenant: str
    owner: str
    operation_key: str
    deadline_at: float | None
    lease_expires_at: float
    checkpoint: dict[str, Any] | None
    created_at: float
    traceparent: str | None = None  # the job's stored trace context: a run span's parent without a delivery
    concurrency_key: str | None = None  # at most CONCURRENCY_KEY_MAX_RUNNING of its tenant's run at once
    queue: str = "default"  # the named queue the job was accepted on (`jobs.queue`)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Canonical JSON: the same value always gives the same text."""
    return _CANONICAL.encode(value)
