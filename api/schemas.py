"""The API's bodies: what a client sends (`JobCreate`, `BatchCreate`) and gets back (`JobView`, `JobPage`,
`BatchView`, `BatchPage`, `Problem`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import to_json

from outbox_bridge.api.links import LinkSigner, ResultLink
from outbox_bridge.core import clock
from outbox_bridge.core.clock import isoformat
from outbox_bridge.handlers.base import Progress
from outbox_bridge.handlers.registry import KINDS
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schedule import MAX_DELAY_SECONDS, Schedule
from outbox_bridge.jobstore.states import State
from outbox_bridge.jobstore.workflows import MAX_AFTER, MAX_MEMBERS, After, Batch

MAX_DEADLINE_SECONDS = 30 * 24 * 3600

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


def epoch_of_rfc3339(text: str) -> float:
    """The instant an RFC 3339 date-time with an offset names, in epoch seconds; ValueError otherwise."""
    if not _RFC3339.fullmatch(text):
        raise ValueError("not an RFC 3339 date-time with a time zone offset, such as 2026-12-01T07:00:00Z")
    return datetime.fromisoformat(text.upper()).timestamp()


def _an_rfc3339_instant(text: str) -> str:
    epoch_of_rfc3339(text)
    return text


RunAt = Annotated[
    str, Field(max_length=64, json_schema_extra={"format": "date-time"}), AfterValidator(_an_rfc3339_instant)
]

MAX_CONCURRENCY_KEY_CHARACTERS = 128


def _printable(text: str) -> str:
    if not text.isprintable():
        raise ValueError("must be printable: no control or format characters, no space but the plain space")
    return text


ConcurrencyKey = Annotated[
    str,
    Field(strict=True, min_length=1, max_length=MAX_CONCURRENCY_KEY_CHARACTERS),
    AfterValidator(_printable),
]

MAX_ID_CHARACTERS = 64  # a job id is a UUID (36): anything much longer names no job


def _distinct(ids: list[str]) -> list[str]:
    if len(set(ids)) != len(ids):
        raise ValueError("names a job more than once")
    return ids


JobIds = Annotated[
    list[Annotated[str, Field(strict=True, min_length=1, max_length=MAX_ID_CHARACTERS)]],
    Field(min_length=1, max_length=MAX_AFTER, json_schema_extra={"uniqueItems": True}),
    AfterValidator(_distinct),
]

# What holds a queued job back: its kind's pause (`jobstore.pausing`), else a flow limit
# (`jobstore.limits.HoldReason`); and what each is, as the command line and the dashboard name it.
HeldBy = Literal["paused", "kind", "key", "rate"]
HELD_BY_MEANING: dict[str, str] = {
    "paused": "its kind's pause (outbox-bridge kinds resume KIND)",
    "kind": "its kind's running cap (KIND_MAX_RUNNING)",
    "key": "its concurrency key's running cap (CONCURRENCY_KEY_MAX_RUNNING)",
    "rate": "its kind's start rate (KIND_RATE_LIMITS)",
}


class JobCreate(BaseModel):
    """A job to run. Owner fields are not part of it: the owner is the bearer token's tenant and subject,
    and anything else in the body is ignored."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "examples": [{"kind": "export", "payload": {"rows": 1000, "chunk": 100}}],
            # `delay_seconds` and `run_at` are mutually exclusive: a request with both is 400.
            "not": {
                "required": ["delay_seconds", "run_at"],
                "properties": {"delay_seconds": {"type": "number"}, "run_at": {"type": "string"}},
            },
        },
    )

    kind: str = Field(min_length=1, max_length=64, description="One of the deployment's allowed kinds.")
    payload: dict[str, Any] = Field(description="The kind's input; validated against the kind's schema.")
    deadline_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_DEADLINE_SECONDS)] | None = Field(
        default=None,
        description="The job is `dead` if not finished this many seconds after acceptance.",
    )
    delay_seconds: (
        Annotated[float, Field(strict=True, ge=0, le=MAX_DELAY_SECONDS, allow_inf_nan=False)] | None
    ) = Field(
        default=None,
        description="Start no earlier than this many seconds after acceptance (at most 30 days). Mutually "
        "exclusive with `run_at`: a request with both is 400.",
    )
    run_at: RunAt | None = Field(
        default=None,
        description="Start no earlier than this time (RFC 3339 with an offset; at most 30 days ahead; a "
        "time in the past, up to 30 days, means at once). Mutually exclusive with `delay_seconds`: a request "
        "with both is 400.",
    )
    priority: Literal["high", "normal", "low"] | None = Field(
        default=None,
        description="A `high` job starts before the `normal` and `low` jobs waiting with it, a `low` one "
        "after them. Unset: the kind's default priority, `normal` unless the kind names one.",
    )

    concurrency_key: ConcurrencyKey | None = Field(
        default=None,
        description="At most `CONCURRENCY_KEY_MAX_RUNNING` (default 1) running jobs of your tenant share "
        "one key; the others wait `queued`, spending no attempt. 1 to 128 printable characters.",
    )

    after: JobIds | None = Field(
        default=None,
        description=f"Run only after these jobs of your tenant (1 to {MAX_AFTER} ids, each once, of jobs "
        "accepted before this one) have succeeded: until then the job waits `queued`, its view listing "
        "them in `waiting_for`. An id your tenant does not have is 400, and nothing is written.",
    )
    on_dependency_failure: Literal["cancel", "run"] = Field(
        default="cancel",
        description="With `after`: when one of those jobs ends `failed`, `dead`, `cancelled` or "
        "`unknown`, `cancel` ends this job `cancelled` (error code `dependency_failed`); `run` runs it once "
        "they have all ended. Without `after` it changes nothing.",
    )

    def priority_rank(self, default: str | None = None) -> Priority:
        """The priority asked for; unset, `default` (the kind's), else `normal`."""
        return Priority.named(self.priority or default or "normal")

    def schedule(self) -> Schedule | None:
        """The start as asked; None when the request names none. ValueError when it names two."""
        if self.delay_seconds is None and self.run_at is None:
            return None
        run_at = None if self.run_at is None else epoch_of_rfc3339(self.run_at)
        return Schedule(delay_seconds=self.delay_seconds, run_at=run_at)

    def waits_for(self) -> After | None:
        """What the job waits for, as the store takes it; None when it names no `after`."""
        if self.after is None:
            return None
        return After(tuple(self.after), self.on_dependency_failure)


