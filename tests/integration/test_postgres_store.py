"""The store on PostgreSQL under real concurrency, whatever TEST_DATABASES says: threads with connections of
their own race for the same rows, and the row locks (`FOR UPDATE SKIP LOCKED`), the guarded UPDATEs and
`db.transact`'s bounded retries decide. Nothing here is serialized by a lock in Python."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.exc import DataError, IntegrityError

from outbox_bridge.core import clock
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import (
    claiming,
    db,
    drivers,
    fenced,
    intake,
    leader,
    migrate,
    operator,
    sweeper,
)
from outbox_bridge.jobstore.drivers import postgresql as postgresql_driver
from outbox_bridge.jobstore.drivers.sqlfile import Statement
from outbox_bridge.jobstore.errors import Fenced, IdempotencyConflict
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.schema import attempts, jobs
from outbox_bridge.jobstore.schema import outbox as outbox_table
from outbox_bridge.jobstore.states import TERMINAL, State
from tests.conftest import make_settings
from tests.support.invariants import check_invariants
from tests.support.procs import wait_for

# PostgreSQL's own behaviour: once, on PostgreSQL, whatever TEST_DATABASES says.
pytestmark = pytest.mark.databases("postgresql")

T = TypeVar("T")
THREADS = 8
LEASE = 60.0
BACKOFF = Backoff(base=0.02, cap=0.1)


@pytest.fixture
def pg_settings(tmp_path: Path, postgres_url: str) -> Settings:
    return make_settings(tmp_path, database_url=postgres_url, store_lock_timeout_seconds=20.0)


@pytest.fixture
def pg_engine(pg_settings: Settings) -> Iterator[Engine]:
    engine = db.make_engine(pg_settings, pool_size=THREADS + 2, max_overflow=THREADS)
    migrate.init_schema(pg_settings, engine)
    assert engine.dialect.name == "postgresql"
    yield engine
    engine.dispose()


def accept_many(conn: Connection, count: int, now: float, prefix: str = "k") -> list[str]:
    ids = []
    for i in range(count):
        accepted = intake.accept(
            conn, tenant="acme", owner="ann", kind="noop", payload={"i": i},
            operation_key=f"{prefix}-{i}", now=now, max_attempts=3,
        )  # fmt: skip
        ids.append(accepted.job.id)
    return ids


def seed(engine: Engine, count: int) -> list[str]:
    """`count` queued jobs with their outbox rows, accepted in a few transactions."""
    ids: list[str] = []
    for start in range(0, count, 100):
        ids += db.transact(engine, accept_many, min(100, count - start), clock.now(), prefix=f"k{start}")
    return ids


def race(threads: int, work: Callable[[int], T]) -> list[T]:
    """Run `work(i)` on `threads` threads released together; any exception a thread raised is raised here."""
    gate = threading.Barrier(threads)

    def released(i: int) -> T:
        gate.wait(timeout=30)
        return work(i)

    with ThreadPoolExecutor(threads) as pool:
        futures: list[Future[T]] = [pool.submit(released, i) for i in range(threads)]
        return [f.result(timeout=120) for f in futures]


def all_rows(engine: Engine, table: Any) -> list[dict[str, Any]]:
    def rows(conn: Connection) -> list[dict[str, Any]]:
        return [dict(r) for r in conn.execute(select(table)).mappings()]

    return db.read(engine, rows)


def test_threads_racing_claim_next_claim_each_job_exactly_once(pg_engine: Engine) -> None:
    ids = seed(pg_engine, 300)

    def claim_until_empty(i: int) -> list[Claim]:
        taken = []
        while (got := db.transact(pg_engine, claiming.claim_next, f"w{i}", clock.now(), LEASE)) is not None:
            taken.append(got)
        return taken

    claims = [c for taken in race(THREADS, claim_until_empty) for c in taken]

    assert sorted(c.job_id for c in claims) == sorted(ids), "every job claimed, none twice"
    assert len({c.worker for c in claims}) > 1, "several threads took work"
    assert {c.epoch for c in claims} == {1}
    rows = all_rows(pg_engine, jobs)
    assert {(r["state"], r["epoch"], r["attempts"]) for r in rows} == {(State.RUNNING.value, 1, 1)}
    assert Counter(r["job_id"] for r in all_rows(pg_engine, attempts)) == Counter(ids)
    assert all_rows(pg_engine, outbox_table) == [], "a claimed job's pending delivery is dropped"


def hold_locks(engine: Engine, query: Any, held: threading.Event, done: threading.Event) -> None:
    """Lock the rows `query` selects FOR UPDATE in an open transaction until `done` is set."""
    with engine.connect() as conn, conn.begin():
        conn.execute(query.with_for_update()).all()
        held.set()
        done.wait(timeout=30)


def while_locked(engine: Engine, query: Any, action: Callable[[], T]) -> T:
    """`action()` while another transaction holds the rows of `query` locked; it must not wait for them."""
    held, done = threading.Event(), threading.Event()
    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(hold_locks, engine, query, held, done)
        try:
            assert held.wait(timeout=10), "the holder took its locks"
            started = time.monotonic()
            result = action()
            assert time.monotonic() - started < 2.0, "did not wait for the locked rows"
            return result
        finally:
            done.set()
            holder.result(timeout=10)


def test_claim_next_skips_a_job_another_transaction_has_locked(pg_engine: Engine) -> None:
    first, second = seed(pg_engine, 2)

    claimed = while_locked(
        pg_engine,
        select(jobs.c.id).where(jobs.c.id == first),
        lambda: db.transact(pg_engine, claiming.claim_next, "w1", clock.now(), LEASE),
    )

    assert claimed is not None and claimed.job_id == second
    again = db.transact(pg_engine, claiming.claim_next, "w2", clock.now(), LEASE)
    assert again is not None and again.job_id == first, "once released, the skipped job is claimed"


def test_racing_accepts_with_one_key_create_one_job(pg_engine: Engine) -> None:
    # The losers' inserts wait on the winner's uncommitted key, skip it once it commits, and read its row.
    for key in range(20):

        def submit(_: int, key: int = key) -> intake.Accepted:
            return db.transact(
                pg_engine, intake.accept, tenant="acme", owner="ann", kind="noop", payload={"n": key},
                operation_key=f"key-{key}", now=clock.now(), max_attempts=3,
            )  # fmt: skip

        answers = race(THREADS, submit)

        assert len({a.job.id for a in answers}) == 1, f"key-{key}: one job for every caller"
        assert sum(a.created for a in answers) == 1, f"key-{key}: created once"
    assert len(all_rows(pg_engine, jobs)) == 20
    assert len(all_rows(pg_engine, outbox_table)) == 20, "one delivery per job"


def test_racing_accepts_with_one_key_and_different_payloads_leave_one_job_and_conflicts(
    pg_engine: Engine,
) -> None:
    for key in range(10):

        def submit(i: int, key: int = key) -> str:
            try:
                accepted = db.transact(
                    pg_engine, intake.accept, tenant="acme", owner="ann", kind="noop",
                    payload={"side": i % 2}, operation_key=f"key-{key}", now=clock.now(), max_attempts=3,
                )  # fmt: skip
            except IdempotencyConflict as exc:
                return f"conflict:{exc.job_id}:{i % 2}"
            return f"job:{accepted.job.id}:{i % 2}"

        answers = race(THREADS, submit)

        jobs_named = {a.split(":")[1] for a in answers}
        assert len(jobs_named) == 1, f"key-{key}: every answer names the one job"
        sides = {a.split(":")[2] for a in answers if a.startswith("job:")}
        assert len(sides) == 1, f"key-{key}: only the winner's payload is accepted; the other side conflicts"
    assert len(all_rows(pg_engine, jobs)) == 10


class Workload:
    """Consumers, relays, a canceller and a sweeper on one set of jobs, as separate threads with their own
    connections; leases are short, so some run out under a slow consumer and the sweeper or a reclaim
    settles them."""

    def __init__(self, engine: Engine, ids: list[str], seconds: float) -> None:
        self.engine = engine
        self.ids = ids
        self.until = time.monotonic() + seconds
        self.stop = threading.Event()
        self.fenced = Counter[str]()
        self._lock = threading.Lock()

    def going(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.until

    def consumer(self, i: int) -> None:
        rng = random.Random(i)
        while self.going():
            got = db.transact(self.engine, claiming.claim_next, f"c{i}", clock.now(), 0.3)
            if got is None:
                time.sleep(0.01)
                continue
            if rng.random() < 0.05:
                time.sleep(0.4)  # past the lease: the write below is fenced out
            try:
                self.finish(got, rng)
            except Fenced:
                with self._lock:
                    self.fenced[f"c{i}"] += 1

    def finish(self, got: Claim, rng: random.Random) -> None:
        now = clock.now()
        if rng.random() < 0.3:
            db.transact(
                self.engine, fenced.fail, got.job_id, got.epoch, got.attempt_id,
                code="flaky", message="try again", permanent=False, now=now, backoff=BACKOFF,
            )  # fmt: skip
        else:
            db.transact(self.engine, fenced.complete, got.job_id, got.epoch, got.attempt_id, {}, now)

    def relay(self, i: int) -> None:
        token = f"relay-{i}"
        while self.going():
            if not db.transact(self.engine, leader.take, token, now=clock.now(), seconds=1.0):
                time.sleep(0.05)  # another relay holds the role
                continue
            due, _ = db.read(self.engine, leader.due, token, now=clock.now(), limit=20)
            ids = [row_id for row_id, _ in due.rows]
            db.transact(self.engine, leader.mark_published, token, ids, clock.now())
            if not ids:
                time.sleep(0.01)

    def canceller(self, i: int) -> None:
        rng = random.Random(100 + i)
        while self.going():
            db.transact(self.engine, operator.request_cancel, rng.choice(self.ids), clock.now())
            time.sleep(0.02)

    def sweeper(self, _: int) -> None:
        while self.going():
            db.transact(self.engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF)
            if self.all_terminal():
                self.stop.set()
            time.sleep(0.05)

    def all_terminal(self) -> bool:
        def unfinished(conn: Connection) -> int:
            query = select(jobs.c.id).where(jobs.c.state.not_in([s.value for s in TERMINAL])).limit(1)
            return len(conn.execute(query).all())

        return db.read(self.engine, unfinished) == 0


@pytest.mark.slow
def test_a_mixed_concurrent_workload_lets_no_deadlock_or_serialization_error_escape(
    pg_engine: Engine, pg_settings: Settings
) -> None:
    ids = seed(pg_engine, 200)
    work = Workload(pg_engine, ids, seconds=60)
    roles = [work.consumer] * 4 + [work.relay] * 2 + [work.canceller, work.sweeper]

    race(len(roles), lambda i: roles[i](i))  # any error that escaped a transaction is raised here

    assert work.all_terminal(), "every job finished within the time bound"
    seen = check_invariants(pg_settings, accepted=ids, executions=range(0, 100), engine=pg_engine)
    states = seen.states()
    assert states[State.SUCCEEDED.value] > 0 and states[State.CANCELLED.value] > 0, states
    assert sum(work.fenced.values()) > 0, "some writes lost their lease and were fenced out"
    assert max(job.epoch for job in seen.jobs.values()) > 1, "some jobs were claimed again"


def _terminate_backend_of_next_connection(engine: Engine) -> None:
    """Use a pooled connection, then have the server end its session while it waits in the pool."""
    pid = db.transact(engine, lambda conn: conn.exec_driver_sql("SELECT pg_backend_pid()").scalar())
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
        wait_for(lambda: _scalar(other.execute(gone, (pid,)).fetchone()) == 0, 10, what="the session ended")


def _scalar(row: tuple[Any, ...] | None) -> Any:
    assert row is not None
    return row[0]


def _count_runs(runs: list[int]) -> Callable[[Connection], int]:
    def work(conn: Connection) -> int:
        runs.append(1)
        return int(conn.exec_driver_sql("SELECT 1").scalar_one())

    return work


_SELECT_ONE = Statement("select_one", "SELECT %(b_value)s::int")


def _count_direct_runs(runs: list[int]) -> Callable[[Connection], int]:
    def work(conn: Connection) -> int:
        runs.append(1)
        return int(drivers.of(conn).send(conn, _SELECT_ONE, {"b_value": 1})[0][0])

    return work


@pytest.mark.parametrize("counted", [_count_runs, _count_direct_runs], ids=["through SQLAlchemy", "direct"])
def test_a_connection_dropped_while_in_the_pool_is_replaced_and_the_transaction_runs_again(
    pg_engine: Engine, counted: Callable[[list[int]], Callable[[Connection], int]]
) -> None:
    """A connection in steady use is not pinged at checkout: the lost one fails the first statement, which
    committed nothing, so `transact` runs the transaction again on a new connection. `Driver.run` bypasses
    SQLAlchemy's execution layer, not its error handling: its lost connection is invalidated the same way."""
    pg_engine.pool.dispose()
    _terminate_backend_of_next_connection(pg_engine)
    runs: list[int] = []
    assert db.transact(pg_engine, counted(runs)) == 1
    assert len(runs) == 2, "the first run met the dead connection"


