"""Run a kind's jobs inline in a team's own tests: a temporary store, no broker, no processes, and the same
rules the workers apply (the claim and its fence, checkpoints, cancellation, the external-effect mark,
permanent and transient errors, the retry budget and the kind's backoff, a `Snooze`, a kind's
`timeout_seconds`). An `async def` kind runs as a worker runs it, on an event loop made for the attempt
(from an async test too), and a kind that returns None has the result None.

    # conftest.py
    pytest_plugins = ["outbox_bridge.testing"]

    # test_kinds.py
    import teamapp.kinds  # registers the team's kinds

    def test_resize(inline_jobs):
        job = inline_jobs.submit("resize_image", {"width": 4, "height": 5})
        done = inline_jobs.run_to_end(job.id)
        assert done.state == "succeeded"
        assert inline_jobs.result(job.id) == {"area": 20}

A batch runs the same way, one job at a time: its callback exists once the last of its jobs has ended, and
runs with `ctx.batch` filled (a job submitted with `after=[ids]` waits until those have succeeded):

    def test_order_ready(inline_jobs):
        images = [{"kind": "resize_image", "payload": {"width": w, "height": 5}} for w in (4, 8)]
        batch = inline_jobs.submit_batch(images, callback={"kind": "order_ready", "payload": {"order": 7}})
        for job_id in batch.jobs:
            inline_jobs.run_to_end(job_id)
        callback_id = inline_jobs.batch(batch.id).callback_job_id
        assert inline_jobs.run_to_end(callback_id).state == "succeeded"

Time is the store's own clock, which `InlineJobs` moves: a retry's backoff and a snooze pass at once, and a
lost worker's lease runs out when `run(..., crash_after_external_start=True)` says so, without sleeping. A
kind's `timeout_seconds` is measured on the real clock, as a worker measures it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from outbox_bridge.api.schemas import BatchView, view_fields
from outbox_bridge.api.workflow_fields import workflow_of
from outbox_bridge.client.batch import Batch
from outbox_bridge.client.job import Job
from outbox_bridge.core import clock
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.enqueuing import JobSpec, enqueue, enqueue_batch
from outbox_bridge.handlers.base import Cancelled, file_of
from outbox_bridge.jobstore import claiming, db, migrate, operator, queries, sweeper, workflows
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.records import Job as StoredJob
from outbox_bridge.jobstore.schema import WAITING_AT
from outbox_bridge.jobstore.states import TERMINAL, State
from outbox_bridge.worker.attempt import StoreContext, discard_uncommitted, run_attempt
from outbox_bridge.worker.commit import backoff_of, commit_outcomes
from outbox_bridge.worker.lease import LeaseKeeper

WORKER = "inline-1"


class WorkerCrashed(BaseException):
    """The inline worker stopped right after the kind marked its external effect started, as a SIGKILL would
    stop a real one there (a BaseException, so that nothing on the way handles it as the job's error)."""


@dataclass(frozen=True)
class Attempt:
    """What one inline attempt came to: the job once its outcome was committed."""

    job: Job

    @property
    def state(self) -> State:
        """The job's state after the attempt (never `running`: a retry is `queued`)."""
        return State(self.job.state)


class InlineJobs:
    """A store of its own in `directory` (SQLite), for the kinds this process knows; ALLOWED_KINDS as the
    deployment would have it (`settings`), the test kinds accepted."""

    def __init__(self, directory: Path, **settings: Any) -> None:
        self.settings = Settings(
            **{
                "database_url": f"sqlite:///{directory / 'jobs.db'}",
                "results_dir": directory / "results",
                "outbox_bridge_dev": True,
                "backoff_base_seconds": 1.0,
                **settings,
            }
        )
        self.engine = db.make_engine(self.settings)
        migrate.init_schema(self.settings, self.engine)
        self._clock = clock.FakeClock(clock.SystemClock().now())
        self._using = clock.use(self._clock)
        self._using.__enter__()
        self._keys = 0

    def close(self) -> None:
        self._using.__exit__(None, None, None)
        self.engine.dispose()

    def __enter__(self) -> InlineJobs:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def advance(self, seconds: float) -> None:
        """Move the store's clock."""
        self._clock.advance(seconds)

    def submit(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        tenant: str = "test",
        **options: Any,
    ) -> Job:
        """Accept a job as `enqueue` does (the same checks), committed."""
        self._keys += 1
        with self.engine.begin() as conn:
            return enqueue(
                conn, kind, payload, key=key or f"inline-{self._keys}", tenant=tenant, owner="test", **options
            )

    def submit_batch(
        self,
        jobs: Iterable[dict[str, Any] | JobSpec],
        *,
        callback: dict[str, Any] | JobSpec | None = None,
        key: str | None = None,
        tenant: str = "test",
    ) -> Batch:
        """Accept a batch as `enqueue_batch` does, committed: its `jobs` and its `callback`, each a
        `JobSpec` or a dict of its fields (`{"kind": ..., "payload": ..., "after": [...]}`). Once
        `run_to_end` has ended each of its jobs, `batch(id).callback_job_id` names the callback job, which
        `run_to_end` runs with `ctx.batch` filled."""
        self._keys += 1
        members = [_spec(job) for job in jobs]
        with self.engine.begin() as conn:
            return enqueue_batch(
                conn, members, callback=None if callback is None else _spec(callback),
                key=key or f"inline-batch-{self._keys}", tenant=tenant, owner="test",
            )  # fmt: skip

    def batch(self, batch_id: str) -> Batch:
        """The batch as `GET /batches/{id}` shows it; `KeyError` for an unknown id."""
        found = db.read(self.engine, workflows.get_batch, batch_id)
        if found is None:
            raise KeyError(batch_id)
        return Batch.from_view(BatchView.of(found).model_dump())

    def run(
        self, job_id: str, *, cancel_at_check: int | None = None, crash_after_external_start: bool = False
    ) -> Attempt:
        """Claim the job and run one attempt of it here, committing its outcome as a worker does.

        `cancel_at_check`: a cancel is committed for the job just before the kind's n-th `check_cancel()`
        (1, 2, ...), as if its owner asked then. `crash_after_external_start`: the worker is lost the moment
        the kind marks its external effect started; its lease then runs out and the sweeper settles the job
        as it would (`unknown`)."""
        taken = db.transact(
            self.engine, claiming.claim, job_id, WORKER, clock.now(), self.settings.lease_seconds
        )
        if taken.claim is None:
            raise AssertionError(f"job {job_id} cannot be claimed now: {taken.refusal}")
        keeper = LeaseKeeper(self.engine, self.settings, interval=self.settings.lease_seconds / 3).start()
        try:
            context = _Context(self, taken.claim, keeper, cancel_at_check, crash_after_external_start)
            try:
                outcome = run_attempt(context)
            except WorkerCrashed:
                keeper.drop(job_id)
                return self._lost(job_id)
            states = db.transact(
                self.engine,
                commit_outcomes,
                [(taken.claim, outcome)],
                clock.now(),
                self._backoff,
                max_snoozes=self.settings.max_snoozes,
            )
            discard_uncommitted(self.settings, taken.claim, outcome, states[0])
        finally:
            keeper.stop()
        return Attempt(self.job(job_id))

    def run_to_end(self, job_id: str, *, max_runs: int = 100) -> Job:
        """Run attempts, moving the clock over each retry's backoff and each snooze, until the job is
        finished."""
        for _ in range(max_runs):
            stored = self._stored(job_id)
            if stored.state in TERMINAL:
                return self.job(job_id)
            if stored.available_at >= WAITING_AT:
                waits = self.job(job_id).waiting_for
                raise AssertionError(
                    f"job {job_id} waits for {', '.join(waits)}: run those to their end first"
                )
            self._clock.set(max(self._clock.now(), stored.available_at))  # its start or its backoff passed
            self.run(job_id)
        raise AssertionError(f"job {job_id} is not finished after {max_runs} attempts")

    def cancel(self, job_id: str) -> Job:
        """What `POST /jobs/{id}/cancel` does: a queued job is cancelled at once, a running one is asked to
        stop."""
        db.transact(self.engine, operator.cancel, job_id, clock.now(), actor="test")
        return self.job(job_id)

    def job(self, job_id: str) -> Job:
        """The job as `GET /jobs/{id}` shows it; `KeyError` for an unknown id."""
        stored = self._stored(job_id)
        workflow = db.read(self.engine, workflow_of, stored)
        return Job.from_view(view_fields(stored, clock.now(), workflow=workflow))

    def result(self, job_id: str) -> Any:
        """The committed result: the JSON object the kind returned, None for a kind that returned None (a
        file's bytes for a kind that made one); `LookupError` while the job has none."""
        attempt = db.read(self.engine, queries.committed_result, job_id)
        if attempt is None:
            raise LookupError(f"job {job_id} has no committed result")
        named = file_of(attempt.output)
        if named is not None:
            return (self.settings.results_dir / named[0]).read_bytes()
        return json.loads(json.dumps(attempt.output))

    @property
    def _backoff(self) -> Backoff:
        return backoff_of(self.settings)

    def _stored(self, job_id: str) -> StoredJob:
        found = db.read(self.engine, queries.get_job, job_id)
        if found is None:
            raise KeyError(job_id)
        return found

    def _lost(self, job_id: str) -> Attempt:
        self._clock.advance(self.settings.lease_seconds + 1)
        db.transact(self.engine, sweeper.sweep_expired, clock.now(), backoff=self._backoff)
        return Attempt(self.job(job_id))


def _spec(job: dict[str, Any] | JobSpec) -> JobSpec:
    """A job of a batch as `enqueue_batch` takes it: a `JobSpec`, or one made of a dict of its fields."""
    return job if isinstance(job, JobSpec) else JobSpec(**job)


class _Context(StoreContext):
    """The worker's context, with the test's interruptions."""

    def __init__(
        self, jobs: InlineJobs, claim: Claim, keeper: LeaseKeeper, cancel_at: int | None, crash: bool
    ) -> None:
        super().__init__(jobs.engine, jobs.settings, claim, keeper.hold(claim))
        self._jobs, self._cancel_at, self._crash, self._checks = jobs, cancel_at, crash, 0

    def check_cancel(self) -> None:
        self._checks += 1
        if self._cancel_at is not None and self._checks == self._cancel_at:
            db.transact(self._jobs.engine, operator.cancel, self.claim.job_id, clock.now(), actor="test")
            raise Cancelled()
        super().check_cancel()

    def mark_external_started(self) -> None:
        super().mark_external_started()
        if self._crash:
            raise WorkerCrashed()


@pytest.fixture
def inline_jobs() -> Iterator[InlineJobs]:
    """An `InlineJobs` on a temporary store, closed after the test."""
    with (
        tempfile.TemporaryDirectory(prefix="outbox-bridge-") as directory,
        InlineJobs(Path(directory)) as jobs,
    ):
        yield jobs


__all__ = ["Attempt", "InlineJobs", "WorkerCrashed", "inline_jobs"]
