"""What each store operation sends, as the database receives it, is written out in
`jobstore/drivers/sql/<driver>-operations.sql`: recorded on this test's store (`jobstore.drivers.recording`),
the same text, statement for statement (`python -m outbox_bridge.jobstore.drivers --record URL ...` writes
the files again after a change)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from outbox_bridge.jobstore import drivers
from outbox_bridge.jobstore.drivers import recording

SQL = Path(drivers.__file__).with_name("sql")


def test_the_written_operations_are_what_the_store_sends(engine: Engine) -> None:
    operations = recording.record(engine)
    name = engine.dialect.name
    written = (SQL / f"{name}-operations.sql").read_text()
    assert written == recording.rendered(name, operations), (
        f"jobstore/drivers/sql/{name}-operations.sql is out of date: run "
        "`python -m outbox_bridge.jobstore.drivers --record <an empty SQLite URL> <an empty PostgreSQL URL>`"
    )


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
