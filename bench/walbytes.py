"""How much each step of a job's life writes to SQLite's WAL, per transaction of `--batch` jobs: the accept
(job and outbox rows), the relay's mark of the published rows (its read of the due rows writes nothing),
the consumer's claim and its completion. Every page a transaction changes is written whole to the WAL and
fsynced at its commit (at `synchronous=FULL`), and later copied into the database by a checkpoint, so
these bytes are what the write slot's commits cost beyond their statements. The steps run one after another
in one process, over a store that already holds `--history` finished jobs (a store's indexes are deeper and
wider after days of work).

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
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, intake, migrate, relayrole

STEPS = ("accept", "mark", "claim", "complete")
WORKER = "walbytes"
ROLE = "walbytes"  # the relay role's token, held for the whole measure
LEASE_SECONDS = 30.0


def measure(path: Path, *, history: int, rounds: int, batch: int) -> dict[str, float]:
    """The WAL bytes each step writes per transaction of `batch` jobs, averaged over `rounds` rounds,
    after `history` jobs were taken through their whole life the same way."""
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)
    settings = Settings(database_url=f"sqlite:///{path}", sqlite_synchronous="FULL")
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    assert db.transact(engine, relayrole.take, ROLE, now=clock.now(), seconds=10 * 365 * 86400.0)
    for _ in range(history // batch):
        _life(engine, batch, Counter(), lambda: 0)
    engine.dispose()
    # A checkpoint copies the WAL back and starts it again from its beginning: none may run while counting.
    engine = db.make_engine(settings)
    event.listen(engine, "connect", _no_checkpoints)
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = Path(f"{path}-wal")
    written: Counter[str] = Counter()
    for _ in range(rounds):
        _life(engine, batch, written, lambda: wal.stat().st_size if wal.exists() else 0)
    engine.dispose()
    return {step: written[step] / rounds for step in STEPS}


def _no_checkpoints(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")


def _life(engine: Engine, batch: int, written: Counter[str], size: Callable[[], int]) -> None:
    """Take `batch` noop jobs from accept to success, a transaction per step, adding each step's WAL
    growth to `written`."""

    def step(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        before = size()
        result = db.transact(engine, fn, *args)
        written[name] += size() - before
        return result

    requests = [
        intake.prepare(tenant="t", owner="o", kind="noop", payload={}, operation_key=str(uuid.uuid4()),
                       now=clock.now(), max_attempts=3)
        for _ in range(batch)
    ]  # fmt: skip
    accepted = step("accept", intake.accept_prepared, requests)
    due, _ = db.read(engine, relayrole.due, ROLE, now=clock.now(), limit=batch)
    step("mark", relayrole.mark_published, ROLE, [row_id for row_id, _ in due.rows], clock.now())
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
    args = parser.parse_args()
    found = measure(args.path, history=args.history, rounds=args.rounds, batch=args.batch)
    print("  ".join(f"{step} {size / 1024:.1f}" for step, size in found.items()), f"KiB per {args.batch}-job")
    print(f"all steps: {sum(found.values()) / 1024 / args.batch:.1f} KiB per job")


if __name__ == "__main__":
    main()
