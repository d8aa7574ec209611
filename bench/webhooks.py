"""What a completion webhook delivery costs. Measured in the benchmark's own process, on scratch SQLite
stores beside the deployment's (nothing of the deployment's store or processes takes part):

- sending: the relay's sender (`relay.webhook_sender.WebhookSender`, with the deployment's settings) drains
  deliveries written beforehand, as finished jobs write them, to a receiver on 127.0.0.1 that answers 204
  from a process of its own (`bench.receiver`). There are as many endpoints as it takes for every sender
  thread to have work (`WEBHOOK_SENDERS` / `WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT`). The figures: deliveries
  per second, from the sender's start until none is pending, and per delivery the sender's store work (its
  write and read transactions, statements, and the bytes its writes add to the WAL) and its CPU time.
- job writes: what one matching endpoint adds to the transaction that completes a job, in WAL bytes per job
  (`bench.walbytes`, with one endpoint of the jobs' tenant and with none). The store's trigger writes the
  delivery within the completing statement: it adds no statement and no transaction.

    python -m outbox_bridge.bench.webhooks /tmp/webhook-costs --deliveries 2000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, func, select

from outbox_bridge.bench import walbytes
from outbox_bridge.bench.observe import PhaseTimeout
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import webhook_attempts, webhook_deliveries
from outbox_bridge.jobstore.webhooks import DeliveryState
from outbox_bridge.relay.webhook_sender import WebhookSender

if TYPE_CHECKING:
    from outbox_bridge.bench.phases import Run

JOBS_PER_TRANSACTION = 50  # while the deliveries to send are written
WAL_HISTORY, WAL_ROUNDS, WAL_BATCH = 160, 10, 16  # the job writes' measure (`walbytes.measure`)
POLL_SECONDS = 0.01
COUNTED = ("write_transactions", "read_transactions", "statements")


def deliveries(run: Run) -> dict[str, Any]:
    """The benchmark's phase: `measure` in the deployment's directory, with its settings."""
    settings = run.deployment.settings
    return measure(run.deployment.workdir, settings, run.options.webhook_deliveries, run.stop)


def measure(
    directory: Path, settings: Settings, count: int, stop: threading.Event | None = None
) -> dict[str, Any]:
    """The sending figures for `count` deliveries, and the job writes', on scratch stores in `directory`
    (removed afterwards)."""
    try:
        return {
            "sending": sending(directory / "webhooks-sending.db", settings, count, stop or threading.Event()),
            "job_writes": job_writes(directory),
        }
    finally:
        for scratch in directory.glob("webhooks-*.db*"):
            scratch.unlink(missing_ok=True)


def sending(path: Path, settings: Settings, count: int, stop: threading.Event) -> dict[str, Any]:
    """At least `count` deliveries written, then sent by the relay's sender to a local receiver (see the
    module's docstring)."""
    # The receiver is on 127.0.0.1, as in a private deployment.
    settings, engine = walbytes.scratch_store(
        path, settings.model_copy(update={"webhook_allow_private": True})
    )
    bound = settings.webhook_max_in_flight_per_endpoint
    endpoints = max(1, -(-settings.webhook_senders // bound))
    jobs = -(-count // endpoints)
    try:
        with receiver() as url:
            for n in range(endpoints):
                walbytes.add_endpoint(engine, settings, f"{url}/hook/{n}")
            for done in range(0, jobs, JOBS_PER_TRANSACTION):
                walbytes.life(engine, min(JOBS_PER_TRANSACTION, jobs - done))
            engine.dispose()
            # The bytes the sender's writes add to the WAL: no checkpoint may empty it meanwhile.
            event.listen(engine, "connect", walbytes.no_checkpoints)
            wal = walbytes.restart_wal(path)
            found = _drained(settings, engine, wal, jobs * endpoints, stop)
    finally:
        engine.dispose()
    how = "the relay's sender in the benchmark's process, a receiver answering 204 on 127.0.0.1"
    return {"how": how, "endpoints": endpoints, "senders": settings.webhook_senders} | found


def _drained(
    settings: Settings, engine: Engine, wal: Path, expected: int, stop: threading.Event
) -> dict[str, Any]:
    watch = create_engine(settings.database_url)  # a plain engine: its reads are not counted as the sender's
    sender = WebhookSender(settings, engine, lambda: True)
    before = _spent(wal)
    started = time.monotonic()
    sender.start()
    try:
        _wait_sent(watch, expected, stop, timeout=60.0 + expected / 50.0)
        seconds = time.monotonic() - started
    finally:
        sender.stop()
    spent = {name: value - before[name] for name, value in _spent(wal).items()}
    delivered, attempts = _outcomes(watch)
    watch.dispose()
    return {
        "deliveries": delivered,
        "attempts": attempts,
        "seconds": round(seconds, 3),
        "deliveries_per_second": round(delivered / seconds, 1),
        "per_delivery": {name: round(value / max(delivered, 1), 3) for name, value in spent.items()},
    }


def _spent(wal: Path) -> dict[str, float]:
    """This process's store counters and CPU seconds, and the size of the WAL, so far."""
    counters = db.stats.snapshot()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {name: float(counters[name]) for name in COUNTED} | {
        "wal_bytes": float(wal.stat().st_size if wal.exists() else 0),
        "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000.0,
    }


def _wait_sent(watch: Engine, expected: int, stop: threading.Event, timeout: float) -> None:
    """Until no delivery is pending; `PhaseTimeout` past `timeout` seconds."""
    pending = select(func.count()).where(webhook_deliveries.c.state == DeliveryState.PENDING.value)
    deadline = time.monotonic() + timeout
    while True:
        with watch.connect() as conn:
            left = int(conn.execute(pending).scalar_one())
        if not left:
            return
        if time.monotonic() >= deadline:
            raise PhaseTimeout(f"webhooks: {expected - left} of {expected} deliveries sent in {timeout:.0f}s")
        if stop.wait(POLL_SECONDS):
            raise KeyboardInterrupt


def _outcomes(watch: Engine) -> tuple[int, int]:
    """How many deliveries were delivered, and how many attempts were made."""
    delivered = select(func.count()).where(webhook_deliveries.c.state == DeliveryState.DELIVERED.value)
    with watch.connect() as conn:
        made = conn.execute(select(func.count()).select_from(webhook_attempts)).scalar_one()
        return int(conn.execute(delivered).scalar_one()), int(made)


@contextlib.contextmanager
def receiver() -> Iterator[str]:
    """`bench.receiver` started for the block; its base URL."""
    command = [sys.executable, "-m", "outbox_bridge.bench.receiver"]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            port = proc.stdout.readline().strip()
            if not port.isdigit():
                raise RuntimeError(f"the webhook receiver did not start (exit code {proc.poll()})")
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()


def job_writes(directory: Path) -> dict[str, Any]:
    """The WAL bytes per job of the transaction that completes jobs of a tenant with one webhook endpoint,
    and with none (see the module's docstring)."""
    complete = {}
    for endpoints in (0, 1):
        path = directory / f"webhooks-wal-{endpoints}.db"
        found = walbytes.measure(
            path, history=WAL_HISTORY, rounds=WAL_ROUNDS, batch=WAL_BATCH, endpoints=endpoints
        )
        complete[endpoints] = found["complete"] / WAL_BATCH
    return {
        "how": f"WAL growth of the completing transaction, {WAL_BATCH} jobs a transaction (bench.walbytes)",
        "complete_wal_bytes_per_job": {"no_endpoint": complete[0], "one_endpoint": complete[1]},
        "wal_bytes_added_per_job": complete[1] - complete[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="where the scratch stores go (removed afterwards)")
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    args = parser.parse_args()
    args.directory.mkdir(parents=True, exist_ok=True)
    settings = Settings(sqlite_synchronous=args.synchronous)
    print(json.dumps(measure(args.directory, settings, args.deliveries), indent=1))


if __name__ == "__main__":
    main()
