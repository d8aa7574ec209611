"""Completion webhook deliveries are written by the transition itself (the store's trigger on `jobs`): every
writer of a terminal state writes exactly one delivery per matching endpoint of the job's tenant, none for
another tenant's endpoint or an event the endpoint did not ask for, and a transition that rolls back or is
fenced out writes none."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Connection, Engine

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, intake, operator, retention, sweeper
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.states import State
from outbox_bridge.jobstore.webhook_deliveries import Attempted, RetryDecision, Shares, due, record_attempt
from outbox_bridge.jobstore.webhooks import EVENTS, DeliveryState
from tests.support.store import LEASE, claimed, job_row, new_job
from tests.support.webhooks import add_endpoint, attempt_rows, deliveries

BACKOFF = Backoff(base=0.05, cap=0.5)

# Each writer takes a fresh job of tenant acme to a terminal state; it returns the state it reached.
Writer = Callable[[Engine, FakeClock], tuple[str, State]]


def _completed(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    held = claimed(engine, new_job(engine, intake.new_id()))
    state = db.transact(
        engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {"n": 1}, clock.now()
    )
    return held.job_id, state


def _completed_in_a_batch(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    """As the consumer's group commit does it (`complete_many`, one statement for many jobs)."""
    held = claimed(engine, new_job(engine, intake.new_id()))
    done = fenced.Completion(held.job_id, held.epoch, held.attempt_id, {"n": 1})
    (state,) = db.transact(engine, fenced.complete_many, [done], clock.now())
    assert state is not None
    return held.job_id, state


