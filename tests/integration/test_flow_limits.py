"""Flow limits in the store (`jobstore.limits`), on both databases: `KIND_MAX_RUNNING`, `KIND_RATE_LIMITS` and
concurrency keys decide every claim path (a consumer's `claim_many`, the table's `claim_due`); a job held
back stays queued, spends no attempt, is held (not delivered again in a loop) and is announced when room
opens, by the transaction that ends a running job or by the relay role's sweep; concurrent claimers on
PostgreSQL never pass a cap together."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Connection, Engine, func, select, update

from outbox_bridge.broker.connection import QueueDepth
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, limits, overview
from outbox_bridge.jobstore.limits import HoldReason, Limits
from outbox_bridge.jobstore.schema import jobs
from outbox_bridge.jobstore.schema import outbox as outbox_table
from outbox_bridge.jobstore.states import State
from outbox_bridge.telemetry.exposition import StoreCollector, render
from outbox_bridge.views import status_document
from outbox_bridge.worker.attempt import AttemptOutcome
from outbox_bridge.worker.commit import backoff_of, commit_outcomes
from tests.support.store import LEASE, job_row, new_jobs

CAPPED = Limits(kind_max_running={"export": 2})
KEYED = Limits()
RATED = Limits(kind_intervals={"notify": 0.2})


def deliver(engine: Engine, clock: FakeClock, ids: list[str], rules: Limits, worker: str = "w1") -> list:
    """A consumer's claim of the deliveries of `ids`, as one round takes them."""
    return db.transact(engine, claiming.claim_many, ids, worker, clock.now(), LEASE, limits=rules)


def table_claim(engine: Engine, clock: FakeClock, limit: int, rules: Limits, worker: str = "w1") -> list[str]:
    claims = db.transact(engine, claiming.claim_due, worker, clock.now(), LEASE, limit, limits=rules)
    return [c.job_id for c in claims]


def running_of(engine: Engine, **where: str) -> int:
    query = select(func.count()).where(jobs.c.state == State.RUNNING.value)
    for name, value in where.items():
        query = query.where(jobs.c[name] == value)
    return int(db.read(engine, lambda conn: conn.execute(query).scalar_one()))


def pending_rows(engine: Engine) -> list[tuple[str, float]]:
    query = (
        select(outbox_table.c.job_id, outbox_table.c.available_at)
        .where(outbox_table.c.published_at.is_(None))
        .order_by(outbox_table.c.available_at, outbox_table.c.id)
    )
    return db.read(engine, lambda conn: [(str(a), float(b)) for a, b in conn.execute(query)])


def drop_outbox(engine: Engine) -> None:
    """As if every announced delivery had been published."""
    db.transact(engine, lambda conn: conn.execute(outbox_table.delete()))


def finish(engine: Engine, clock: FakeClock, claims: list, rules: Limits, settings: Settings) -> None:
    """Commit each claim's success through the completer, as a consumer's round does."""
    outcomes = [(claim, AttemptOutcome(output={})) for claim in claims]
    db.transact(engine, commit_outcomes, outcomes, clock.now(), backoff_of(settings), rules)


def test_a_capped_kind_runs_no_more_than_its_cap_and_the_rest_are_held_not_redelivered(
    engine: Engine, clock: FakeClock
) -> None:
    exports = new_jobs(engine, 4, kind="export")
    others = new_jobs(engine, 2, kind="noop")
    drop_outbox(engine)
    clock.advance(1)

    results = deliver(engine, clock, exports + others, CAPPED)

    refusals = [r.refusal for r in results]
    assert refusals == [None, None, claiming.Refusal.HELD, claiming.Refusal.HELD, None, None]
    assert running_of(engine, kind="export") == 2
    for job_id in exports[2:]:
        job = job_row(engine, job_id)
        assert (job.state, job.attempts, job.held_by) == (State.QUEUED, 0, HoldReason.KIND.value)
    assert pending_rows(engine) == [], "a held job is not delivered again until it has room"


