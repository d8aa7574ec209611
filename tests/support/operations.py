"""What each of the store's operations sends, recorded as the database receives it.

The store's interface is its operations: accept a batch (`intake`), claim by ids and claim due (`claiming`),
complete and fail a round's attempts (`fenced`, through `worker.commit`), renew a lease and release a job
(`fenced`), take the leader role, read due outbox rows and mark them published (`leader`), sweep expired
leases and re-announce (`sweeper`), prune (`retention`), cancel, requeue and resolve (`operator`). `record`
runs one typical call of each on an empty store and notes every statement it sends, through SQLAlchemy or
below it (`db.statements_seen`): the plan tests explain each one
(`tests/integration/test_query_plans.py`), and `tests/integration/test_store_operations_sql.py` checks that
each operation sends what it is for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, update

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.jobstore import claiming, db, fenced, intake, leader, operator, retention, sweeper
from outbox_bridge.jobstore.schema import jobs
from outbox_bridge.jobstore.states import State

# Fixed times and names, so that two recordings of the same code are the same text.
T0 = 1_800_000_000.0
LEASE = 30.0
WORKER = "worker-1"
RELAY = "relay-1"
BACKOFF = Backoff(1.0, 60.0)


@dataclass
class Operation:
    """One operation's call and the statements it sent, in order."""

    name: str
    call: str
    sent: list[db.Sent] = field(default_factory=list)


@dataclass
class _Scene:
    """The jobs the recording moves from operation to operation."""

    engine: Engine
    operations: list[Operation] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)

    def run(self, name: str, call: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with db.statements_seen(self.engine) as seen:
            result = fn(self.engine, *args, **kwargs)
        self.operations.append(Operation(name, call, list(seen)))
        return result


def _prepared(key: str, now: float) -> intake.Prepared:
    return intake.prepare(
        tenant="acme",
        owner="alice",
        kind="noop",
        payload={"n": key},
        operation_key=key,
        now=now,
        max_attempts=3,
    )


def _claim(conn: Connection, job_ids: list[str], now: float) -> list[claiming.ClaimResult]:
    return claiming.claim_many(conn, job_ids, WORKER, now, LEASE)


def _expire(conn: Connection, job_id: str) -> None:
    """Set up, not recorded: the job's lease ran out."""
    conn.execute(update(jobs).where(jobs.c.id == job_id).values(lease_expires_at=T0))


def record(engine: Engine) -> list[Operation]:
    """Run one typical call of each operation, in an order that gives each its usual case, on `engine`'s
    store (migrated and empty), noting what each sends."""
    scene = _Scene(engine)
    now = T0

    accepted = scene.run(
        "accept a batch",
        "intake.accept_committed",
        intake.accept_committed,
        lambda: [_prepared(key, now) for key in ("a", "b", "c", "d", "e")],
    )
    a, b, c, d, e = (outcome.job.id for outcome in accepted)

    token = leader.me()
    scene.run("take the relay role", "leader.take", db.transact, leader.take, token, now=now, seconds=LEASE)
    lease, _ = scene.run("read due outbox rows", "leader.read", leader.read, token, now=now, limit=100)
    assert lease is not None
    published = [outbox_id for outbox_id, _job_id in lease.rows]
    scene.run(
        "mark published",
        "leader.mark_published",
        db.transact,
        leader.mark_published,
        token,
        published,
        now,
    )

    claims = scene.run("claim by ids", "claiming.claim_many", db.transact, _claim, [a, b, c], now)
    held = {result.claim.job_id: result.claim for result in claims if result.claim is not None}
    due = scene.run("claim due", "claiming.claim_due", db.transact, claiming.claim_due, WORKER, now, LEASE, 1)
    scene.run(
        "renew a lease",
        "fenced.renew_lease",
        db.transact,
        fenced.renew_lease,
        a,
        held[a].epoch,
        now + 1,
        LEASE,
    )
    done = [fenced.Completion(a, held[a].epoch, held[a].attempt_id, {"ok": True})]
    scene.run("complete a round", "fenced.complete_many", db.transact, fenced.complete_many, done, now + 2)
    scene.run(
        "fail an attempt",
        "fenced.fail",
        db.transact,
        lambda conn: fenced.fail(
            conn, b, held[b].epoch, held[b].attempt_id, code="boom", message="it broke", permanent=True,
            now=now + 2, backoff=BACKOFF,
        ),
    )  # fmt: skip
    scene.run(
        "release a job",
        "fenced.release",
        db.transact,
        fenced.release,
        c,
        held[c].epoch,
        held[c].attempt_id,
        now + 2,
    )
    [taken] = due
    db.transact(engine, _expire, taken.job_id)
    scene.run(
        "sweep expired leases",
        "sweeper.sweep_expired",
        db.transact,
        sweeper.sweep_expired,
        now + LEASE + 1,
        backoff=BACKOFF,
    )
    scene.run(
        "re-announce queued jobs",
        "sweeper.reannounce_stale",
        db.transact,
        sweeper.reannounce_stale,
        now + 600,
        older_than=60.0,
    )
    scene.run(
        "cancel", "operator.cancel", db.transact, operator.cancel, e, now + 3, actor="operator@example.com"
    )
    scene.run(
        "requeue", "operator.requeue", db.transact, operator.requeue, b, now + 4, actor="operator@example.com"
    )
    db.transact(engine, _unknown, d)
    scene.run(
        "resolve",
        "operator.resolve",
        db.transact,
        operator.resolve,
        d,
        State.SUCCEEDED,
        "checked by hand",
        now + 5,
        actor="operator@example.com",
    )
    scene.run("prune", "retention.prune", db.transact, retention.prune, now + 86_400)
    return scene.operations


def _unknown(conn: Connection, job_id: str) -> None:
    """Set up, not recorded: the job's outcome is unknown (a lease ran out after its effect started)."""
    conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id)
        .values(state=State.UNKNOWN.value, lease_owner=None, finished_at=T0)
    )