def test_a_connection_back_from_idle_is_pinged_and_replaced_before_use(
    pg_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgresql_driver, "PING_AFTER_IDLE_SECONDS", 0.0)
    pg_engine.pool.dispose()
    _terminate_backend_of_next_connection(pg_engine)
    runs: list[int] = []
    assert db.transact(pg_engine, _count_runs(runs)) == 1
    assert len(runs) == 1, "the ping found the dead connection before the transaction used it"


def test_a_direct_statement_raises_sqlalchemys_errors_and_its_transaction_rolls_back(
    pg_engine: Engine,
) -> None:
    (job_id,) = seed(pg_engine, 1)
    insert_twice = Statement(
        "insert_twice",
        "INSERT INTO outbox (job_id, created_at, available_at, publish_attempts) VALUES (%(b_job)s, 0, 0, 0)",
    )
    duplicate_attempt = Statement(
        "duplicate_attempt",
        "INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome)"
        " VALUES ('a', %(b_job)s, 1, 'w', 0, 'x')",
    )

    def write(conn: Connection) -> None:
        driver = drivers.of(conn)
        driver.send(conn, insert_twice, {"b_job": job_id})
        driver.send(conn, duplicate_attempt, {"b_job": job_id})
        driver.send(conn, duplicate_attempt, {"b_job": job_id})

    before = len(all_rows(pg_engine, outbox_table))
    with pytest.raises(IntegrityError):
        db.transact(pg_engine, write)
    assert len(all_rows(pg_engine, outbox_table)) == before, "the first insert was rolled back with the rest"
    assert not all_rows(pg_engine, attempts)