class BatchCreate(BaseModel):
    """Jobs accepted together, and the job that runs once every one of them has ended."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "examples": [
                {
                    "jobs": [{"kind": "noop", "payload": {}}, {"kind": "noop", "payload": {}}],
                    "callback": {"kind": "noop", "payload": {}},
                }
            ]
        },
    )

    jobs: list[JobCreate] = Field(
        min_length=1,
        max_length=MAX_MEMBERS,
        description=f"The members, 1 to {MAX_MEMBERS:,}, each as `POST /jobs` takes a job (its `after` "
        "naming jobs accepted before the batch). The batch's Idempotency-Key covers them all.",
    )
    callback: JobCreate | None = Field(
        default=None,
        description="The job accepted, once, when the last member has ended (however it ended); its kind "
        "reads the members' outcomes. Without `after`, `delay_seconds`, `run_at` or `concurrency_key`; its "
        "`deadline_seconds` counts from when it is accepted.",
    )


class ErrorView(BaseModel):
    code: str
    message: str


class ProgressView(BaseModel):
    done: int = Field(ge=0)
    total: int | None = Field(ge=0, description="What `done` counts up to; null when not known.")


@dataclass(frozen=True)
class Workflow:
    """What a job's view says of the workflows it takes part in: the jobs it still waits for, and the batch
    whose callback it is."""

    waiting_for: Sequence[str] = ()
    callback_of: str | None = None


NO_WORKFLOW = Workflow()


class JobView(BaseModel):
    """A job as its owner sees it."""

    id: str
    kind: str
    state: State
    attempts: int
    created_at: Timestamp
    updated_at: Timestamp
    deadline_at: Timestamp | None
    run_at: Timestamp | None = Field(description="The start the request asked for; null: at once.")
    priority: Literal["high", "normal", "low"]
    queue: str = Field(description="The named queue the job's kind runs on (`default` unless it names one).")
    schedule: str | None = Field(
        description="The schedule (of the job's tenant) that made the job for one of its slots; null for a "
        "job submitted otherwise."
    )
    callback_of: str | None = Field(
        description="The batch whose callback this job is; null for any other job."
    )
    concurrency_key: str | None = Field(description="The request's concurrency key; null: none.")
    held_by: HeldBy | None = Field(
        description="What holds a queued job back: `paused` (its kind is paused), or a flow limit: `kind` "
        "(its kind's running cap), `key` (its concurrency key's), `rate` (its kind's start rate). Null when "
        "nothing does, and in every other state."
    )
    waiting_for: list[str] = Field(
        description="A queued job accepted with `after`: the jobs it still waits for (not yet ended). "
        "Empty once it is due, for a job without `after`, and in every other state.",
    )
    cancel_requested: bool
    progress: ProgressView | None = Field(
        description="What the running kind last checkpointed (an export's rows written of its total, a "
        "document's steps run of 3); null before the attempt that runs it has checkpointed any."
    )
    waited_seconds: float | None = Field(
        description="A queued job: how long it has waited since it came due (its run_at, its acceptance, "
        "or the end of a retry's backoff); 0 before then. Null in every other state."
    )
    running_since: Timestamp | None = Field(
        description="A running job: when a worker's thread began running its attempt. Null while the "
        "worker that claimed it holds it waiting for a free thread (state `running`, not started yet), and "
        "in every other state."
    )
    result_url: str | None = Field(
        description="Once the job has succeeded with a result: a signed link to it that needs no "
        "Authorization until `result_expires_at` (read the job again for a fresh one)."
    )
    result_expires_at: Timestamp | None = Field(description="When `result_url` stops opening the result.")
    error: ErrorView | None

    @classmethod
    def of(
        cls,
        job: Job,
        now: float | None = None,
        links: LinkSigner | None = None,
        *,
        workflow: Workflow = NO_WORKFLOW,
    ) -> JobView:
        """The view of `job` at `now` (the clock's, unless given), its result link signed by `links` (without
        one, as on the command line: the path that takes a bearer token, and no expiry), with what its
        `workflow` says (without one: waiting for nothing, no batch's callback)."""
        fields = view_fields(job, now, links, workflow=workflow)
        progress, error = fields["progress"], fields["error"]
        return cls.model_construct(
            **fields | {
                "progress": None if progress is None else ProgressView.model_construct(**progress),
                "error": None if error is None else ErrorView.model_construct(**error),
            }
        )  # fmt: skip


def view_fields(
    job: Job, now: float | None = None, links: LinkSigner | None = None, *, workflow: Workflow = NO_WORKFLOW
) -> dict[str, Any]:
    """`JobView.of`'s fields, in its order, as plain values (the nested views as dicts)."""
    now = clock.now() if now is None else now
    link = _result_link(job, now, links)
    return {
        "id": job.id,
        "kind": job.kind,
        "state": job.state,
        "attempts": job.attempts,
        "created_at": isoformat(job.created_at),
        "updated_at": isoformat(job.updated_at),
        "deadline_at": isoformat(job.deadline_at),
        "run_at": isoformat(job.run_at),
        "priority": job.priority.label,
        "queue": job.queue,
        "schedule": job.schedule_name,
        "callback_of": workflow.callback_of,
        "concurrency_key": job.concurrency_key,
        "held_by": job.held_by if job.state is State.QUEUED else None,
        "waiting_for": list(workflow.waiting_for) if job.state is State.QUEUED else [],
        "cancel_requested": job.cancel_requested,
        "progress": _progress(job),
        "waited_seconds": _waited(job, now),
        "running_since": isoformat(job.running_since) if job.state is State.RUNNING else None,
        "result_url": link.url if link else None,
        "result_expires_at": isoformat(link.expires) if link else None,
        "error": {"code": job.error_code, "message": job.error_message or ""} if job.error_code else None,
    }


def view_json(
    job: Job, now: float | None = None, links: LinkSigner | None = None, *, workflow: Workflow = NO_WORKFLOW
) -> bytes:
    """`JobView.of(job, now, links, workflow=workflow).model_dump_json()`, encoded without building the
    model (what every answer of `POST /jobs` and `GET /jobs/{id}` sends)."""
    # as pydantic writes a JobView: compact, text as UTF-8
    return to_json(view_fields(job, now, links, workflow=workflow))


def _result_link(job: Job, now: float, links: LinkSigner | None) -> ResultLink | None:
    """A link to the committed result, if the job has one (one an operator resolved as succeeded has not)."""
    if job.state is not State.SUCCEEDED or job.result_attempt_id is None:
        return None
    if links is None:
        return ResultLink(f"{job_url(job.id)}/result", None)
    return links.link(job.id, job.tenant, job.result_attempt_id, now)


def _progress(job: Job) -> dict[str, int | None] | None:
    """The progress the job's kind reads in its checkpoint, kept under the fence: a checkpoint an earlier
    attempt saved counts only for a kind whose new attempt resumes from it (`Kind.progress_of`)."""
    kind = KINDS.get(job.kind)
    if kind is None:
        return None
    found: Progress | None = kind.progress_of(job.checkpoint, current=job.checkpoint_epoch == job.epoch)
    return None if found is None else {"done": found.done, "total": found.total}


def _waited(job: Job, now: float) -> float | None:
    if job.state is not State.QUEUED:
        return None
    return round(max(0.0, now - job.available_at), 3)


class JobPage(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next page; null on the last.")


class BatchView(BaseModel):
    """A batch as its owner sees it."""

    id: str
    state: Literal["running", "done"] = Field(
        description="`running` until its last member has ended; then `done`, for good."
    )
    jobs: list[str] = Field(description="The members' ids, in the request's order.")
    counts: dict[str, int] = Field(
        description="How many members are in each state (states with none left out)."
    )
    callback_job_id: str | None = Field(
        description="Once `done`: the callback job the request named (null when it named none); null before."
    )
    created_at: Timestamp
    done_at: Timestamp | None = Field(description="When its last member ended; null while it runs.")

    @classmethod
    def of(cls, batch: Batch) -> BatchView:
        return cls.model_construct(
            id=batch.id, state=batch.state, jobs=list(batch.jobs), counts=batch.counts,
            callback_job_id=batch.callback_job_id, created_at=isoformat(batch.created_at),
            done_at=isoformat(batch.done_at),
        )  # fmt: skip


class BatchPage(BaseModel):
    items: list[BatchView]
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next page; null on the last.")


def batch_url(batch_id: str) -> str:
    return f"/batches/{batch_id}"


class Issue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="A stable URI naming the kind of problem.")
    title: str
    status: int
    detail: str
    errors: list[Issue] | None = Field(default=None, description="What failed validation, where.")
    job_url: str | None = Field(
        default=None,
        description="On a 409: the job the key already names. On `result-link-expired`: the job to read "
        "again for a fresh link.",
    )
    batch_url: str | None = Field(
        default=None, description="On a 409 from `POST /batches`: the batch the key already names."
    )
    resolved_at: Timestamp | None = Field(
        default=None, description="On `resolved-without-result`: when an operator resolved the job."
    )
    note: str | None = Field(default=None, description="On `resolved-without-result`: the operator's note.")


class Status(BaseModel):
    status: str


def job_url(job_id: str) -> str:
    return f"/jobs/{job_id}"