def test_the_end_of_a_capped_job_announces_the_first_held_one_in_its_transaction(
    engine: Engine, clock: FakeClock, settings: Settings
) -> None:
    exports = new_jobs(engine, 4, kind="export")
    drop_outbox(engine)
    clock.advance(1)
    results = deliver(engine, clock, exports, CAPPED)
    taken = [r.claim for r in results if r.claim is not None]

    finish(engine, clock, taken[:1], CAPPED, settings)

    [(announced, _)] = pending_rows(engine)
    assert announced in exports[2:], "one held job for the one place that opened"
    assert [job_row(engine, job_id).held_by for job_id in exports[2:] if job_id != announced] == ["kind"]
    again = deliver(engine, clock, [announced], CAPPED)
    assert again[0].claim is not None
    assert running_of(engine, kind="export") == 2


def test_the_relay_roles_sweep_announces_held_jobs_when_room_opened_without_a_completion(
    engine: Engine, clock: FakeClock
) -> None:
    exports = new_jobs(engine, 3, kind="export")
    drop_outbox(engine)
    clock.advance(1)
    deliver(engine, clock, exports, Limits(kind_max_running={"export": 1}))
    assert db.transact(engine, limits.release_held, Limits(kind_max_running={"export": 1}), clock.now()) == 0

    # The cap is raised (a deployment restarted with KIND_MAX_RUNNING=export=3): room for both.
    announced = db.transact(engine, limits.release_held, Limits(kind_max_running={"export": 3}), clock.now())

    assert announced == 2
    assert sorted(job_id for job_id, _ in pending_rows(engine)) == sorted(exports[1:])
    assert [job_row(engine, job_id).held_by for job_id in exports[1:]] == [None, None]


def test_a_concurrency_key_lets_one_of_a_tenants_jobs_run_at_a_time_and_keys_of_other_tenants_apart(
    engine: Engine, clock: FakeClock, settings: Settings
) -> None:
    same = new_jobs(engine, 3, tenant="acme", concurrency_key="customer-7")
    other_key = new_jobs(engine, 1, tenant="acme", concurrency_key="customer-8")
    other_tenant = new_jobs(engine, 1, tenant="globex", concurrency_key="customer-7")
    drop_outbox(engine)
    clock.advance(1)

    results = deliver(engine, clock, same + other_key + other_tenant, KEYED)

    assert [r.refusal for r in results] == [None, claiming.Refusal.HELD, claiming.Refusal.HELD, None, None]
    assert job_row(engine, same[1]).held_by == HoldReason.KEY.value
    finish(engine, clock, [results[0].claim], KEYED, settings)
    [(announced, _)] = pending_rows(engine)
    assert announced in same[1:], "one held job of the key for the one place that opened"


def test_a_rate_spaces_starts_and_its_held_jobs_take_turns_one_delivery_at_a_time(
    engine: Engine, clock: FakeClock
) -> None:
    ids = new_jobs(engine, 4, kind="notify")
    drop_outbox(engine)
    clock.advance(1)
    start = clock.now()

    results = deliver(engine, clock, ids, RATED)

    assert [r.refusal for r in results] == [None] + [claiming.Refusal.HELD] * 3
    [(first, due)] = pending_rows(engine)
    assert first in ids[1:] and round(due - start, 6) == 0.2, "one turn, at the next start"
    clock.advance(0.1)
    drop_outbox(engine)
    assert deliver(engine, clock, [first], RATED)[0].refusal is claiming.Refusal.HELD, "too early"
    assert [job_id for job_id, _ in pending_rows(engine)] == [first], "it keeps its turn"
    clock.advance(0.11)
    drop_outbox(engine)
    assert deliver(engine, clock, [first], RATED)[0].claim is not None
    [(second, due)] = pending_rows(engine)
    assert second in ids[1:] and second != first and round(due - clock.now(), 6) == 0.2, "the next turn"


