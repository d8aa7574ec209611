"""`TENANT_MAX_RUNNING`: no claim takes a tenant past the cap, on either store and in every claim path (the
baseline's `claim_due`, a consumer's `claim_many`, the relay role's read); the jobs it passes over stay queued
and run later; two concurrent claimers on PostgreSQL cannot both pass the count."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, func, select

from outbox_bridge.baseline.worker import BaselineProcess
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, tenantcap
from outbox_bridge.jobstore.schema import attempts, jobs
from outbox_bridge.jobstore.schema import outbox as outbox_table
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, due_rows, job_row, new_jobs

CAP = 2


def claim_due(engine: Engine, clock: FakeClock, limit: int, worker: str = "w1") -> list[str]:
    claims = db.transact(engine, claiming.claim_due, worker, clock.now(), LEASE, limit, tenant_cap=CAP)
    return [c.job_id for c in claims]


def running(engine: Engine) -> dict[str, int]:
    return dict(db.read(engine, tenantcap.running))


def test_the_table_claim_passes_over_a_capped_tenant_and_takes_it_again_once_a_job_ends(
    engine: Engine, clock: FakeClock
) -> None:
    heavy = new_jobs(engine, 10, tenant="heavy")
    light = new_jobs(engine, 3, tenant="light")
    clock.advance(1)

    first = claim_due(engine, clock, 10)
    assert running(engine) == {"heavy": CAP, "light": CAP}
    assert claim_due(engine, clock, 10) == []
    assert [job_row(engine, job_id).state for job_id in heavy].count(State.QUEUED) == len(heavy) - CAP

    done = db.transact(engine, claiming.claim, first[0], "w1", clock.now(), LEASE)  # leased already
    assert done.refusal is claiming.Refusal.LEASED
    ended = next(job_id for job_id in first if job_id in heavy)
    epoch_attempt = db.read(
        engine, lambda conn: conn.execute(select(jobs.c.epoch).where(jobs.c.id == ended)).scalar_one()
    )
    attempt_id = _attempt_of(engine, ended)
    db.transact(engine, fenced.complete, ended, epoch_attempt, attempt_id, {}, clock.now())

    assert [job_row(engine, job_id).tenant for job_id in claim_due(engine, clock, 10)] == ["heavy"]
    assert running(engine) == {"heavy": CAP, "light": CAP}
    assert len(light) == 3


def _attempt_of(engine: Engine, job_id: str) -> str:
    query = select(attempts.c.id).where(attempts.c.job_id == job_id)
    return str(db.read(engine, lambda conn: conn.execute(query).scalar_one()))


def test_a_delivery_past_the_cap_is_refused_and_its_outbox_row_comes_due_again(
    engine: Engine, clock: FakeClock
) -> None:
    ids = new_jobs(engine, 3, tenant="heavy")
    db.transact(engine, lambda conn: conn.execute(outbox_table.delete()))  # as if all three were delivered
    clock.advance(1)

    results = db.transact(engine, claiming.claim_many, ids, "w1", clock.now(), LEASE, tenant_cap=CAP)

    assert [r.refusal for r in results] == [None, None, claiming.Refusal.TENANT_BUSY]
    assert job_row(engine, ids[2]).state is State.QUEUED
    query = select(outbox_table.c.job_id, outbox_table.c.available_at, outbox_table.c.tenant)
    rows = db.read(engine, lambda conn: [tuple(r) for r in conn.execute(query)])
    assert rows == [(ids[2], clock.now() + tenantcap.RETRY_SECONDS, "heavy")]


def test_the_relay_reads_a_capped_tenant_no_more_rows_than_it_may_start(
    engine: Engine, clock: FakeClock
) -> None:
    heavy = new_jobs(engine, 10, tenant="heavy")
    light = new_jobs(engine, 3, tenant="light")
    db.transact(engine, claiming.claim_many, heavy[:1], "w1", clock.now(), LEASE)
    clock.advance(1)

    held = due_rows(engine, limit=50, tenant_cap=CAP)

    tenants = [job_row(engine, job_id).tenant for _, job_id in held.rows]
    assert sorted(tenants) == ["heavy"] + ["light"] * CAP, "heavy runs one: one more of its rows"
    assert set(light) >= {job_id for _, job_id in held.rows if job_id not in heavy}


@pytest.mark.databases("postgresql")
def test_concurrent_claimers_on_postgresql_never_pass_the_cap_together(
    engine: Engine, clock: FakeClock
) -> None:
    new_jobs(engine, 40, tenant="heavy")
    clock.advance(1)
    gate = threading.Barrier(6)

    def claimer(i: int) -> int:
        gate.wait(timeout=30)
        return sum(len(claim_due(engine, clock, 5, worker=f"w{i}")) for _ in range(3))

    with ThreadPoolExecutor(6) as pool:
        taken = sum(pool.map(claimer, range(6)))

    assert taken == CAP
    assert running(engine) == {"heavy": CAP}


@pytest.mark.databases("sqlite")
def test_a_baseline_worker_never_runs_more_than_the_cap_and_finishes_every_job(
    settings: Settings, engine: Engine
) -> None:
    settings = settings.model_copy(update={"tenant_max_running": CAP})
    ids = new_jobs(engine, 12, tenant="heavy", kind="sleep", payload={"seconds": 0.05})
    new_jobs(engine, 4, tenant="light", kind="sleep", payload={"seconds": 0.05})
    peak = 0
    process = BaselineProcess(engine, settings, concurrency=6).start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            peak = max(peak, max(running(engine).values(), default=0))
            if db.read(engine, _finished) == 16:
                break
            time.sleep(0.01)
    finally:
        process.shutdown()
    assert db.read(engine, _finished) == 16, "every capped job still ran"
    assert peak <= CAP
    assert job_row(engine, ids[-1]).state is State.SUCCEEDED


def _finished(conn: object) -> int:
    query = select(func.count()).select_from(jobs).where(jobs.c.state == State.SUCCEEDED.value)
    return int(conn.execute(query).scalar_one())  # type: ignore[attr-defined]
