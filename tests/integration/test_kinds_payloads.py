"""Bad payloads of the export, document and notify kinds end `failed` at once, with a clear error, through
the real runner and store: no retry, no file, no provider call."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import Engine

from core.clock import now
from core.settings import Settings
from jobstore import db, queries
from jobstore import jobs as store
from jobstore.states import State
from tests.support.kinds import execute
from worker.lease import LeaseKeeper


def run_to_end(engine: Engine, settings: Settings, kind: str, payload: dict[str, Any]) -> str:
    accepted = db.transact(
        engine,
        store.accept,
        tenant="acme",
        owner="alice",
        kind=kind,
        payload=payload,
        operation_key=str(uuid.uuid4()),
        now=now(),
        max_attempts=3,
    )
    job_id = accepted.job.id
    claimed = db.transact(engine, store.claim, job_id, "worker-1", now(), settings.lease_seconds).claim
    assert claimed is not None
    keeper = LeaseKeeper(engine, settings, interval=0.05).start()
    try:
        execute(engine, settings, keeper, claimed)
    finally:
        keeper.stop()
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
    job = db.read(engine, store.get_job, job_id)
    assert job is not None
    assert (job.state, job.attempts, job.error_code) == (State.FAILED, 1, "invalid_payload")
    assert job.error_message is not None and job.error_message.startswith(message)
    assert db.read(engine, queries.committed_result, job_id) is None
    assert not (settings.results_dir / job_id).exists()
    assert not settings.notify_log.exists()
