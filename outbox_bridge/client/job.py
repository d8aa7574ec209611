"""`Job`: a job as its view shows it (what `GET /jobs/{id}` answers), as an immutable object."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def instant(value: str | None) -> datetime | None:
    """An RFC 3339 time of a view as an aware datetime; None for None."""
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Job:
    """A job's view: `state` is one of queued, running, succeeded, failed, dead, cancelled, unknown; the
    times are aware UTC datetimes; `error` is `{"code", "message"}` or None; `progress` is `{"done",
    "total"}` or None; `result_url` opens the committed result without a token until `result_expires_at`;
    `schedule` names the schedule that made the job for one of its slots (None for a job submitted);
    `concurrency_key` is the one the request named (None: none); `held_by` says what holds a queued job
    back (`paused`: its kind is paused; or a flow limit: `kind`, `key` or `rate`; None when nothing does);
    `running_since` is when a worker's thread began running a `running` job (None while the worker that
    claimed it waits for a free thread, and in every other state); `queue` is the named queue its kind runs
    on; `waiting_for` lists the jobs named in its `after` that it still waits for (empty when it waits for
    none); `callback_of` names the batch whose callback it is (None for any other job)."""

    id: str
    kind: str
    state: str
    attempts: int
    created_at: datetime
    updated_at: datetime
    deadline_at: datetime | None
    run_at: datetime | None
    priority: str
    cancel_requested: bool
    progress: dict[str, Any] | None
    result_url: str | None
    result_expires_at: datetime | None
    error: dict[str, str] | None
    schedule: str | None = None
    concurrency_key: str | None = None
    held_by: str | None = None
    running_since: datetime | None = None
    queue: str = "default"
    waiting_for: list[str] = field(default_factory=list)
    callback_of: str | None = None

    @property
    def finished(self) -> bool:
        """In a terminal state: it will not change by itself any more."""
        return self.state not in {"queued", "running"}

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> Job:
        """The job a view document (JSON as the api sends it) describes; unknown fields are ignored."""
        created, updated = instant(view["created_at"]), instant(view["updated_at"])
        assert created is not None and updated is not None
        return cls(
            id=view["id"],
            kind=view["kind"],
            state=str(getattr(view["state"], "value", view["state"])),
            attempts=view["attempts"],
            created_at=created,
            updated_at=updated,
            deadline_at=instant(view.get("deadline_at")),
            run_at=instant(view.get("run_at")),
            priority=view.get("priority", "normal"),
            cancel_requested=bool(view.get("cancel_requested", False)),
            progress=view.get("progress"),
            result_url=view.get("result_url"),
            result_expires_at=instant(view.get("result_expires_at")),
            error=view.get("error"),
            schedule=view.get("schedule"),
            concurrency_key=view.get("concurrency_key"),
            held_by=view.get("held_by"),
            running_since=instant(view.get("running_since")),
            queue=view.get("queue", "default"),
            waiting_for=[str(job_id) for job_id in view.get("waiting_for") or ()],
            callback_of=view.get("callback_of"),
        )
