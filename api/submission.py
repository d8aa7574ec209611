"""The rules a job request must meet before it is written, the same for `POST /jobs` and for
`outbox_bridge.enqueue`: a kind the deployment accepts, a payload that fits it (as the kind reads it), a
start that can be kept. Each refusal is the problem the api answers with."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from outbox_bridge.api.payloads import check_encodable
from outbox_bridge.api.problems import INVALID_PAYLOAD, INVALID_REQUEST, UNKNOWN_KIND, issues
from outbox_bridge.api.schemas import JobCreate
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import Kind
from outbox_bridge.handlers.registry import KINDS, accepted, is_accepted
from outbox_bridge.jobstore.schedule import Schedule


def accept_fields(
    job: JobCreate, settings: Settings, now: float, *, tenant: str, owner: str, key: str
) -> dict[str, Any]:
    """The keyword arguments of `intake.accept` (and of the api's group commit) for `job`: its kind, the
    payload as the kind reads it, its start, deadline, priority (the kind's default where the request names
    none) and concurrency key, the attempt budget (the kind's `max_attempts` where it sets one, else the
    deployment's), its queue and uniqueness window. `ProblemError` (400) for a kind not accepted, a payload
    that does not fit, or a start that cannot be kept."""
    kind = _accepted_kind(job.kind, settings)
    policy = kind.policy
    return {
        "tenant": tenant, "owner": owner, "kind": kind.name, "payload": _validated_payload(kind, job.payload),
        "operation_key": key, "now": now, "max_attempts": policy.max_attempts or settings.max_attempts,
        "deadline_seconds": job.deadline_seconds, "schedule": _schedule(job, now),
        "priority": job.priority_rank(policy.priority), "concurrency_key": job.concurrency_key,
        "queue": policy.queue, "unique_for_seconds": policy.unique_for_seconds,
    }  # fmt: skip


def _accepted_kind(name: str, settings: Settings) -> Kind:
    if not is_accepted(settings, name):
        raise UNKNOWN_KIND.error(f"This deployment accepts these kinds: {', '.join(accepted(settings))}.")
    return KINDS[name]


def _schedule(job: JobCreate, now: float) -> Schedule | None:
    """The start the request asks for, if any. 400 `invalid-request` for both a delay and a time, for a
    start more than 30 days ahead, and for one the job's deadline would pass before."""
    try:
        schedule = job.schedule()
    except ValueError:
        raise INVALID_REQUEST.error(
            "Give delay_seconds or run_at, not both.",
            errors=[
                {"loc": ["body"], "msg": "delay_seconds and run_at exclude each other", "type": "schedule"}
            ],
        ) from None
    refusal = schedule.refusal(now, job.deadline_seconds) if schedule is not None else None
    if refusal is not None:
        raise INVALID_REQUEST.error(
            f"The job cannot be scheduled: {refusal}.",
            errors=[
                {
                    "loc": ["body", "run_at" if job.run_at else "delay_seconds"],
                    "msg": refusal,
                    "type": "schedule",
                }
            ],
        )
    return schedule


def _validated_payload(kind: Kind, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as the kind reads it (`Kind.normalise`): what is stored and fingerprinted, so requests
    that mean the same job are the same request. 400 `invalid-payload` when it does not fit the kind."""
    check_encodable(payload)
    try:
        return kind.normalise(payload)
    except ValidationError as exc:
        raise INVALID_PAYLOAD.error(
            f"The payload is not a valid {kind.name} payload.", errors=issues(exc, prefix=("payload",))
        ) from None
