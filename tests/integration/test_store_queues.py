"""Claims of a process that runs some named queues only (`--queues`): from the table it takes their jobs
alone, expired leases included; a delivered job of another queue (which its broker queues never carry) is
refused, not run, and announced again so the relay publishes it to its own queue."""

from __future__ import annotations

from sqlalchemy import Engine, select

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, intake
from outbox_bridge.jobstore.schema import outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, job_row, publish_due


def on_queue(engine: Engine, clock: FakeClock, queue: str) -> str:
    """A new noop job on the named `queue`."""
    accepted = db.transact(
        engine, intake.accept, tenant="acme", owner="alice", kind="noop", payload={},
        operation_key=intake.new_id(), now=clock.now(), max_attempts=3, queue=queue,
    )  # fmt: skip
    return accepted.job.id


def claim_due(engine: Engine, clock: FakeClock, queues: set[str] | None, worker: str = "w1") -> list[str]:
    claims = db.transact(engine, claiming.claim_due, worker, clock.now(), LEASE, 10, queues=queues)
    return sorted(claim.job_id for claim in claims)


def test_a_claim_of_the_table_takes_the_jobs_of_its_queues_only(engine: Engine, clock: FakeClock) -> None:
    default, fast, slow = (on_queue(engine, clock, queue) for queue in ("default", "fast", "slow"))
    clock.advance(1)

    assert db.read(engine, claiming.any_due, clock.now(), queues={"elsewhere"}) is False
    assert claim_due(engine, clock, {"elsewhere"}) == []
    assert claim_due(engine, clock, {"fast"}) == [fast]
    assert claim_due(engine, clock, {"default", "fast"}) == [default]
    assert db.read(engine, claiming.any_due, clock.now(), queues={"fast", "slow"}) is True
    assert claim_due(engine, clock, None) == [slow]


def test_an_expired_lease_is_taken_over_only_by_a_claimer_of_its_queue(
    engine: Engine, clock: FakeClock
) -> None:
    slow = on_queue(engine, clock, "slow")
    assert claim_due(engine, clock, {"slow"}, worker="gone") == [slow]
    clock.advance(LEASE + 1)

    assert db.read(engine, claiming.any_due, clock.now(), queues={"fast"}) is False
    assert claim_due(engine, clock, {"fast"}) == []
    assert claim_due(engine, clock, {"slow"}, worker="w2") == [slow]
    row = job_row(engine, slow)
    assert (row.state, row.epoch, row.lease_owner) == (State.RUNNING, 2, "w2")


def test_a_delivered_job_of_another_queue_is_refused_and_announced_again_for_its_own(
    engine: Engine, clock: FakeClock
) -> None:
    slow = on_queue(engine, clock, "slow")
    fast = on_queue(engine, clock, "fast")
    publish_due(engine, now=clock.now())  # their first deliveries went out
    clock.advance(1)

    results = db.transact(
        engine, claiming.claim_many, [slow, fast], "w1", clock.now(), LEASE, queues={"fast"}
    )

    assert [(r.refusal, r.state) for r in results] == [
        (claiming.Refusal.OTHER_QUEUE, State.QUEUED),
        (None, State.RUNNING),
    ]
    row = job_row(engine, slow)
    assert (row.state, row.epoch, row.attempts) == (State.QUEUED, 0, 0)
    pending = select(outbox.c.job_id, outbox.c.available_at).where(outbox.c.published_at.is_(None))
    announced = db.read(engine, lambda conn: conn.execute(pending).all())
    assert [(job_id, at) for job_id, at in announced] == [(slow, clock.now() + claiming.REROUTE_SECONDS)]
