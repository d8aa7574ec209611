"""The job retention on a real store: finished jobs older than the retention go with their attempts, outbox
rows and files, rows first; `unknown`, queued, running and young jobs stay; a job requeued after it was
chosen is not deleted; attempt outputs that never became a result are swept from the results directory,
and a committed result within the retention is never touched."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.baseline.sweep_loop import SweepLoop
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import FILE_KEY, file_output
from outbox_bridge.jobstore import db, fenced, operator, retention, sweeper
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.commit import backoff_of
from outbox_bridge.worker.retention import QUIET_SECONDS, OutputSweep, preview_prune, prune_finished, retain
from tests.support.procs import wait_for
from tests.support.relay_harness import Broker, running_relay
from tests.support.retention import (
    age,
    cancelled,
    failed,
    files_under,
    lost,
    succeeded,
    table_ids,
    write_output,
)
from tests.support.store import claimed, every_row, job_row, new_job

DAY = 86_400.0
RETENTION = 7 * DAY


def test_old_finished_jobs_go_with_their_attempts_outbox_rows_and_files_and_the_rest_stay(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    now, old = clock.now(), clock.now() - 30 * DAY
    gone = {
        succeeded(engine, settings, "old-succeeded", old),
        failed(engine, settings, "old-failed", old),
        cancelled(engine, "old-cancelled", old),
        lost(engine, settings, "old-dead", old)[0],
    }
    unknown, _ = lost(engine, settings, "old-unknown", old, external=True)
    queued = new_job(engine, "old-queued", now=old)
    running = new_job(engine, "old-running", now=old)
    claimed(engine, running, lease=60 * DAY, now=old)
    young = succeeded(engine, settings, "young", now - DAY)
    kept = {unknown, queued, running, young}
    assert {job_row(engine, j).state for j in gone} == {
        State.SUCCEEDED,
        State.FAILED,
        State.CANCELLED,
        State.DEAD,
    }
    assert job_row(engine, unknown).state is State.UNKNOWN
    before = table_ids(engine)
    assert gone & before["attempts"] and gone & before["outbox"]

    pruned = prune_finished(engine, settings, now - RETENTION)

    assert (pruned.jobs, pruned.files) == (4, 2)  # the old export's result, the dead job's lost output
    after = table_ids(engine)
    assert after["jobs"] == kept
    assert not (after["attempts"] | after["outbox"]) & gone
    assert after["attempts"] == before["attempts"] - gone
    left = files_under(settings.results_dir)
    assert not {f for f in left if f.split("/")[0] in gone}
    assert any(f.startswith(f"{young}/") for f in left) and any(f.startswith(f"{unknown}/") for f in left)
    assert prune_finished(engine, settings, now - RETENTION) == type(pruned)()  # nothing left to prune


def test_a_dry_run_counts_what_would_go_and_writes_nothing(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    old = clock.now() - 30 * DAY
    for n in range(3):
        succeeded(engine, settings, f"old-{n}", old)
    cancelled(engine, "old-cancelled", old)
    succeeded(engine, settings, "young", clock.now())
    rows, files = every_row(engine), files_under(settings.results_dir)
    cutoff = clock.now() - RETENTION

    preview = preview_prune(engine, settings, cutoff)
    swept = OutputSweep().run(engine, settings, clock.now(), dry_run=True)

    assert (preview.jobs, preview.files) == (4, 3)
    assert (swept.files, swept.directories) == (0, 0)
    assert every_row(engine) == rows
    assert files_under(settings.results_dir) == files
    assert prune_finished(engine, settings, cutoff) == preview


def test_a_job_requeued_and_running_after_it_was_chosen_is_not_deleted_nor_its_files(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    old = clock.now() - 30 * DAY
    cutoff = clock.now() - RETENTION
    racing, _ = lost(engine, settings, "racing", old)
    other = cancelled(engine, "other", old)
    chosen = [job_id for _, job_id in db.read(engine, retention.expired, cutoff)]
    assert set(chosen) == {racing, other}
    # Between the prune's choice and its delete, an operator requeues the dead job and a worker claims it.
    db.transact(engine, operator.requeue, racing, clock.now(), actor="tester")
    rerun = claimed(engine, racing, now=clock.now())
    running_file = write_output(settings, rerun, ".csv.partial")

    deleted = db.transact(engine, retention.delete_expired, chosen, cutoff)

    assert deleted == [other]
    assert job_row(engine, racing).state is State.RUNNING
    assert racing in table_ids(engine)["attempts"]
    assert (settings.results_dir / running_file).exists()


def waiting_on_locks(engine: Engine) -> int:
    """PostgreSQL: statements of this database waiting for a lock now."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


