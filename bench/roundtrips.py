"""The store's hot transactions timed one by one, in one process: what each costs a writer, apart from the
rest of a deployment. Each round accepts one job, reads it as the holder of the relay role does and marks it
published (what a relay runs, through `jobstore.leader`), and reads again from an empty outbox; `--gap`
sleeps before each round, as a light load leaves every process idle between jobs.

    python -m outbox_bridge.bench.roundtrips \
        postgresql+psycopg://postgres@127.0.0.1:5432/EMPTY_DB --rounds 400
    python -m outbox_bridge.bench.roundtrips postgresql+psycopg://... --rounds 150 --gap 0.05

The database must be empty or new: its schema is migrated first."""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, leader, migrate

STEPS = ("accept", "read", "mark", "read_empty")


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, (time.perf_counter() - started) * 1000


def measure(settings: Settings, rounds: int, gap: float) -> dict[str, float]:
    """The median milliseconds of each step over `rounds` rounds, on `settings`' store."""
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    request = {"tenant": "t", "owner": "o", "kind": "noop", "payload": {}, "max_attempts": 3}
    token = str(uuid.uuid4())
    held = db.transact(engine, leader.take, token, now=clock.now(), seconds=max(60.0, rounds * (gap + 0.1)))
    assert held, "another relay holds the relay role on this store"
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    for _ in range(rounds):
        time.sleep(gap)
        fields = request | {"operation_key": str(uuid.uuid4()), "now": clock.now()}
        _, took = _timed(
            intake.accept_committed, engine, lambda f=fields: [intake.prepare(**f)]
        )  # as the api
        times["accept"].append(took)
        (lease, _), took = _timed(leader.read, engine, token, now=clock.now(), limit=10)
        times["read"].append(took)
        ids = [row_id for row_id, _ in lease.rows] if lease is not None else []
        # As the relay writes a group of confirms back (`relay.ledger.write_results`).
        _, took = _timed(db.transact_one, engine, leader.mark_published, token, ids, clock.now())
        times["mark"].append(took)
        _, took = _timed(leader.read, engine, token, now=clock.now(), limit=10)
        times["read_empty"].append(took)
    db.transact(engine, leader.give_up, token)
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
