"""Each store operation sends what it is for, recorded on this test's store
(`tests/support/operations.py`)."""

from __future__ import annotations

from sqlalchemy import Engine

from tests.support import operations as recording


def test_every_operation_sent_what_it_is_for(engine: Engine) -> None:
    sent = {operation.name: " ".join(s.sql for s in operation.sent) for operation in recording.record(engine)}
    assert set(sent) == {
        "accept a batch", "take the relay role", "read due outbox rows", "mark published", "claim by ids",
        "claim due", "renew a lease", "complete a round", "fail an attempt", "release a job",
        "sweep expired leases", "re-announce queued jobs", "cancel", "requeue", "resolve", "prune",
    }  # fmt: skip
    assert "INSERT INTO jobs" in sent["accept a batch"] and "INSERT INTO outbox" in sent["accept a batch"]
    assert "INSERT INTO attempts" in sent["claim by ids"]
    assert "UPDATE outbox" in sent["mark published"]
    assert "DELETE FROM jobs" in sent["prune"]
    assert "INSERT INTO operator_actions" in sent["cancel"]
