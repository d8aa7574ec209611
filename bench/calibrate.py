"""How fast this machine commits to SQLite right now: single-row commits per second in one connection
(WAL, `BEGIN IMMEDIATE`, the deployment's `synchronous`), on a scratch file beside the store.

Every write transaction of the job system waits for the same commit path, so this ceiling explains most
of the spread between runs on a shared machine (fsync latency swings with other work on the disk)."""

from __future__ import annotations

import sqlite3
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from outbox_bridge.broker.connection import broker_addresses, connect_first

SECONDS = 2.0


def single_row_commits(directory: Path, synchronous: str, seconds: float = SECONDS) -> dict[str, Any]:
    path = directory / f"calibrate-{synchronous.lower()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
        commits, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES ('x')")
            conn.execute("COMMIT")
            commits += 1
    finally:
        conn.close()
        for leftover in directory.glob(f"{path.name}*"):
            leftover.unlink(missing_ok=True)
    return {
        "how": "one connection, WAL, BEGIN IMMEDIATE + one-row INSERT + COMMIT in a loop",
        "synchronous": synchronous,
        "seconds": round(elapsed, 2),
        "commits_per_second": round(commits / elapsed, 1),
    }


# As far apart as the light load's jobs (20 a second): every process on the way wakes from idle.
HOP_ROUNDS = 60
HOP_GAP_SECONDS = 0.05


def quorum_hop(url: str, rounds: int = HOP_ROUNDS, gap: float = HOP_GAP_SECONDS) -> dict[str, Any]:
    """How long RabbitMQ takes to hand a message on right now: a persistent message published with
    confirms to a quorum queue of its own (the kind the job queue is) until a consumer on a second
    connection has it, `rounds` times, `gap` seconds apart. The broker path's floor between the relay's
    publish and a consumer's claim: the quorum queue delivers a message once a majority of its members
    has written it to its log (a single node: its own write). A broker that cannot be reached gives an
    `error` instead of the figures."""
    try:
        return _quorum_hop(url, rounds, gap)
    except (pika.exceptions.AMQPError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _quorum_hop(url: str, rounds: int, gap: float) -> dict[str, Any]:
    queue = f"outbox-bridge.calibration.{uuid.uuid4().hex[:8]}"
    publisher = connect_first(broker_addresses(url, name="bench calibration"))[0]
    hops: list[float] = []
    try:
        channel = publisher.channel()
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        channel.confirm_delivery()
        ready, done = threading.Event(), threading.Event()
        reader = threading.Thread(
            target=_take_hops,
            args=(url, queue, rounds, hops, ready, done, 10.0 + 2 * rounds * gap),
            name="hop-reader",
            daemon=True,
        )
        reader.start()
        ready.wait(10.0)
        for _ in range(rounds):
            time.sleep(gap)
            sent = repr(time.perf_counter()).encode()
            channel.basic_publish("", queue, sent, pika.BasicProperties(delivery_mode=2))
        done.wait(20.0 + 2 * rounds * gap)
        channel.queue_delete(queue)
    finally:
        publisher.close()
    hops.sort()
    return {
        "how": f"quorum queue, persistent, publisher confirms; {rounds} messages {gap * 1000:.0f} ms apart",
        "messages": len(hops),
        "publish_to_delivery_ms": {
            "p50": round(statistics.median(hops) * 1000, 3) if hops else None,
            "p99": round(hops[max(0, int(len(hops) * 0.99) - 1)] * 1000, 3) if hops else None,
        },
    }


def _take_hops(
    url: str,
    queue: str,
    rounds: int,
    hops: list[float],
    ready: threading.Event,
    done: threading.Event,
    within: float,
) -> None:
    """Consume `rounds` messages of `queue` on a connection of its own, noting each one's time on the way."""
    connection = None
    try:
        connection = connect_first(broker_addresses(url, name="bench calibration"))[0]
        channel = connection.channel()
        channel.basic_qos(prefetch_count=10)

        def take(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
            hops.append(time.perf_counter() - float(body))
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume(queue, take)
        ready.set()
        deadline = time.monotonic() + within
        while len(hops) < rounds and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
    finally:
        done.set()
        if connection is not None and connection.is_open:
            connection.close()