@pytest.mark.databases("postgresql")
def test_a_delete_waiting_on_an_uncommitted_requeue_deletes_nothing_once_it_commits(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    racing, _ = lost(engine, settings, "racing", clock.now() - 30 * DAY)
    outcome: list[list[str]] = []
    with engine.connect() as conn:
        transaction = conn.begin()
        operator.requeue(conn, racing, clock.now(), actor="tester")  # holds the row until it commits
        prune = threading.Thread(
            target=lambda: outcome.append(db.transact(engine, retention.prune, clock.now() - RETENTION))
        )
        prune.start()
        wait_for(lambda: waiting_on_locks(engine) == 1, 10, what="the delete waiting for the requeue's row")
        assert prune.is_alive()
        transaction.commit()
    prune.join(timeout=10)
    assert outcome == [[]]
    assert job_row(engine, racing).state is State.QUEUED


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_a_pruned_job_answers_404_as_an_id_never_issued(
    client: TestClient, engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    auth = {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant='acme', user='alice')}"}
    job_id = client.post(
        "/jobs", json={"kind": "noop", "payload": {}}, headers={**auth, "Idempotency-Key": "k"}
    ).json()["id"]
    taken = claimed(engine, job_id, now=clock.now())
    db.transact(engine, fenced.complete, job_id, taken.epoch, taken.attempt_id, {"done": True}, clock.now())
    assert client.get(f"/jobs/{job_id}/result", headers=auth).status_code == 200
    clock.advance(RETENTION + 1)

    assert prune_finished(engine, settings, clock.now() - RETENTION).jobs == 1

    for template in ("/jobs/{id}", "/jobs/{id}/result"):
        pruned = client.get(template.format(id=job_id), headers=auth)
        never = client.get(template.format(id=str(uuid.uuid4())), headers=auth)
        assert pruned.status_code == never.status_code == 404
        assert pruned.content == never.content
    assert client.get("/jobs", headers=auth).json()["items"] == []


def test_outputs_of_attempts_that_never_became_a_result_are_swept_and_results_stay(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    now = clock.now()
    # An export whose first attempt crashed after finishing its file (the sweeper ended it `lost`), leaving a
    # partial file too; the second attempt's file is the committed result.
    job_id = new_job(engine, "retried", kind="export", payload={"rows": 1, "chunk": 1}, now=now - 60)
    first = claimed(engine, job_id, lease=5, now=now - 60)
    crashed = [write_output(settings, first), write_output(settings, first, ".csv.partial")]
    db.transact(engine, sweeper.sweep_expired, now - 50, backoff=backoff_of(settings))
    second = claimed(engine, job_id, now=now - 40)
    output = file_output(write_output(settings, second), "text/csv")
    db.transact(engine, fenced.complete, job_id, second.epoch, second.attempt_id, output, now - 30)
    # A job that died the same way: nothing of it is a result.
    dead, dead_attempt = lost(engine, settings, "dead", now - 60)
    # A running attempt's file in the making.
    running = new_job(engine, "running", kind="export", payload={"rows": 1, "chunk": 1}, now=now)
    writing = write_output(settings, claimed(engine, running, now=now), ".csv.partial")
    # Files no attempt names, and directories of jobs the store does not have: old ones go, fresh ones stay.
    stray_old, stray_new = (
        settings.results_dir / job_id / "stray-old",
        settings.results_dir / job_id / "stray-new",
    )
    stray_old.write_bytes(b"?")
    stray_new.write_bytes(b"?")
    orphan_old, orphan_new = (settings.results_dir / str(uuid.uuid4()) for _ in range(2))
    for orphan in (orphan_old, orphan_new):
        orphan.mkdir()
        (orphan / f"{uuid.uuid4()}.csv").write_bytes(b"id\n")
    not_a_job = settings.results_dir / "notes"
    not_a_job.mkdir()
    (not_a_job / "readme.txt").write_text("kept")
    quiet = now - QUIET_SECONDS - 1
    age(stray_old, quiet)
    for path in (*orphan_old.iterdir(), orphan_old):
        age(path, quiet)
    for path in (stray_new, *orphan_new.iterdir(), orphan_new):
        age(path, now)

    swept = OutputSweep().run(engine, settings, now)

    assert (swept.files, swept.directories) == (5, 1)
    left = files_under(settings.results_dir)
    for gone in (*crashed, f"{dead}/{dead_attempt.attempt_id}.csv", f"{job_id}/stray-old"):
        assert gone not in left
    assert not any(f.startswith(orphan_old.name) for f in left)
    for stays in (output[FILE_KEY]["path"], writing, f"{job_id}/stray-new", "notes/readme.txt"):
        assert stays in left
    assert any(f.startswith(f"{orphan_new.name}/") for f in left)
    assert OutputSweep().run(engine, settings, now) == type(swept)()


def test_a_committed_result_within_the_retention_is_never_touched(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, settings, "kept", clock.now() - RETENTION + DAY)
    [path] = (settings.results_dir / job_id).iterdir()
    content = path.read_bytes()
    for each in (path, path.parent):
        age(each, clock.now() - RETENTION)  # untouched for as long as the retention

    retained = retain(engine, settings.model_copy(update={"job_retention_seconds": RETENTION}), OutputSweep())

    assert (retained.pruned.jobs, retained.swept.files, retained.swept.directories) == (0, 0, 0)
    assert path.read_bytes() == content
    assert job_row(engine, job_id).state is State.SUCCEEDED


def test_rows_go_first_so_a_crash_before_the_files_leaves_a_directory_the_sweep_removes(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = succeeded(engine, settings, "old", clock.now() - 30 * DAY)
    job_dir = settings.results_dir / job_id
    # A prune that crashed after its transaction committed, before it removed any file.
    assert db.transact(engine, retention.prune, clock.now() - RETENTION) == [job_id]
    for path in (*job_dir.iterdir(), job_dir):
        age(path, clock.now() - QUIET_SECONDS - 1)

    swept = OutputSweep().run(engine, settings, clock.now())

    assert (swept.files, swept.directories) == (1, 1)
    assert not job_dir.exists()


def test_the_relays_retention_pass_is_bounded_and_zero_keeps_finished_jobs(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    old = clock.now() - 30 * DAY
    ids = [cancelled(engine, f"old-{n}", old) for n in range(3)]
    forever = settings.model_copy(update={"job_retention_seconds": 0})
    assert retain(engine, forever, OutputSweep()).pruned.jobs == 0
    assert table_ids(engine)["jobs"] == set(ids)

    assert prune_finished(engine, settings, clock.now() - RETENTION, batches=1, batch_size=2).jobs == 2
    assert len(table_ids(engine)["jobs"]) == 1
    retained = retain(engine, settings, OutputSweep())
    assert retained.pruned.jobs == 1
    assert retained.lines() == ["retention: deleted 1 finished jobs and 0 of their files"]


def test_the_sweep_goes_on_where_it_stopped(engine: Engine, settings: Settings, clock: FakeClock) -> None:
    quiet = clock.now() - QUIET_SECONDS - 1
    for _ in range(3):
        orphan = settings.results_dir / str(uuid.uuid4())
        orphan.mkdir()
        age(orphan, quiet)
    sweep = OutputSweep()
    assert [sweep.run(engine, settings, clock.now(), limit=2).directories for _ in range(3)] == [2, 1, 0]


@pytest.mark.broker
def test_a_running_relay_applies_the_retention_on_its_own(
    rabbitmq_url: str, settings: Settings, engine: Engine
) -> None:
    relay_settings = settings.model_copy(
        update={
            "rabbitmq_url": rabbitmq_url,
            "retention_check_seconds": 0.2,
            "job_retention_seconds": RETENTION,
        }
    )
    old = time.time() - 30 * DAY
    gone = succeeded(engine, settings, "old", old)
    young = succeeded(engine, settings, "young", time.time())
    broker = Broker(rabbitmq_url, relay_settings)
    try:
        with running_relay(relay_settings, engine):
            wait_for(lambda: gone not in table_ids(engine)["jobs"], 15, what="the old job pruned")
    finally:
        broker.cleanup()
    assert table_ids(engine)["jobs"] == {young}
    assert not (settings.results_dir / gone).exists()


def test_a_baseline_worker_process_applies_the_retention_on_its_own(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    often = settings.model_copy(update={"sweep_interval_seconds": 0.05, "retention_check_seconds": 0.1})
    gone = succeeded(engine, settings, "old", clock.now() - 30 * DAY)
    young = succeeded(engine, settings, "young", clock.now())
    stopping = threading.Event()
    loop = SweepLoop(engine, often, stopping).start()
    try:
        wait_for(lambda: gone not in table_ids(engine)["jobs"], 15, what="the old job pruned")
    finally:
        stopping.set()
        loop.join(10)
    assert table_ids(engine)["jobs"] == {young}
    assert not (settings.results_dir / gone).exists()
