"""The job view the api sends for one job (`POST /jobs`, `GET /jobs/{id}`, cancel) is encoded without
building the pydantic model: its bytes must be the model's own JSON for every shape a job takes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from outbox_bridge.api.links import LinkSigner
from outbox_bridge.api.schemas import JobView, view_json
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import State
from tests.support.store import a_job

NOW = 1_700_000_100.25
LINKS = LinkSigner(b"k" * 32, 3600)
QUEUED = a_job(id="01a23fde-1464-7944-a95a-9cb8826f6a3a")
SHAPES = {
    "queued, just accepted": QUEUED,
    "queued, not yet due, high, with a deadline": replace(
        QUEUED, available_at=NOW + 30, run_at=NOW + 30, deadline_at=NOW + 3600.0625, priority=Priority.HIGH
    ),
    "queued after a backoff, waited a fraction": replace(
        QUEUED, attempts=1, epoch=1, available_at=NOW - 0.1234567, priority=Priority.LOW
    ),
    "running an export, checkpointed": replace(
        QUEUED, kind="export", state=State.RUNNING, epoch=2, attempts=2, checkpoint_epoch=2,
        checkpoint={"rows_written": 300, "rows": 1000}, lease_owner="w", lease_expires_at=NOW + 30,
        cancel_requested=True, started_at=NOW - 5,
    ),
    "succeeded with a result": replace(
        QUEUED, state=State.SUCCEEDED, epoch=1, attempts=1, result_attempt_id="a-1", finished_at=NOW - 1,
        updated_at=NOW - 1,
    ),
    "failed, a message in several scripts": replace(
        QUEUED, state=State.FAILED, epoch=1, attempts=1, error_code="handler_error",
        error_message='bad "input"\n\tÿ € 😀 \\ / \u2028 \x00 \x1f', finished_at=NOW, updated_at=NOW,
    ),
    "unknown, an error with no message": replace(
        QUEUED, state=State.UNKNOWN, error_code="lease_lost_after_effect", error_message=None
    ),
}  # fmt: skip


@pytest.mark.parametrize("job", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("links", [LINKS, None], ids=["signed links", "no signer"])
def test_the_bytes_are_the_models_own_json(job: Job, links: LinkSigner | None) -> None:
    expected = JobView.of(job, NOW, links).model_dump_json().encode()
    assert view_json(job, NOW, links) == expected
    JobView.model_validate(json.loads(expected))  # and the model's JSON is a valid view