_STARTED_WITH_THE_STATEMENT = text("SELECT now() = statement_timestamp()")


def test_transact_one_commits_its_statement_by_itself(pg_engine: Engine) -> None:
    """One round trip: no BEGIN went ahead of the statement, so its transaction began with it."""
    assert db.transact_one(pg_engine, lambda conn: conn.execute(_STARTED_WITH_THE_STATEMENT).scalar()) is True
    assert db.transact(pg_engine, lambda conn: conn.execute(_STARTED_WITH_THE_STATEMENT).scalar()) is False
    assert db.transact_one(pg_engine, lambda conn: conn.execute(_STARTED_WITH_THE_STATEMENT).scalar()) is True


def test_transact_one_refuses_a_second_statement_before_it_is_sent(pg_engine: Engine) -> None:
    (job_id,) = seed(pg_engine, 1)
    cancel = text("UPDATE jobs SET cancel_requested = true WHERE id = :b_job")

    def two(conn: Connection) -> None:
        conn.execute(text("SELECT 1"))
        conn.execute(cancel, {"b_job": job_id})

    with pytest.raises(db.SecondStatement):
        db.transact_one(pg_engine, two)
    (row,) = [r for r in all_rows(pg_engine, jobs) if r["id"] == job_id]
    assert row["cancel_requested"] is False, "the second statement never ran"
    # The connection it ran on goes back to the pool in its usual mode: this transaction is atomic again.
    assert db.transact(pg_engine, lambda conn: conn.execute(_STARTED_WITH_THE_STATEMENT).scalar()) is False