def _failed(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    held = claimed(engine, new_job(engine, intake.new_id()))
    decision = db.transact(
        engine,
        fenced.fail,
        held.job_id,
        held.epoch,
        held.attempt_id,
        code="bad_input",
        message="no",
        permanent=True,
        now=clock.now(),
        backoff=BACKOFF,
    )
    return held.job_id, decision.state


def _swept_dead(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    job_id = new_job(engine, intake.new_id(), deadline=5)
    claimed(engine, job_id)
    clock.advance(6)
    db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF)
    return job_id, job_row(engine, job_id).state


def _swept_unknown(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    held = claimed(engine, new_job(engine, intake.new_id()))
    db.transact(engine, fenced.mark_external_started, held.job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE + 1)
    db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF)
    return held.job_id, job_row(engine, held.job_id).state


def _resolved(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    """An operator settles an unknown job: the job.unknown delivery is left out (its own test shows it),
    this one counts the job.succeeded."""
    job_id, state = _swept_unknown(engine, clock)
    assert state is State.UNKNOWN
    job = db.transact(engine, operator.resolve, job_id, State.SUCCEEDED, "checked", clock.now(), actor="op")
    return job_id, job.state


def _cancelled_by_operator(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    job_id = new_job(engine, intake.new_id())
    _, job = db.transact(engine, operator.cancel, job_id, clock.now(), actor="op")
    return job_id, job.state


def _cancelled_by_tenant(engine: Engine, clock: FakeClock) -> tuple[str, State]:
    """As `POST /jobs/{id}/cancel` does it."""
    job_id = new_job(engine, intake.new_id())
    db.transact(engine, operator.request_cancel, job_id, clock.now(), tenant="acme")
    return job_id, job_row(engine, job_id).state


WRITERS: dict[str, Writer] = {
    "consumer_complete": _completed,
    "consumer_group_commit": _completed_in_a_batch,
    "permanent_failure": _failed,
    "sweeper_dead": _swept_dead,
    "sweeper_unknown": _swept_unknown,
    "operator_resolve": _resolved,
    "operator_cancel": _cancelled_by_operator,
    "tenant_cancel": _cancelled_by_tenant,
}
EXPECTED = {
    "consumer_complete": State.SUCCEEDED,
    "consumer_group_commit": State.SUCCEEDED,
    "permanent_failure": State.FAILED,
    "sweeper_dead": State.DEAD,
    "sweeper_unknown": State.UNKNOWN,
    "operator_resolve": State.SUCCEEDED,
    "operator_cancel": State.CANCELLED,
    "tenant_cancel": State.CANCELLED,
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_each_writer_of_a_terminal_state_writes_one_delivery_per_matching_endpoint(
    engine: Engine, settings: Settings, clock: FakeClock, writer: str
) -> None:
    every, _ = add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/all")
    state = EXPECTED[writer]
    matching, _ = add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/one", (f"job.{state.value}",))
    others = tuple(e for e in EVENTS if e != f"job.{state.value}")
    add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/others", others)
    add_endpoint(engine, settings, "globex", "http://127.0.0.1:9/globex")

    job_id, reached = WRITERS[writer](engine, clock)

    assert reached is state
    written = [d for d in deliveries(engine) if d.event == f"job.{state.value}"]
    assert sorted(d.endpoint_id for d in written) == sorted([every.id, matching.id])
    assert all(d.job_id == job_id and d.tenant == "acme" for d in written)
    assert all(d.state is DeliveryState.PENDING and d.attempts == 0 for d in written)
    job = job_row(engine, job_id)
    assert all(d.occurred_at == job.updated_at == d.next_attempt_at for d in written)
    assert len({d.id for d in deliveries(engine)}) == len(deliveries(engine))


def test_a_job_that_only_moves_between_active_states_writes_no_delivery(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/all")
    held = claimed(engine, new_job(engine, intake.new_id()))
    db.transact(engine, fenced.release, held.job_id, held.epoch, held.attempt_id, clock.now())
    again = claimed(engine, held.job_id)
    db.transact(
        engine,
        fenced.fail,
        again.job_id,
        again.epoch,
        again.attempt_id,
        code="flaky",
        message="try again",
        permanent=False,
        now=clock.now(),
        backoff=BACKOFF,
    )
    assert job_row(engine, held.job_id).state is State.QUEUED
    assert deliveries(engine) == []


def test_a_requeued_job_that_finishes_again_writes_a_second_delivery(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/all")
    job_id, _ = _failed(engine, clock)
    db.transact(engine, operator.requeue, job_id, clock.now(), actor="op")
    held = claimed(engine, job_id)
    db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {}, clock.now())
    assert sorted(d.event for d in deliveries(engine)) == ["job.failed", "job.succeeded"]


def test_a_transition_rolled_back_writes_no_delivery(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/all")
    held = claimed(engine, new_job(engine, intake.new_id()))

    def complete_then_fail(conn: Connection) -> None:
        fenced.complete(conn, held.job_id, held.epoch, held.attempt_id, {}, clock.now())
        raise RuntimeError("after the update, before the commit")

    with pytest.raises(RuntimeError):
        db.transact(engine, complete_then_fail)
    assert job_row(engine, held.job_id).state is State.RUNNING
    assert deliveries(engine) == []


def test_a_fenced_out_commit_writes_no_delivery(engine: Engine, settings: Settings, clock: FakeClock) -> None:
    add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/all")
    job_id = new_job(engine, intake.new_id())
    stale = claimed(engine, job_id, "w1")
    clock.advance(LEASE + 1)
    claimed(engine, job_id, "w2")  # took over: epoch 2

    def late_commit(conn: Connection) -> str:
        try:
            fenced.complete(conn, job_id, stale.epoch, stale.attempt_id, {}, clock.now())
        except Fenced:
            return "fenced"
        return "written"

    assert db.transact(engine, late_commit) == "fenced"  # committed, having written nothing
    done = fenced.Completion(job_id, stale.epoch, stale.attempt_id, {})
    assert db.transact(engine, fenced.complete_many, [done], clock.now()) == [None]
    assert job_row(engine, job_id).state is State.RUNNING
    assert deliveries(engine) == []


def test_the_job_retention_deletes_delivered_rows_with_their_job_and_keeps_a_job_whose_delivery_is_pending(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/all")
    delivered_job, _ = _completed(engine, clock)
    pending_job, _ = _failed(engine, clock)
    by_job = {d.job_id: d for d in deliveries(engine)}
    sent = by_job[delivered_job]
    attempted = Attempted(at=clock.now(), status_code=200, latency_ms=3.0)
    decision = RetryDecision(DeliveryState.DELIVERED, sent.next_attempt_at)
    assert db.transact(engine, record_attempt, sent, attempted, decision)
    clock.advance(10)

    pruned = db.transact(engine, retention.prune, clock.now())

    assert pruned == [delivered_job]
    assert [d.job_id for d in deliveries(engine)] == [pending_job]
    assert attempt_rows(engine, sent.id) == []
    assert job_row(engine, pending_job).state is State.FAILED


def test_due_deliveries_are_read_by_turns_across_tenants_and_their_endpoints(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    slow = [add_endpoint(engine, settings, "acme", f"http://127.0.0.1:9/slow-{n}")[0] for n in range(3)]
    prompt, _ = add_endpoint(engine, settings, "globex", "http://127.0.0.1:9/prompt")
    # acme's deliveries (three per job, one per endpoint) are all due before globex's only one.
    for _ in range(3):
        _completed(engine, clock)
        clock.advance(1.0)
    held = claimed(engine, new_job(engine, "globex-job", tenant="globex"))
    db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {"n": 1}, clock.now())

    read = db.read(engine, due, clock.now(), limit=3, shares=Shares(per_endpoint=2, per_tenant=10))

    assert [d.tenant for d in read[:2]] == ["acme", "globex"]  # each tenant's first turn
    assert read[1].endpoint_id == prompt.id
    assert len({d.endpoint_id for d in read}) == 3, "acme's turns go across its endpoints"
    every = db.read(engine, due, clock.now(), limit=100, shares=Shares(per_endpoint=2, per_tenant=5))
    acme = [d.endpoint_id for d in every if d.tenant == "acme"]
    assert len(acme) == 5 and all(acme.count(e.id) <= 2 for e in slow)


def test_due_deliveries_leave_out_tenants_and_endpoints_at_their_share(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    first, _ = add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/first")
    second, _ = add_endpoint(engine, settings, "acme", "http://127.0.0.1:9/second")
    add_endpoint(engine, settings, "globex", "http://127.0.0.1:9/globex")
    _completed(engine, clock)
    held = claimed(engine, new_job(engine, "globex-job", tenant="globex"))
    db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {"n": 1}, clock.now())
    shares = Shares(per_endpoint=4, per_tenant=4)

    read = db.read(engine, due, clock.now(), limit=10, shares=shares, skip_tenants={"acme"})
    assert {d.tenant for d in read} == {"globex"}
    read = db.read(engine, due, clock.now(), limit=10, shares=shares, skip_endpoints={first.id})
    assert {d.endpoint_id for d in read if d.tenant == "acme"} == {second.id}
