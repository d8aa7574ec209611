"""The rules a job request must meet before it is written, the same for `POST /jobs`, each job of
`POST /batches` and `outbox_bridge.enqueue`: a kind the deployment accepts, a payload that fits it (as the
kind reads it), a start that can be kept, and jobs to wait for that its tenant has. Each refusal is the
problem the api answers with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from outbox_bridge.api.payloads import check_encodable
from outbox_bridge.api.problems import INVALID_PAYLOAD, INVALID_REQUEST, UNKNOWN_KIND, ProblemError, issues
from outbox_bridge.api.schemas import BatchCreate, JobCreate
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import Kind
from outbox_bridge.handlers.registry import KINDS, accepted, is_accepted
from outbox_bridge.jobstore.schedule import Schedule
from outbox_bridge.jobstore.workflows import After, UnknownDependencies

# What a batch's callback cannot carry: it is accepted when the batch ends, as the job the request named,
# without a start of its own, jobs to wait for or a concurrency key.
NOT_FOR_A_CALLBACK = ("after", "delay_seconds", "run_at", "concurrency_key")


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


def batch_fields(
    batch: BatchCreate, settings: Settings, now: float, *, tenant: str, owner: str
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """`accept_fields` of each member of `batch`, and of its callback (None without one). Each refusal is
    the member's or the callback's own, its `detail` and `errors` saying which (`jobs[3]`, `callback`). The
    keys are the store's to set (`workflows.accept_batch`)."""
    members = [
        _within(("jobs", index), accept_fields, job, settings, now, tenant=tenant, owner=owner, key="")
        for index, job in enumerate(batch.jobs)
    ]
    callback = batch.callback
    if callback is None:
        return members, None
    named = [name for name in NOT_FOR_A_CALLBACK if getattr(callback, name) is not None]
    if named:
        raise INVALID_REQUEST.error(
            f"A batch's callback takes no {', '.join(named)}: it is accepted when the last member ends.",
            errors=[{"loc": ["body", "callback", name], "msg": "not for a callback", "type": "callback"}
                    for name in named],
        )  # fmt: skip
    fields = _within(
        ("callback",), accept_fields, callback, settings, now, tenant=tenant, owner=owner, key=""
    )
    return members, fields


def _within(
    where: tuple[str | int, ...], check: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any
) -> dict[str, Any]:
    """`check(*args, **kwargs)`, its refusal said of the part of the body at `where`."""
    try:
        return check(*args, **kwargs)
    except ProblemError as refused:
        raise _moved(refused, where) from None


def _moved(refused: ProblemError, where: tuple[str | int, ...]) -> ProblemError:
    name = "".join(f"[{part}]" if isinstance(part, int) else part for part in where)
    extensions = dict(refused.extensions)
    if extensions.get("errors"):
        extensions["errors"] = [
            {**issue, "loc": _within_body(where, issue["loc"])} for issue in extensions["errors"]
        ]
    return refused.problem.error(f"{name}: {refused.detail}", headers=refused.headers, **extensions)


def _within_body(where: tuple[str | int, ...], loc: list[str | int]) -> list[str | int]:
    """`loc`, said of a job's body (`["body", "run_at"]`, or `["payload", ...]`), as said of the part of a
    batch's body at `where`."""
    return ["body", *where, *(loc[1:] if loc[:1] == ["body"] else loc)]


def unknown_dependencies(
    unknown: UnknownDependencies, after: After, where: Sequence[str | int], *, of: str = ""
) -> ProblemError:
    """The 400 for `after` (at `where` in the body; `of` names its job in the detail) naming jobs its
    tenant does not have: an unknown id and another tenant's job are told apart by nothing."""
    return INVALID_REQUEST.error(
        f"{of}after names no job of your tenant: {', '.join(unknown.ids)}. Nothing was written.",
        errors=[
            {"loc": [*where, after.ids.index(job_id)], "msg": "no job of your tenant", "type": "unknown_job"}
            for job_id in unknown.ids
        ],
    )