def test_transact_one_does_not_run_a_statement_again_that_may_have_committed(pg_engine: Engine) -> None:
    pg_engine.pool.dispose()
    _terminate_backend_of_next_connection(pg_engine)
    runs: list[int] = []
    with pytest.raises(db.StoreUnavailable, match="may have committed"):
        db.transact_one(pg_engine, _count_direct_runs(runs))
    assert len(runs) == 1
    assert db.transact_one(pg_engine, _count_direct_runs(runs)) == 1, "the next one gets a new connection"


def test_an_accept_with_a_value_too_long_for_its_column_is_refused_and_writes_nothing(
    pg_engine: Engine,
) -> None:
    """The accept sends its rows as arrays; a value longer than its column is an error, not cut short."""
    base = {"owner": "o", "kind": "noop", "payload": {}, "max_attempts": 3, "now": clock.now()}
    fine = base | {"tenant": "t", "operation_key": "fine"}
    too_long = base | {"tenant": "t" * 256, "operation_key": "long"}
    with pytest.raises(DataError, match="too long"):
        db.transact(pg_engine, intake.accept_prepared, [intake.prepare(**fine), intake.prepare(**too_long)])
    assert all_rows(pg_engine, jobs) == []
    assert all_rows(pg_engine, outbox_table) == []
