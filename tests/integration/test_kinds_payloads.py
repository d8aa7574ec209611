"""Bad payloads of the export, document and notify kinds end `failed` at once, with a clear error, through
the real runner and store: no retry, no file, no provider call."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from tests.support.kinds import claim, run
from tests.support.store import job_row, new_job


def run_to_end(engine: Engine, settings: Settings, kind: str, payload: dict[str, Any]) -> str:
    job_id = new_job(engine, str(uuid.uuid4()), kind=kind, payload=payload)
    run(engine, settings, claim(engine, settings, job_id))
    return job_id


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        ("export", {"rows": 2_000_000, "chunk": 10}, "rows: Input should be less than or equal to 1000000"),
        ("export", {"rows": 10, "chunk": 0}, "chunk: Input should be greater than or equal to 1"),
        ("export", {"rows": "10", "chunk": 5}, "rows: Input should be a valid integer"),
        ("export", {"rows": 10}, "chunk: Field required"),
        ("document", {"document": ""}, "document: String should have at least 1 character"),
        ("document", {"document": " \n "}, "document: Value error, the document has no text"),
        (
            "document",
            {"document": "x", "instructions": "y" * 2_001},
            "instructions: String should have at most",
        ),
        ("notify", {"to": "nobody", "message": "hi"}, "to: String should match pattern"),
        ("notify", {"to": "a@b.example", "message": "hi", "bcc": "c@d.example"}, "bcc: Extra inputs are not"),
    ],
)
def test_a_bad_payload_fails_permanently_with_a_clear_error(
    engine: Engine, settings: Settings, kind: str, payload: dict[str, Any], message: str
) -> None:
    job_id = run_to_end(engine, settings, kind, payload)
    job = job_row(engine, job_id)
    assert (job.state, job.attempts, job.error_code) == (State.FAILED, 1, "invalid_payload")
    assert job.error_message is not None and job.error_message.startswith(message)
    assert db.read(engine, queries.committed_result, job_id) is None
    assert not (settings.results_dir / job_id).exists()
    assert not settings.notify_log.exists()
