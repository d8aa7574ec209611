"""The store's hot transactions timed one by one, in one process: what each costs a writer, apart from the
rest of a deployment. Each round accepts one job, leases it and marks it published (the statements a
relay's transactions run), and leases again from an empty outbox; `--gap` sleeps before each round, as a
light load leaves every process idle between jobs.

    python -m bench.roundtrips postgresql+psycopg://postgres@127.0.0.1:5432/EMPTY_DB --rounds 400
    python -m bench.roundtrips postgresql+psycopg://... --rounds 150 --gap 0.05

The database must be empty or new: its schema is migrated first."""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from core import clock
from core.settings import Settings
from jobstore import db, intake, migrate, outbox

STEPS = ("accept", "lease", "mark", "lease_empty")


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, (time.perf_counter() - started) * 1000


def _lease(settings: Settings) -> dict[str, Any]:
    """A relay's lease of up to 10 rows, as its `relay.ledger` asks for one."""
    return {"now": clock.now(), "limit": 10, "lease_seconds": settings.relay_lease_seconds}


def measure(settings: Settings, rounds: int, gap: float) -> dict[str, float]:
    """The median milliseconds of each step over `rounds` rounds, on `settings`' store."""
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    request = {"tenant": "t", "owner": "o", "kind": "noop", "payload": {}, "max_attempts": 3}
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    for _ in range(rounds):
        time.sleep(gap)
        fields = request | {"operation_key": str(uuid.uuid4()), "now": clock.now()}
        _, took = _timed(db.transact, engine, intake.accept_many, [fields])
        times["accept"].append(took)
        (lease, _), took = _timed(db.transact, engine, outbox.lease_due, **_lease(settings))
        times["lease"].append(took)
        ids = [row_id for row_id, _ in lease.rows]
        _, took = _timed(db.transact, engine, outbox.mark_published, lease.token, ids, clock.now())
        times["mark"].append(took)
        _, took = _timed(db.transact, engine, outbox.lease_due, **_lease(settings))
        times["lease_empty"].append(took)
    engine.dispose()
    return {step: statistics.median(values) for step, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds of sleep before each round")
    args = parser.parse_args()
    medians = measure(Settings(database_url=args.database_url), args.rounds, args.gap)
    print("  ".join(f"{step} {ms:.3f}" for step, ms in medians.items()), "ms p50")


if __name__ == "__main__":
    main()
