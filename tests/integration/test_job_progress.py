"""The job view's progress and wait on a real store: what the running kind last checkpointed under the fence,
read back during and after a run, kept across a takeover where the kind resumes (a document) and started
over where it does not (an export), never negative and never going backwards within an attempt; and how
long a queued job has waited since it came due."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.schemas import JobView, ProgressView
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock, now
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers import export
from outbox_bridge.jobstore import db, fenced, intake
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.schedule import Schedule
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.attempt import StoreContext, run_attempt
from outbox_bridge.worker.commit import backoff_of, commit_outcomes
from outbox_bridge.worker.lease import LeasedJob
from tests.integration.test_kinds_document import INVOICE, WORKER
from tests.support.kinds import claim
from tests.support.procs import settings_env
from tests.support.store import claimed, job_row, new_job


@dataclass
class Sampled(StoreContext):
    """The runner's context, reading the job view back from the store after each checkpoint it saves."""

    samples: list[ProgressView | None] = field(default_factory=list)

    def save_checkpoint(self, data: dict[str, object]) -> None:
        super().save_checkpoint(data)
        self.samples.append(progress(self.engine, self.job_id))


def progress(engine: Engine, job_id: str) -> ProgressView | None:
    return JobView.of(job_row(engine, job_id)).progress


def as_pairs(samples: list[ProgressView | None]) -> list[tuple[int, int | None] | None]:
    return [None if p is None else (p.done, p.total) for p in samples]


def run_sampled(engine: Engine, settings: Settings, taken: Claim) -> Sampled:
    """Run the claimed job to its committed outcome, sampling its progress after every checkpoint."""
    ctx = Sampled(engine, settings, taken, LeasedJob(taken))
    outcome = run_attempt(ctx)
    [state] = db.transact(engine, commit_outcomes, [(taken, outcome)], now(), backoff_of(settings))
    assert state is State.SUCCEEDED
    return ctx


def assert_never_backwards(pairs: list[tuple[int, int | None] | None]) -> None:
    done = [pair[0] for pair in pairs if pair is not None]
    assert all(d >= 0 for d in done)
    assert done == sorted(done), f"progress went backwards: {pairs}"


def test_an_exports_rows_written_are_read_back_during_the_run_and_all_of_them_after(
    engine: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "PROGRESS_SECONDS", 0.0)
    job_id = new_job(engine, "export", kind="export", payload={"rows": 5_000, "chunk": 500})
    taken = claim(engine, settings, job_id)
    assert progress(engine, job_id) is None, "no progress before the first checkpoint"

    ctx = run_sampled(engine, settings, taken)

    assert as_pairs(ctx.samples) == [(n, 5_000) for n in range(500, 5_001, 500)]
    job = job_row(engine, job_id)
    assert job.state is State.SUCCEEDED
    assert as_pairs([progress(engine, job_id)]) == [(5_000, 5_000)]


def test_a_documents_steps_survive_a_takeover_and_the_new_attempt_goes_on_from_them(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = new_job(engine, str(uuid.uuid4()), kind="document", payload={"document": INVOICE})
    killed = subprocess.run(
        [sys.executable, "-c", WORKER, job_id],
        env=settings_env(settings, OUTBOX_BRIDGE_FAULTS="document.after_checkpoint:KILL"),
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    before = as_pairs([progress(engine, job_id)])
    assert before == [(1, 3)]

    clock.set(time.time() + settings.lease_seconds + 1)  # the killed worker's lease has run out
    second = claim(engine, settings, job_id)
    assert second.epoch == 2
    taken_over = as_pairs([progress(engine, job_id)])
    assert taken_over == [(1, 3)], "the new attempt resumes from the checkpoint, so its progress stands"

    ctx = run_sampled(engine, settings, second)
    after = as_pairs(ctx.samples)
    assert after == [(2, 3), (3, 3)]
    assert_never_backwards(before + taken_over + after)


def test_an_export_taken_over_starts_its_progress_over_and_the_old_attempt_cannot_move_it(
    engine: Engine, settings: Settings, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "PROGRESS_SECONDS", 0.0)
    job_id = new_job(engine, "export", kind="export", payload={"rows": 1_000, "chunk": 250})
    first = claim(engine, settings, job_id)
    halfway = {"rows_written": 500, "rows": 1_000}
    db.transact(engine, fenced.save_checkpoint, job_id, first.epoch, halfway, clock.now())
    assert as_pairs([progress(engine, job_id)]) == [(500, 1_000)]

    clock.advance(settings.lease_seconds + 1)
    second = claim(engine, settings, job_id)
    assert progress(engine, job_id) is None, "the new attempt writes its file from the first row"
    with pytest.raises(fenced.Fenced):
        db.transact(engine, fenced.save_checkpoint, job_id, first.epoch, halfway, clock.now())

    ctx = run_sampled(engine, settings, second)
    assert as_pairs(ctx.samples) == [(250, 1_000), (500, 1_000), (750, 1_000), (1_000, 1_000)]
    assert_never_backwards(as_pairs(ctx.samples))


def test_a_queued_job_says_how_long_it_has_waited_since_it_came_due(engine: Engine, clock: FakeClock) -> None:
    plain = new_job(engine, "plain")
    delayed = db.transact(
        engine,
        intake.accept,
        tenant="acme",
        owner="alice",
        kind="noop",
        payload={},
        operation_key="delayed",
        now=clock.now(),
        max_attempts=3,
        schedule=Schedule(delay_seconds=10),
    ).job.id
    assert JobView.of(job_row(engine, plain)).waited_seconds == 0.0

    clock.advance(7)
    assert JobView.of(job_row(engine, plain)).waited_seconds == 7.0
    assert JobView.of(job_row(engine, delayed)).waited_seconds == 0.0, "not due yet: it has not waited"
    clock.advance(5)
    assert JobView.of(job_row(engine, delayed)).waited_seconds == 2.0

    claimed(engine, plain)
    assert JobView.of(job_row(engine, plain)).waited_seconds is None, "only a queued job is waiting"


def test_a_job_retried_after_a_failure_waits_from_the_end_of_its_backoff(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, "flaky", kind="flaky", payload={})
    taken = claimed(engine, job_id)
    db.transact(
        engine,
        fenced.fail,
        taken.job_id,
        taken.epoch,
        taken.attempt_id,
        code="flaky_transient",
        message="failed on purpose",
        permanent=False,
        now=clock.now(),
        backoff=Backoff(4.0, 4.0),
    )
    job = job_row(engine, job_id)
    assert job.state is State.QUEUED and job.available_at > clock.now()
    clock.set(job.available_at + 1.5)
    assert JobView.of(job_row(engine, job_id)).waited_seconds == 1.5


def test_the_api_shows_the_progress_checkpointed_under_the_fence(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    job_id = new_job(engine, "export", kind="export", payload={"rows": 1_000, "chunk": 250})
    taken = claimed(engine, job_id)
    checkpoint = {"rows_written": 250, "rows": 1_000}
    db.transact(engine, fenced.save_checkpoint, job_id, taken.epoch, checkpoint, clock.now())
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    with TestClient(create_app(settings)) as client:
        view = client.get(f"/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"}).json()
    assert (view["state"], view["progress"], view["waited_seconds"]) == (
        "running",
        {"done": 250, "total": 1_000},
        None,
    )
