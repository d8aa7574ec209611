"""`TENANT_SHARE` in a process that claims ahead (`worker.share`, `worker.budget`): a store writer whose jobs
ran short, so that it claims ahead of its threads, still takes a tenant no further than its share while
another tenant has work; alone, the tenant gets every thread and claims ahead; and when another tenant's
delivery arrives while a tenant holds jobs past its share that wait for a thread, those go back to the
store, and the other tenant's job takes the first thread that frees, before them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.states import State
from outbox_bridge.worker.budget import SHORT_RUNS_TO_BURST, ClaimBudget
from outbox_bridge.worker.lease import LeaseKeeper
from outbox_bridge.worker.runners import Runners
from outbox_bridge.worker.writer import StoreWriter
from tests.support.procs import wait_for
from tests.support.store import job_row, new_jobs

THREADS = 4
MOST = 3  # the default TENANT_SHARE of 0.75 of four threads
SLEEP = {"seconds": 0.3}  # long enough that the jobs claimed ahead are still waiting when looked at


@dataclass(frozen=True)
class Delivered:
    job_id: str
    tenant: str
    priority: int = 1
    traceparent: str | None = None


@pytest.fixture
def most_held(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The most jobs of each tenant the process held claimed at once, counted at every claim it began."""
    peak: Counter[str] = Counter()
    begin = Runners.begin

    def counted(self: Runners, *args: Any, **kwargs: Any) -> Any:
        running = begin(self, *args, **kwargs)
        for tenant, count in Counter(self.tenants()).items():
            peak[tenant] = max(peak[tenant], count)
        return running

    monkeypatch.setattr(Runners, "begin", counted)
    return peak


@contextmanager
def claiming_ahead(engine: Engine, settings: Settings) -> Iterator[StoreWriter]:
    """A consumer's store writer of four threads whose last jobs all ran short: it claims ahead."""
    budget = ClaimBudget(THREADS, prefetch=THREADS + 60)
    for _ in range(SHORT_RUNS_TO_BURST):
        budget.ran(0.0001)
    keeper = LeaseKeeper(engine, settings).start()
    writer = StoreWriter(
        engine, settings, keeper, concurrency=THREADS, worker="w", role="consumer", budget=budget
    )
    try:
        yield writer
    finally:
        writer.close()
        keeper.stop()


def finished(engine: Engine, ids: list[str]) -> Callable[[], bool]:
    return lambda: all(job_row(engine, job_id).state is State.SUCCEEDED for job_id in ids)


def test_a_writer_claiming_ahead_takes_a_tenant_no_further_than_its_share_while_another_has_a_job_due(
    engine: Engine, settings: Settings, most_held: Counter[str]
) -> None:
    new_jobs(engine, 1, tenant="other")  # due in the store, delivered to some other consumer
    heavy = new_jobs(engine, 10, tenant="heavy", kind="sleep", payload=SLEEP)
    with claiming_ahead(engine, settings) as writer:
        for job_id in heavy:
            writer.offer(Delivered(job_id, "heavy"))
        writer.start()
        wait_for(finished(engine, heavy), 20, what="the heavy jobs succeeded")
    assert most_held["heavy"] == MOST


def test_a_tenant_alone_gets_every_thread_and_claims_ahead(
    engine: Engine, settings: Settings, most_held: Counter[str]
) -> None:
    heavy = new_jobs(engine, 10, tenant="heavy", kind="sleep", payload=SLEEP)
    with claiming_ahead(engine, settings) as writer:
        for job_id in heavy:
            writer.offer(Delivered(job_id, "heavy"))
        writer.start()
        wait_for(finished(engine, heavy), 20, what="the heavy jobs succeeded")
    assert most_held["heavy"] == len(heavy), "every job claimed at once, ahead of the threads"


def test_jobs_past_the_share_waiting_for_a_thread_go_back_when_another_tenant_has_work(
    engine: Engine, settings: Settings
) -> None:
    heavy = new_jobs(engine, 10, tenant="heavy", kind="sleep", payload=SLEEP)
    with claiming_ahead(engine, settings) as writer:
        for job_id in heavy:
            writer.offer(Delivered(job_id, "heavy"))
        writer.start()

        def started() -> int:
            return sum(running.started is not None for running in writer.running())

        wait_for(lambda: len(writer.running()) == len(heavy) and started() == THREADS, 10, what="all claimed")
        [light] = new_jobs(engine, 1, tenant="light")
        writer.offer(Delivered(light, "light"))
        wait_for(
            lambda: writer.counts["shed"] == len(heavy) - THREADS, 10, what="the waiting ones given back"
        )
        wait_for(finished(engine, [*heavy, light]), 20, what="every job succeeded")

    def began(job_id: str) -> float:
        """When the attempt that ran the job was claimed (one given back was claimed again later)."""
        return db.read(engine, queries.attempts_of, job_id)[-1].started_at

    given_back = sorted(heavy, key=began)[THREADS:]
    assert began(light) < min(began(job_id) for job_id in given_back), "the light job went first"
    assert all(job_row(engine, job_id).attempts == 1 for job_id in heavy), "giving back spends no attempt"
