"""How fast this machine's parts are right now, measured beside each deployment's run.

- `single_row_commits`: single-row commits per second to SQLite in one connection (WAL, `BEGIN
  IMMEDIATE`, the deployment's `synchronous`), on a scratch file beside the store. Every write transaction
  of the job system waits for the same commit path, so this ceiling explains most of the spread between
  runs on a shared machine (fsync latency swings with other work on the disk).
- `quorum_hop`: how long RabbitMQ takes to hand one message on at a light load.
- `broker_floor`: what RabbitMQ alone costs a job, used as the broker path uses it, with no store at all:
  messages a second and the machine's CPU per message. The broker path's CPU per job less this is what
  the relay's and the consumers' own work and the store cost."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import queue as queue_module
import sqlite3
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from outbox_bridge.bench import machine
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


# The floor's defaults: enough messages for a second or more of work on two cores; as many unconfirmed
# publishes, as large a prefetch and as many deliveries per multiple ack as the relay and the consumers use
# at most (`relay.window`, the consumers' prefetch, a round's acks).
FLOOR_MESSAGES = 10_000
FLOOR_WINDOW = 500
FLOOR_PREFETCH = 200
FLOOR_ACK_EVERY = 50
FLOOR_WAIT_SECONDS = 60.0


def broker_floor(url: str, messages: int = FLOOR_MESSAGES) -> dict[str, Any]:
    """RabbitMQ alone, as the broker path uses it: `messages` persistent messages, each a job's body, to a
    quorum queue of their own, published with `mandatory` under publisher confirms (at most `FLOOR_WINDOW`
    unconfirmed) by one process and consumed with acks (a prefetch of `FLOOR_PREFETCH`, one multiple ack
    every `FLOOR_ACK_EVERY`) by another, both at once. Gives messages a second from the first publish to
    the last delivery, and the CPU per message of the whole machine, of RabbitMQ, and of each of the two
    client processes. A broker that cannot be reached gives an `error` instead of the figures."""
    queue = f"outbox-bridge.floor.{uuid.uuid4().hex[:8]}"
    try:
        connection = connect_first(broker_addresses(url, name="bench floor"))[0]
    except (pika.exceptions.AMQPError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        connection.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        return _floor(url, queue, messages)
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            connection.channel().queue_delete(queue)
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            connection.close()


def _floor(url: str, queue: str, messages: int) -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")  # the caller's threads stay out of the children
    go, reports = spawn.Event(), spawn.Queue()
    children = [
        spawn.Process(target=role, args=(url, queue, messages, go, reports), name=role.__name__, daemon=True)
        for role in (_floor_publisher, _floor_consumer)
    ]
    for child in children:
        child.start()
    try:
        ready = [reports.get(timeout=FLOOR_WAIT_SECONDS) for _ in children]
        if any(kind != "ready" for kind, *_ in ready):
            return {"error": next(detail for kind, _, detail in ready if kind != "ready")}
        before, started = machine.read(), time.perf_counter()
        go.set()
        done = _reports(reports, len(children))
        elapsed, after = time.perf_counter() - started, machine.read()
    except (OSError, ValueError, queue_module.Empty) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        for child in children:
            child.join(5.0)
            if child.is_alive():
                child.kill()
    delivered, consumer_cpu = done.get("consumer", (0, 0.0))
    _, publisher_cpu = done.get("publisher", (0, 0.0))
    spent: dict[str, Any] = (machine.spent(before, after, delivered) if delivered else None) or {}
    per_thousand: dict[str, float] = spent.get("cpu_seconds_per_1000_jobs", {})
    return {
        "how": (
            f"{messages} persistent messages, one quorum queue, mandatory publishes under confirms (at most"
            f" {FLOOR_WINDOW} unconfirmed) from one process, consumed with a prefetch of {FLOOR_PREFETCH}"
            f" and a multiple ack every {FLOOR_ACK_EVERY} by another"
        ),
        "messages": delivered,
        "messages_per_second": round(delivered / elapsed, 1) if delivered else None,
        "cpu_ms_per_message": {
            "machine": per_thousand.get("all"),
            "rabbitmq": per_thousand.get("rabbitmq"),
            "publisher": round(publisher_cpu * 1000 / delivered, 3) if delivered else None,
            "consumer": round(consumer_cpu * 1000 / delivered, 3) if delivered else None,
        },
        "busy_percent": spent.get("busy_percent"),
    }


def _reports(reports: Any, count: int) -> dict[str, tuple[int, float]]:
    """Each child's final report by its role: (messages, CPU seconds). An error report (or none in time)
    raises `ValueError`."""
    found = {}
    for _ in range(count):
        kind, role, detail = reports.get(timeout=FLOOR_WAIT_SECONDS)
        if kind != "done":
            raise ValueError(f"the floor's {role}: {detail}")
        found[role] = detail
    return found


def _floor_publisher(url: str, queue: str, messages: int, go: Any, reports: Any) -> None:
    """Publish `messages` job bodies under confirms, at most `FLOOR_WINDOW` unconfirmed; report the CPU."""
    state = {"sent": 0, "confirmed": 0, "started": 0.0, "cpu": 0.0}
    try:
        params = broker_addresses(url, name="bench floor publisher")[0]

        def publish(channel: Any) -> None:
            while state["sent"] < messages and state["sent"] - state["confirmed"] < FLOOR_WINDOW:
                state["sent"] += 1
                body = json.dumps({"job_id": str(uuid.uuid4())}).encode()
                properties = pika.BasicProperties(delivery_mode=2, message_id=str(state["sent"]))
                channel.basic_publish("", queue, body, properties, mandatory=True)

        def confirmed(channel: Any, frame: Any) -> None:
            state["confirmed"] = max(state["confirmed"], frame.method.delivery_tag)
            if state["confirmed"] >= messages:
                state["cpu"] = time.process_time() - state["started"]
                channel.connection.close()
            else:
                publish(channel)

        def opened(channel: Any) -> None:
            channel.confirm_delivery(lambda frame: confirmed(channel, frame))
            reports.put(("ready", "publisher", None))
            go.wait(FLOOR_WAIT_SECONDS)
            state["started"] = time.process_time()
            publish(channel)

        connection = pika.SelectConnection(
            params,
            on_open_callback=lambda conn: conn.channel(on_open_callback=opened),
            on_open_error_callback=lambda conn, exc: conn.ioloop.stop(),
            on_close_callback=lambda conn, reason: conn.ioloop.stop(),
        )
        connection.ioloop.start()
    except Exception as exc:  # reported to the parent, which waits for it
        reports.put(("error", "publisher", f"{type(exc).__name__}: {exc}"))
        return
    if state["confirmed"] < messages:
        reports.put(("error", "publisher", f"{state['confirmed']} of {messages} confirmed"))
    else:
        reports.put(("done", "publisher", (state["confirmed"], state["cpu"])))


def _floor_consumer(url: str, queue: str, messages: int, go: Any, reports: Any) -> None:
    """Take `messages` deliveries, decoding each body, with one multiple ack every `FLOOR_ACK_EVERY`."""
    try:
        connection = connect_first(broker_addresses(url, name="bench floor consumer"))[0]
        channel = connection.channel()
        channel.basic_qos(prefetch_count=FLOOR_PREFETCH)
        reports.put(("ready", "consumer", None))
        go.wait(FLOOR_WAIT_SECONDS)
        cpu, taken, acked = time.process_time(), 0, 0
        for method, _properties, body in channel.consume(queue, inactivity_timeout=FLOOR_WAIT_SECONDS):
            if method is None:
                break
            json.loads(body)
            taken += 1
            if taken - acked >= FLOOR_ACK_EVERY or taken >= messages:
                channel.basic_ack(method.delivery_tag, multiple=True)
                acked = taken
            if taken >= messages:
                break
        cpu = time.process_time() - cpu
        channel.cancel()
        connection.close()
    except Exception as exc:  # reported to the parent, which waits for it
        reports.put(("error", "consumer", f"{type(exc).__name__}: {exc}"))
        return
    reports.put(("done", "consumer", (taken, cpu)))
