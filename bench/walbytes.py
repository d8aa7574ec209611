"""How much each step of a job's life writes to SQLite's WAL, per transaction of `--batch` jobs: the accept
(job and outbox rows), the relay's mark of the published rows (its read of the due rows writes nothing),
the consumer's claim and its completion. Every page a transaction changes is written whole to the WAL and
fsynced at its commit (at `synchronous=FULL`), and later copied into the database by a checkpoint, so
these bytes are what the write slot's commits cost beyond their statements. The steps run one after another
in one process, over a store that already holds `--history` finished jobs (a store's indexes are deeper and
wider after days of work). With `--endpoints N`, the jobs' tenant has N completion webhook endpoints, and
each job's completion also writes N deliveries.

    python -m outbox_bridge.bench.walbytes /tmp/walbytes.db --history 16000 --rounds 200

The file is replaced."""

from __future__ import annotations

import argparse
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

from outbox_bridge.core import clock
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, intake, leader, migrate, webhooks
from outbox_bridge.jobstore.webhooks import Endpoint

STEPS = ("accept", "mark", "claim", "complete")
WORKER = "walbytes"
TENANT = "t"
ROLE = "walbytes"  # the relay role's token, held for the whole measure
LEASE_SECONDS = 30.0


def measure(path: Path, *, history: int, rounds: int, batch: int, endpoints: int = 0) -> dict[str, float]:
    """The WAL bytes each step writes per transaction of `batch` jobs, averaged over `rounds` rounds,
    after `history` jobs were taken through their whole life the same way. With `endpoints` webhook
    endpoints of the jobs' tenant, each finished job also writes that many deliveries (the store's trigger
    does, in the completing transaction)."""
    settings, engine = scratch_store(path, Settings(sqlite_synchronous="FULL"))
    for n in range(endpoints):
        add_endpoint(engine, settings, f"http://127.0.0.1:9/{n}")
    for _ in range(history // batch):
        life(engine, batch)
    engine.dispose()
    # A checkpoint copies the WAL back and starts it again from its beginning: none may run while counting.
    event.listen(engine, "connect", no_checkpoints)
    wal = restart_wal(path)
    written: Counter[str] = Counter()
    for _ in range(rounds):
        life(engine, batch, written, lambda: wal.stat().st_size if wal.exists() else 0)
    engine.dispose()
    return {step: written[step] / rounds for step in STEPS}


def scratch_store(path: Path, settings: Settings) -> tuple[Settings, Engine]:
    """A new store in the SQLite file `path` (replaced), with `settings` otherwise; this process holds its
    relay role."""
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)
    settings = settings.model_copy(update={"database_url": f"sqlite:///{path}"})
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    assert db.transact(engine, leader.take, ROLE, now=clock.now(), seconds=10 * 365 * 86400.0)
    return settings, engine


def add_endpoint(engine: Engine, settings: Settings, url: str) -> Endpoint:
    """A webhook endpoint of the tenant `life` gives its jobs, for every event."""
    endpoint, _ = db.transact(
        engine,
        webhooks.add_endpoint,
        Sealer.of(settings.auth_secret),
        tenant=TENANT,
        url=url,
        events=(),
        now=clock.now(),
        actor=WORKER,
    )
    return endpoint


def restart_wal(path: Path) -> Path:
    """Copy the WAL of the store at `path` back into it and empty it; the WAL file's path."""
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Path(f"{path}-wal")


def no_checkpoints(dbapi_connection: Any, _record: Any) -> None:
    """A `connect` listener: the connection never checkpoints by itself."""
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")


def life(
    engine: Engine, batch: int, written: Counter[str] | None = None, size: Callable[[], int] = lambda: 0
) -> None:
    """Take `batch` noop jobs of `TENANT` from accept to success, a transaction per step, adding each
    step's WAL growth (`size` before and after) to `written`."""
    grown = Counter[str]() if written is None else written

    def step(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        before = size()
        result = db.transact(engine, fn, *args)
        grown[name] += size() - before
        return result

    requests = [
        intake.prepare(tenant=TENANT, owner="o", kind="noop", payload={}, operation_key=str(uuid.uuid4()),
                       now=clock.now(), max_attempts=3)
        for _ in range(batch)
    ]  # fmt: skip
    accepted = step("accept", intake.accept_prepared, requests)
    due, _ = db.read(engine, leader.due, ROLE, now=clock.now(), limit=batch)
    step("mark", leader.mark_published, ROLE, [row_id for row_id, _ in due.rows], clock.now())
    claimed = step(
        "claim", claiming.claim_many, [a.job.id for a in accepted], WORKER, clock.now(), LEASE_SECONDS
    )
    completions = [
        fenced.Completion(c.claim.job_id, c.claim.epoch, c.claim.attempt_id, {"ok": True})
        for c in claimed
        if c.claim is not None
    ]
    step("complete", fenced.complete_many, completions, clock.now())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="a scratch SQLite file (replaced)")
    parser.add_argument("--history", type=int, default=16_000, help="jobs taken through first")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16, help="jobs per transaction")
    parser.add_argument("--endpoints", type=int, default=0, help="webhook endpoints of the jobs' tenant")
    args = parser.parse_args()
    found = measure(
        args.path, history=args.history, rounds=args.rounds, batch=args.batch, endpoints=args.endpoints
    )
    print("  ".join(f"{step} {size / 1024:.1f}" for step, size in found.items()), f"KiB per {args.batch}-job")
    print(f"all steps: {sum(found.values()) / 1024 / args.batch:.1f} KiB per job")


if __name__ == "__main__":
    main()