def test_the_table_claim_passes_over_full_kinds_and_keys_and_takes_what_has_room(
    engine: Engine, clock: FakeClock
) -> None:
    rules = Limits(kind_max_running={"export": 1}, kind_intervals={"notify": 10.0})
    exports = new_jobs(engine, 3, kind="export")
    keyed = new_jobs(engine, 3, kind="noop", concurrency_key="k")
    notifies = new_jobs(engine, 3, kind="notify")
    plain = new_jobs(engine, 2, kind="noop")
    clock.advance(1)

    first = table_claim(engine, clock, 20, rules)

    assert sorted(first) == sorted([exports[0], keyed[0], notifies[0], *plain])
    assert table_claim(engine, clock, 20, rules) == [], "everything left waits for room"
    assert db.read(engine, claiming.any_due, clock.now(), limits=rules) is False
    assert all(job_row(engine, job_id).held_by is None for job_id in exports + keyed), "the table holds none"
    clock.advance(10)
    assert table_claim(engine, clock, 20, rules) == [notifies[1]], "one start per interval"


def test_a_taken_over_expired_lease_is_not_counted_twice(engine: Engine, clock: FakeClock) -> None:
    [job_id] = new_jobs(engine, 1, kind="export", concurrency_key="k")
    drop_outbox(engine)
    clock.advance(1)
    assert deliver(engine, clock, [job_id], Limits(kind_max_running={"export": 1}))[0].claim is not None
    clock.advance(LEASE + 1)

    again = deliver(engine, clock, [job_id], Limits(kind_max_running={"export": 1}), worker="w2")

    assert again[0].claim is not None and again[0].claim.epoch == 2


@pytest.mark.databases("postgresql")
def test_concurrent_claimers_on_postgresql_never_pass_a_kind_cap_or_a_key_together(
    engine: Engine, clock: FakeClock
) -> None:
    exports = new_jobs(engine, 30, kind="export")
    keyed = new_jobs(engine, 30, kind="noop", concurrency_key="k")
    drop_outbox(engine)
    clock.advance(1)
    gate = threading.Barrier(6)

    def claimer(i: int) -> int:
        gate.wait(timeout=30)
        mine = (exports + keyed)[i::6]
        return sum(r.claim is not None for r in deliver(engine, clock, mine, CAPPED, worker=f"w{i}"))

    with ThreadPoolExecutor(6) as pool:
        taken = sum(pool.map(claimer, range(6)))

    assert taken == 3
    assert running_of(engine, kind="export") == 2
    assert running_of(engine, concurrency_key="k") == 1


def test_held_by_of_a_job_no_longer_queued_is_forgotten_by_the_sweep(
    engine: Engine, clock: FakeClock
) -> None:
    exports = new_jobs(engine, 2, kind="export")
    clock.advance(1)
    deliver(engine, clock, exports, Limits(kind_max_running={"export": 1}))

    def cancel(conn: Connection) -> None:
        conn.execute(update(jobs).where(jobs.c.id == exports[1]).values(state=State.CANCELLED.value))

    db.transact(engine, cancel)
    db.transact(engine, limits.release_held, Limits(kind_max_running={"export": 1}), clock.now())

    assert job_row(engine, exports[1]).held_by is None


def test_status_metrics_and_the_dashboard_count_the_held_jobs_by_kind_and_limit(
    engine: Engine, clock: FakeClock, settings: Settings
) -> None:
    new_jobs(engine, 3, kind="export")
    new_jobs(engine, 2, kind="noop", concurrency_key="k")
    clock.advance(1)
    queued = db.read(engine, lambda conn: list(conn.execute(select(jobs.c.id)).scalars()))
    deliver(engine, clock, queued, Limits(kind_max_running={"export": 1}))

    view = db.read(engine, overview.overview, clock.now(), overview.Liveness.of(settings))
    figures = db.read(engine, overview.store_figures, clock.now(), settings.alive_within_seconds)
    registry = CollectorRegistry()
    registry.register(StoreCollector(lambda: figures))
    scraped = render(registry).decode()

    assert [(h.kind, h.held_by, h.queued) for h in view.held] == [("export", "kind", 2), ("noop", "key", 1)]
    assert status_document(view, "dlq", QueueDepth(0))["held"] == [
        {"kind": "export", "limit": "kind", "queued": 2},
        {"kind": "noop", "limit": "key", "queued": 1},
    ]
    assert figures.held == {("export", "kind"): 2, ("noop", "key"): 1}
    assert 'outbox_bridge_jobs_held{kind="export",limit="kind"} 2.0' in scraped
