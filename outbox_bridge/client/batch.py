"""`Batch`: a batch of jobs as its view shows it (what `POST /batches` and `GET /batches/{id}` answer, and
what `outbox_bridge.enqueue_batch` returns), as an immutable object."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_bridge.client.job import instant


@dataclass(frozen=True)
class Batch:
    """A batch: `state` is `running` until every member has ended, then `done`; `jobs` are its members'
    ids in the request's order; `counts` how many members are in each state (`{"succeeded": 9, "dead": 1}`);
    `callback_job_id` the callback job, once the batch is done and its request named one (None before, and
    without one); the times are aware UTC datetimes."""

    id: str
    state: str
    jobs: list[str]
    counts: dict[str, int]
    callback_job_id: str | None
    created_at: datetime
    done_at: datetime | None

    @property
    def done(self) -> bool:
        """Every member has ended: it will not change by itself any more."""
        return self.state == "done"

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> Batch:
        """The batch a view document (JSON as the api sends it) describes; unknown fields are ignored."""
        created = instant(view["created_at"])
        assert created is not None
        return cls(
            id=view["id"],
            state=str(view["state"]),
            jobs=[str(job_id) for job_id in view["jobs"]],
            counts={str(state): int(n) for state, n in (view.get("counts") or {}).items()},
            callback_job_id=view.get("callback_job_id"),
            created_at=created,
            done_at=instant(view.get("done_at")),
        )
