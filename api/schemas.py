"""The API's bodies: what a client sends (`JobCreate`) and gets back (`JobView`, `JobPage`, `Problem`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from core.clock import isoformat
from jobstore.records import Job
from jobstore.states import State

MAX_DEADLINE_SECONDS = 30 * 24 * 3600

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class JobCreate(BaseModel):
    """A job to run. Owner fields are not part of it: the owner is the bearer token's tenant and subject,
    and anything else in the body is ignored."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={"examples": [{"kind": "export", "payload": {"rows": 1000, "chunk": 100}}]},
    )

    kind: str = Field(min_length=1, max_length=64, description="One of the deployment's allowed kinds.")
    payload: dict[str, Any] = Field(description="The kind's input; validated against the kind's schema.")
    deadline_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_DEADLINE_SECONDS)] | None = Field(
        default=None,
        description="The job is `dead` if not finished this many seconds after acceptance.",
    )


class ErrorView(BaseModel):
    code: str
    message: str


class JobView(BaseModel):
    """A job as its owner sees it."""

    id: str
    kind: str
    state: State
    attempts: int
    created_at: Timestamp
    updated_at: Timestamp
    deadline_at: Timestamp | None
    cancel_requested: bool
    result_url: str | None = Field(description="Where the committed result is, once the job has succeeded.")
    error: ErrorView | None

    @classmethod
    def of(cls, job: Job) -> JobView:
        has_result = job.state is State.SUCCEEDED and job.result_attempt_id is not None
        return cls.model_construct(
            id=job.id,
            kind=job.kind,
            state=job.state,
            attempts=job.attempts,
            created_at=isoformat(job.created_at),
            updated_at=isoformat(job.updated_at),
            deadline_at=isoformat(job.deadline_at),
            cancel_requested=job.cancel_requested,
            result_url=f"{job_url(job.id)}/result" if has_result else None,
            error=(
                ErrorView.model_construct(code=job.error_code, message=job.error_message or "")
                if job.error_code
                else None
            ),
        )


class JobPage(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next page; null on the last.")


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
    job_url: str | None = Field(default=None, description="On a 409: the job the key already names.")
    resolved_at: Timestamp | None = Field(
        default=None, description="On `resolved-without-result`: when an operator resolved the job."
    )
    note: str | None = Field(default=None, description="On `resolved-without-result`: the operator's note.")


class Status(BaseModel):
    status: str


def job_url(job_id: str) -> str:
    return f"/jobs/{job_id}"
