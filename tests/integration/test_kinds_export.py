"""The export kind through the real runner and a real SQLite store: an immutable per-attempt file that only
the committed result pointer makes visible, and a cancel between chunks that leaves no file."""

from __future__ import annotations

import hashlib
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.clock import FakeClock, now
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import FILE_KEY, Cancelled
from outbox_bridge.handlers.export import ExportPayload, csv_chunks, run_export, write_immutable
from outbox_bridge.jobstore import db, operator, queries
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.attempt import StoreContext
from outbox_bridge.worker.lease import LeaseKeeper
from tests.support.kinds import claim, committed_output, execute, run
from tests.support.procs import wait_for
from tests.support.store import job_row, new_job


def submit(engine: Engine, payload: dict[str, Any]) -> str:
    return new_job(engine, str(uuid.uuid4()), kind="export", payload=payload)


def test_an_export_writes_a_read_only_file_that_the_committed_output_names(
    engine: Engine, settings: Settings
) -> None:
    job_id = submit(engine, {"rows": 2_500, "chunk": 1_000})
    claimed = claim(engine, settings, job_id)
    assert run(engine, settings, claimed) is State.SUCCEEDED

    output = committed_output(engine, job_id)
    path = settings.results_dir / output[FILE_KEY]["path"]
    content = path.read_bytes()
    assert output == {
        FILE_KEY: {"path": f"{job_id}/{claimed.attempt_id}.csv", "media_type": "text/csv"},
        "rows": 2_500,
        "bytes": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    assert content == b"".join(csv_chunks(2_500, 7))
    assert path.stat().st_mode & 0o222 == 0
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_an_export_cancelled_between_chunks_ends_cancelled_with_no_finished_file(
    engine: Engine, settings: Settings
) -> None:
    job_id = submit(engine, {"rows": 1_000_000, "chunk": 1_000})
    claimed = claim(engine, settings, job_id)
    job_dir = settings.results_dir / job_id
    outcome: list[State | None] = []
    worker = threading.Thread(target=lambda: outcome.append(run(engine, settings, claimed)))
    worker.start()
    try:
        wait_for(lambda: any(job_dir.glob("*.partial")), timeout=20, interval=0.002, what="a partial file")
        assert db.transact(engine, operator.request_cancel, job_id, now()) is operator.CancelOutcome.REQUESTED
    finally:
        worker.join(timeout=60)
    assert outcome == [State.CANCELLED]
    job = job_row(engine, job_id)
    assert (job.state, job.error_code, job.result_attempt_id) == (State.CANCELLED, "cancelled", None)
    assert list(job_dir.iterdir()) == []


def test_a_cancel_seen_only_at_the_commit_ends_cancelled_and_removes_the_finished_file(
    engine: Engine, settings: Settings
) -> None:
    job_id = submit(engine, {"rows": 100, "chunk": 30})
    claimed = claim(engine, settings, job_id)
    assert db.transact(engine, operator.request_cancel, job_id, now()) is operator.CancelOutcome.REQUESTED
    # A keeper that never renews: the running code never hears of the cancel and finishes its file.
    keeper = LeaseKeeper(engine, settings)
    assert execute(engine, settings, keeper, claimed) is State.CANCELLED
    job = job_row(engine, job_id)
    assert (job.state, job.result_attempt_id) == (State.CANCELLED, None)
    assert [a.outcome for a in db.read(engine, queries.attempts_of, job_id)] == ["cancelled"]
    assert list((settings.results_dir / job_id).iterdir()) == []


def test_a_fenced_out_attempt_removes_its_finished_file_and_leaves_the_committed_one(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = submit(engine, {"rows": 100, "chunk": 30})
    stalled = claim(engine, settings, job_id)
    clock.advance(settings.lease_seconds + 1)
    newer = claim(engine, settings, job_id)
    assert run(engine, settings, newer) is State.SUCCEEDED
    # The stalled worker wakes up, writes its own file, and is fenced out at the commit.
    assert execute(engine, settings, LeaseKeeper(engine, settings), stalled) is None
    job_dir = settings.results_dir / job_id
    assert [p.name for p in job_dir.iterdir()] == [f"{newer.attempt_id}.csv"]
    assert committed_output(engine, job_id)[FILE_KEY]["path"] == f"{job_id}/{newer.attempt_id}.csv"


def test_only_the_attempt_the_result_pointer_names_is_served(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = submit(engine, {"rows": 100, "chunk": 30})
    # A first attempt finishes its file, then loses its lease before committing (a stalled worker).
    first = claim(engine, settings, job_id)
    first_output = run_export(
        StoreContext(engine, settings, first, LeaseKeeper(engine, settings).hold(first)),
        ExportPayload(rows=100, chunk=30),
    )
    clock.advance(settings.lease_seconds + 1)
    # A killed attempt left a partial file behind.
    job_dir = settings.results_dir / job_id
    (job_dir / "killed-attempt.csv.partial").write_bytes(b"id,ordered_on\n1,")

    second = claim(engine, settings, job_id)
    assert run(engine, settings, second) is State.SUCCEEDED

    output = committed_output(engine, job_id)
    assert output[FILE_KEY]["path"] == f"{job_id}/{second.attempt_id}.csv" != first_output[FILE_KEY]["path"]
    assert output["sha256"] == first_output["sha256"]
    assert sorted(p.name for p in job_dir.iterdir()) == sorted(
        [f"{first.attempt_id}.csv", f"{second.attempt_id}.csv"]
    )


def test_an_interrupted_write_leaves_neither_a_finished_nor_a_partial_file(tmp_path: Path) -> None:
    checks = 0

    def cancel_on_third_chunk() -> None:
        nonlocal checks
        checks += 1
        if checks == 3:
            raise Cancelled("job-1")

    with pytest.raises(Cancelled):
        write_immutable(tmp_path / "a.csv", csv_chunks(100, 10), cancel_on_third_chunk)
    assert list(tmp_path.iterdir()) == []


def test_a_finished_file_is_never_overwritten(tmp_path: Path) -> None:
    final = tmp_path / "a.csv"
    write_immutable(final, csv_chunks(3, 1), lambda: None)
    assert final.stat().st_mode & 0o222 == 0
    with pytest.raises(FileExistsError):
        write_immutable(final, [b"other"], lambda: None)
    assert final.read_bytes() == b"".join(csv_chunks(3, 1))
