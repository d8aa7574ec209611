"""The broker path end to end: real `outbox-bridge api`, `relay` and `consumer` processes, a real RabbitMQ,
real signals at the boundaries (SIGKILL between commit and ack, SIGSTOP past a lease), and the invariant
checker after every run."""

from __future__ import annotations

import contextlib
import json
import random
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pika
import pika.exceptions
import pytest

from outbox_bridge.api.auth import issue_token
from outbox_bridge.broker import topology
from outbox_bridge.broker.connection import broker_addresses, connect_first
from outbox_bridge.broker.message import JobMessage
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake, migrate, outbox, queries
from outbox_bridge.jobstore.records import Attempt, Job
from outbox_bridge.jobstore.states import TERMINAL, State
from tests.conftest import SharedBroker, make_settings
from tests.support.faultproxy import FaultProxy
from tests.support.invariants import check_invariants, read_starts, running_without_live_lease
from tests.support.procs import BIN, Proc, free_port, settings_env, start, wait_for, wait_http
from tests.support.store import new_jobs

pytestmark = [pytest.mark.broker, pytest.mark.slow]

FAST = {
    "lease_seconds": 2.0,
    "sweep_interval_seconds": 0.2,
    "relay_lease_seconds": 1.0,
    "relay_poll_seconds": 0.02,
    "shutdown_grace_seconds": 3.0,
    "degraded_after_seconds": 0.0,
    "backoff_base_seconds": 0.05,
    "backoff_max_seconds": 0.5,
}


class Stack:
    """One test's store, broker names and processes; everything it started is stopped by `close`."""

    def __init__(
        self, tmp_path: Path, rabbitmq_url: str, *, amqp_heartbeat: int | None = None, **overrides: Any
    ) -> None:
        if amqp_heartbeat is not None:  # every process asks the broker for this heartbeat
            rabbitmq_url = f"{rabbitmq_url}?heartbeat={amqp_heartbeat}"
        self.settings = make_settings(tmp_path, rabbitmq_url=rabbitmq_url, **{**FAST, **overrides})
        self.engine = db.make_engine(self.settings)
        migrate.init_schema(self.settings, self.engine)
        self.logs = tmp_path / "logs"
        self.procs: list[Proc] = []
        self._broker: pika.BlockingConnection | None = None
        self.api_url = ""
        self.token = issue_token(self.settings.auth_secret, tenant="acme", user="alice")

    # Processes.

    def start(self, args: list[str], name: str, settings: Settings | None = None, faults: str = "") -> Proc:
        extra = {"OUTBOX_BRIDGE_FAULTS": faults} if faults else {}
        proc = start(args, settings or self.settings, self.logs, name, **extra)
        self.procs.append(proc)
        return proc

    def consumer(
        self, name: str, *, concurrency: int = 2, faults: str = "", settings: Settings | None = None
    ) -> Proc:
        proc = self.start(["consumer", "--concurrency", str(concurrency)], name, settings, faults)
        self.wait_log(proc, "consuming", 20)
        return proc

    def relay(self, name: str = "relay", *, faults: str = "", settings: Settings | None = None) -> Proc:
        return self.start(["relay"], name, settings, faults)

    def api(self) -> Proc:
        port = free_port()
        proc = self.start(["api", "--port", str(port)], "api")
        self.api_url = f"http://127.0.0.1:{port}"
        wait_http(f"{self.api_url}/healthz", proc, timeout=30)
        return proc

    def wait_log(self, proc: Proc, text: str, timeout: float) -> None:
        self.wait(lambda: text in log_of(proc), timeout, f"{text!r} in {proc.log_path.name}")

    def wait(self, predicate: Callable[[], object], timeout: float, what: str) -> None:
        """Wait for `predicate`; on timeout the assertion shows the end of every process log."""
        try:
            wait_for(predicate, timeout, interval=0.05, what=what)
        except AssertionError as exc:
            tails = "\n".join(f"--- {p.log_path.name}\n{log_of(p)[-2500:]}" for p in self.procs)
            raise AssertionError(f"{exc}\n{tails}") from None

    # The store.

    def accept(self, kind: str, payload: dict[str, Any], count: int = 1) -> list[str]:
        return new_jobs(
            self.engine, count, kind=kind, payload=payload, max_attempts=self.settings.max_attempts
        )

    def job(self, job_id: str) -> Job:
        found = db.read(self.engine, queries.get_job, job_id)
        assert found is not None
        return found

    def attempts(self, job_id: str) -> list[Attempt]:
        return db.read(self.engine, queries.attempts_of, job_id)

    def wait_state(self, job_id: str, states: set[State], timeout: float = 20.0) -> Job:
        self.wait(lambda: self.job(job_id).state in states, timeout, f"job {job_id} in {states}")
        return self.job(job_id)

    def wait_terminal(self, ids: list[str], timeout: float) -> None:
        def done() -> bool:
            found = db.read(self.engine, lambda conn: [queries.get_job(conn, i) for i in ids])
            return all(j is not None and j.state in TERMINAL for j in found)

        self.wait(done, timeout, f"{len(ids)} jobs terminal")

    # The API.

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_url, headers={"Authorization": f"Bearer {self.token}"}, timeout=10.0
        )

    @staticmethod
    def submit(client: httpx.Client, kind: str, payload: dict[str, Any]) -> httpx.Response:
        return client.post(
            "/jobs", json={"kind": kind, "payload": payload}, headers={"Idempotency-Key": intake.new_id()}
        )

    # The broker.

    def channel(self) -> Any:
        if self._broker is None or not self._broker.is_open:
            # The first node that answers, as the project's processes connect (RABBITMQ_URL may list several).
            self._broker, _ = connect_first(broker_addresses(self.settings.rabbitmq_url, name="test"))
        channel = self._broker.channel()
        topology.declare(channel, self.settings)
        return channel

    def publish(self, body: bytes) -> None:
        properties = pika.BasicProperties(delivery_mode=2, message_id="test")
        self.channel().basic_publish(self.settings.exchange, topology.ROUTING_KEY, body, properties)

    def depth(self, queue: str) -> int:
        return int(self.channel().queue_declare(queue, passive=True).method.message_count)

    def stop_consumers_and_check_every_delivery_was_acked(self, *consumers: Proc) -> None:
        """SIGTERM the consumers (a clean exit each); a delivery they never acked would now be back in the
        queue, so the queue must be empty."""
        self.wait(lambda: self.depth(self.settings.queue) == 0, 20, "no delivery waiting")
        for consumer in consumers:
            if consumer.alive():
                assert consumer.terminate(timeout=30) == 0, log_of(consumer)[-2000:]
        assert self.depth(self.settings.queue) == 0, "a delivery was left unacked"

    def close(self) -> None:
        for proc in self.procs:
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGKILL)
            with contextlib.suppress(ValueError):  # already waited for: its log is closed
                proc.wait(10)
        try:
            topology.delete(self.channel(), self.settings)
            assert self._broker is not None
            self._broker.close()
        finally:
            self.engine.dispose()


@pytest.fixture
def make_stack(tmp_path: Path, rabbitmq_url: str) -> Iterator[Callable[..., Stack]]:
    made: list[Stack] = []

    def factory(**overrides: Any) -> Stack:
        made.append(Stack(tmp_path, rabbitmq_url, **overrides))
        return made[-1]

    yield factory
    for stack in made:
        stack.close()


def log_of(proc: Proc) -> str:
    """What the process wrote so far (readable after it exited, unlike `Proc.output`)."""
    return proc.log_path.read_text(errors="replace")


def starts_by_pid(settings: Settings) -> dict[str, list[int]]:
    """The pid of every execution, by job, in log order."""
    assert settings.execution_log is not None
    found: dict[str, list[int]] = {}
    for line in settings.execution_log.read_text().splitlines():
        record = json.loads(line)
        if record["event"] == "start":
            found.setdefault(record["job_id"], []).append(record["pid"])
    return found


def started(settings: Settings, job_id: str) -> bool:
    return job_id in read_starts(settings)


def via_proxy(settings: Settings, proxy: FaultProxy) -> Settings:
    return settings.model_copy(update={"rabbitmq_url": proxy.url_for(settings.rabbitmq_url)})


def upstream_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5672


# 1.
@pytest.mark.timeout(240)
def test_thousand_jobs_through_api_relay_and_two_consumers_each_succeed_once(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(lease_seconds=10.0)
    stack.api()
    stack.relay()
    stack.consumer("consumer-a", concurrency=8)
    stack.consumer("consumer-b", concurrency=8)
    with stack.client() as client, ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda n: stack.submit(client, "noop", {"n": n}), range(1000)))
    assert {a.status_code for a in answers} == {202}
    ids = [a.json()["id"] for a in answers]
    stack.wait_terminal(ids, timeout=120)
    seen = check_invariants(stack.settings, accepted=ids, engine=stack.engine)
    assert seen.states() == {"succeeded": 1000}
    assert len({pids[0] for pids in starts_by_pid(stack.settings).values()}) == 2, "both consumers took work"


# 2.
def test_relay_killed_after_publish_before_marking_republishes_and_the_duplicate_is_absorbed(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    consumer = stack.consumer("consumer")
    first = stack.relay("relay-1", faults="relay.after_publish:KILL")
    [job_id] = stack.accept("noop", {})
    assert first.wait(20) == -signal.SIGKILL
    stack.wait_state(job_id, {State.SUCCEEDED})
    stack.relay("relay-2")
    stack.wait_log(consumer, f"job {job_id} not run (terminal)", 20)
    check_invariants(stack.settings, accepted=[job_id], engine=stack.engine)


# 3.
def test_consumer_killed_after_commit_before_ack_gets_its_redelivery_acked_without_rerun(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    stack.relay()
    doomed = stack.consumer("consumer-1", faults="consumer.after_commit:KILL")
    [job_id] = stack.accept("noop", {})
    assert doomed.wait(20) == -signal.SIGKILL
    assert stack.job(job_id).state is State.SUCCEEDED
    survivor = stack.consumer("consumer-2")
    stack.wait_log(survivor, f"job {job_id} not run (terminal)", 20)
    stack.stop_consumers_and_check_every_delivery_was_acked(survivor)
    check_invariants(stack.settings, accepted=[job_id], engine=stack.engine)


# 4.
def test_consumer_killed_mid_job_runs_again_with_a_higher_epoch_after_the_lease_expires(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(lease_seconds=1.5)
    stack.relay()
    doomed = stack.consumer("consumer-1", concurrency=1)
    [job_id] = stack.accept("sleep", {"seconds": 1.0})
    stack.wait(lambda: started(stack.settings, job_id), 20, "the job started")
    doomed.kill()
    stack.consumer("consumer-2", concurrency=1)
    job = stack.wait_state(job_id, {State.SUCCEEDED})
    assert job.epoch == 2
    assert [a.outcome for a in stack.attempts(job_id)] == ["lost", "succeeded"]
    assert starts_by_pid(stack.settings)[job_id][0] == doomed.pid
    check_invariants(stack.settings, accepted=[job_id], executions={2}, engine=stack.engine)


def test_consumer_killed_right_after_its_claim_leaves_the_job_to_run_once_at_the_next_epoch(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(lease_seconds=1.0)
    stack.relay()
    doomed = stack.consumer("consumer-1", faults="consumer.after_claim:KILL")
    [job_id] = stack.accept("noop", {})
    assert doomed.wait(20) == -signal.SIGKILL
    assert stack.job(job_id).state is State.RUNNING and not started(stack.settings, job_id)
    stack.consumer("consumer-2")
    job = stack.wait_state(job_id, {State.SUCCEEDED})
    assert job.epoch == 2
    assert [a.outcome for a in stack.attempts(job_id)] == ["lost", "succeeded"]
    check_invariants(stack.settings, accepted=[job_id], engine=stack.engine)


# 5.
def test_consumer_killed_after_notify_started_its_call_ends_unknown_and_an_operator_resolves_it(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(lease_seconds=1.0)
    stack.relay()
    doomed = stack.consumer("consumer-1", faults="notify.after_external_started:KILL")
    [job_id] = stack.accept("notify", {"to": "ops@example.com", "message": "disk full"})
    assert doomed.wait(20) == -signal.SIGKILL
    stack.consumer("consumer-2")  # takes the redelivery: the claim refuses it, nothing runs
    job = stack.wait_state(job_id, {State.UNKNOWN})
    assert job.error_code == "outcome_unknown"
    time.sleep(1.5)  # longer than a lease and several sweeps: nothing retries it
    assert stack.job(job_id).state is State.UNKNOWN and stack.job(job_id).attempts == 1
    resolve = subprocess.run(
        [str(BIN), "jobs", "resolve", job_id, "--outcome", "succeeded", "--note", "provider says delivered"],
        env=settings_env(stack.settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resolve.returncode == 0, resolve.stdout + resolve.stderr
    assert stack.job(job_id).state is State.SUCCEEDED
    check_invariants(stack.settings, accepted=[job_id], engine=stack.engine)


# 6.
def test_consumer_stopped_past_its_lease_cannot_commit_after_another_finished_the_job(
    make_stack: Callable[..., Stack],
) -> None:
    # The paused consumer holds the job's second delivery too, until the broker gives its connection up
    # for missed heartbeats (the consumer's own would be 5 s, the least it asks for: about 14 s here).
    stack = make_stack(lease_seconds=1.0, amqp_heartbeat=2)
    stack.relay()
    paused = stack.consumer("consumer-1", concurrency=1)
    [job_id] = stack.accept("sleep", {"seconds": 2.0})
    stack.wait(lambda: started(stack.settings, job_id), 20, "the job started")
    paused.signal(signal.SIGSTOP)
    other = stack.consumer("consumer-2", concurrency=1)
    job = stack.wait_state(job_id, {State.SUCCEEDED}, timeout=30)
    paused.signal(signal.SIGCONT)
    stack.wait_log(paused, "fenced out", 20)
    stack.stop_consumers_and_check_every_delivery_was_acked(paused, other)
    assert job.epoch == 2
    assert [a.outcome for a in stack.attempts(job_id)] == ["lost", "succeeded"]
    result = db.read(stack.engine, queries.committed_result, job_id)
    assert result is not None and result.epoch == 2
    assert stack.job(job_id).result_attempt_id == result.id
    check_invariants(stack.settings, accepted=[job_id], executions={2}, engine=stack.engine)


# 7.
def test_same_message_delivered_to_two_consumers_at_once_is_claimed_by_one(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    consumers = [stack.consumer(f"consumer-{n}", concurrency=1) for n in (1, 2)]
    [job_id] = stack.accept("sleep", {"seconds": 1.0})  # no relay: this test publishes
    message = JobMessage(job_id).encode()
    stack.publish(message)
    stack.publish(message)
    stack.wait_state(job_id, {State.SUCCEEDED})
    refusal = f"job {job_id} not run (leased)"
    stack.wait(lambda: any(refusal in log_of(c) for c in consumers), 10, "the second claim refused")
    assert sum(refusal in log_of(c) for c in consumers) == 1
    assert len(stack.attempts(job_id)) == 1
    check_invariants(stack.settings, accepted=[job_id], engine=stack.engine)


# 8.
def test_job_failing_transiently_every_time_gets_three_attempts_with_growing_delays_then_dead(
    make_stack: Callable[..., Stack],
) -> None:
    base = 0.4
    stack = make_stack(backoff_base_seconds=base, backoff_max_seconds=10.0)
    stack.relay()
    stack.consumer("consumer")
    [job_id] = stack.accept("flaky", {})
    job = stack.wait_state(job_id, {State.DEAD})
    assert (job.attempts, job.error_code) == (3, "attempts_exhausted")
    tried = stack.attempts(job_id)
    assert [a.outcome for a in tried] == ["retry", "retry", "dead"]
    gaps = [later.started_at - earlier.ended_at for earlier, later in pairwise(tried)]
    # Backoff n is drawn from [base * 2^(n-1) / 2, base * 2^(n-1)]: at least 0.2 s, then at least 0.4 s.
    assert gaps[0] >= base / 2 and gaps[1] >= base, gaps
    check_invariants(stack.settings, accepted=[job_id], executions={3}, engine=stack.engine)


# 9.
def test_poison_message_is_dead_lettered_and_nothing_else_is_disturbed(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack()
    stack.relay()
    consumer = stack.consumer("consumer")
    before = stack.accept("noop", {}, 3)
    stack.publish(b'{"job_id": 42}')
    after = stack.accept("noop", {}, 3)
    stack.wait_terminal(before + after, 20)
    stack.wait(lambda: stack.depth(stack.settings.dead_letter_queue) == 1, 10, "the poison dead-lettered")
    _, _, body = stack.channel().basic_get(stack.settings.dead_letter_queue, auto_ack=True)
    assert body == b'{"job_id": 42}'
    assert "dead-lettering" in log_of(consumer) and consumer.alive()
    seen = check_invariants(stack.settings, accepted=before + after, engine=stack.engine)
    assert seen.states() == {"succeeded": 6}


# 10.
class Load:
    """Submits noop jobs through the API at a steady pace until stopped; records every answer."""

    def __init__(self, stack: Stack, pause: float = 0.02) -> None:
        self.stack = stack
        self.pause = pause
        self.ids: list[str] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with self.stack.client() as client:
            while not self._stop.wait(self.pause):
                try:
                    answer = self.stack.submit(client, "noop", {})
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                if answer.status_code == 202:
                    self.ids.append(answer.json()["id"])
                else:
                    self.failures.append(f"{answer.status_code}: {answer.text[:200]}")


def restart_broker(broker: SharedBroker) -> float:
    """`rabbitmqctl stop_app`, then always `start_app`, then wait until the broker answers again. Returns
    when the app had stopped (epoch seconds): every connection opened later is a reconnection."""
    rabbitmqctl = broker.rabbitmqctl
    assert rabbitmqctl is not None
    try:
        rabbitmqctl("stop_app")
        stopped = time.time()
        time.sleep(1.0)
    finally:
        rabbitmqctl("start_app")
        wait_for(lambda: broker_answers(broker.url), 90, interval=0.5, what="the broker answering again")
    return stopped


LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"
OPENED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*broker connection \d+ open", re.MULTILINE)


def reopened_since(proc: Proc, since: float) -> bool:
    """Whether the consumer opened a broker connection after `since` (epoch seconds), by its log."""
    stamps = (datetime.strptime(s, LOG_TIME).timestamp() for s in OPENED.findall(log_of(proc)))
    return any(stamp > since for stamp in stamps)


def broker_answers(url: str) -> bool:
    try:
        pika.BlockingConnection(pika.URLParameters(url)).close()
    except pika.exceptions.AMQPError:
        return False
    return True


@pytest.mark.exclusive  # restarts the shared broker: nothing else may run meanwhile
@pytest.mark.timeout(300)
def test_broker_outages_under_load_lose_nothing_and_run_every_job_once(
    make_stack: Callable[..., Stack], rabbitmq: SharedBroker
) -> None:
    if rabbitmq.rabbitmqctl is None:
        pytest.fail(f"restarting the broker needs its node: rabbitmqctl on this host for {rabbitmq.url}")
    stack = make_stack(lease_seconds=5.0, degraded_after_seconds=1.0)
    stack.api()
    with FaultProxy(upstream_of(stack.settings.rabbitmq_url)) as proxy:
        proxied = via_proxy(stack.settings, proxy)
        relay = stack.relay(settings=proxied)
        consumers = [stack.consumer(f"consumer-{n}", concurrency=4, settings=proxied) for n in (1, 2)]

        def reconnect_after(since: float, what: str) -> None:
            for consumer in consumers:  # each outage on its own: the next begins once all are back
                stack.wait(partial(reopened_since, consumer, since), 30, f"{consumer.log_path.name} {what}")

        with Load(stack) as load:
            time.sleep(1.0)
            cut = time.time()
            assert proxy.cut() >= 3, "relay and consumers were connected through the proxy"
            reconnect_after(cut, "reconnected after the first cut")
            time.sleep(0.5)
            proxy.refuse()
            refused = time.time()
            proxy.cut()
            time.sleep(2.5)  # refused for longer than DEGRADED_AFTER_SECONDS: consumers claim from the table
            proxy.listen()
            reconnect_after(refused, "reconnected once the proxy listened again")
            time.sleep(0.5)
            stopped = restart_broker(rabbitmq)
            time.sleep(1.0)
        assert load.failures == [], load.failures[:5]
        assert len(load.ids) > 50
        stack.wait_terminal(load.ids, timeout=90)
        assert all(c.alive() for c in consumers) and relay.alive()
        stack.wait(
            lambda: db.read(stack.engine, outbox.backlog, time.time()).pending == 0, 30, "outbox drained"
        )
        reconnect_after(stopped, "reconnected after the broker restart")
        stack.stop_consumers_and_check_every_delivery_was_acked(*consumers)
    for consumer in consumers:
        assert "degraded mode" in log_of(consumer)
    seen = check_invariants(stack.settings, accepted=load.ids, engine=stack.engine)
    assert seen.states() == {"succeeded": len(load.ids)}


# 11.
def test_cancel_while_queued_while_running_and_racing_completion_each_ends_in_one_truthful_state(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(lease_seconds=1.5)
    stack.api()
    stack.relay()
    with stack.client() as client:
        queued = stack.submit(client, "export", {"rows": 10, "chunk": 5}).json()["id"]
        answer = client.post(f"/jobs/{queued}/cancel")
        assert (answer.status_code, answer.json()["state"]) == (200, "cancelled")
        stack.consumer("consumer", concurrency=4)

        running = stack.submit(client, "export", {"rows": 1_000_000, "chunk": 500}).json()["id"]
        stack.wait(lambda: started(stack.settings, running), 20, "the export started")
        assert client.post(f"/jobs/{running}/cancel").status_code == 202
        stack.wait_state(running, {State.CANCELLED, State.SUCCEEDED})

        racing = [stack.submit(client, "sleep", {"seconds": 0.3}).json()["id"] for _ in range(6)]
        for job_id in racing:
            stack.wait(lambda job_id=job_id: started(stack.settings, job_id), 20, "the sleep started")
            time.sleep(random.uniform(0.15, 0.45))
            assert client.post(f"/jobs/{job_id}/cancel").status_code in {200, 202}
        stack.wait_terminal(racing, 20)

        assert stack.job(queued).state is State.CANCELLED and started(stack.settings, queued) is False
        assert stack.job(running).state is State.CANCELLED, "cancelled between chunks, or at the commit"
        assert [a.outcome for a in stack.attempts(running)] == ["cancelled"]
        assert not list((stack.settings.results_dir / running).glob("*.csv"))
        for job_id in [queued, running, *racing]:
            job, result = stack.job(job_id), client.get(f"/jobs/{job_id}/result")
            assert job.state in {State.SUCCEEDED, State.CANCELLED}
            assert (result.status_code == 200) == (job.state is State.SUCCEEDED)
            assert (job.result_attempt_id is not None) == (job.state is State.SUCCEEDED)
    allowed = {queued: {0}}
    check_invariants(
        stack.settings, accepted=[queued, running, *racing], executions=allowed, engine=stack.engine
    )


# 12.
def test_sigterm_stops_consumer_and_relay_cleanly_leaving_no_job_running_without_a_live_lease(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(shutdown_grace_seconds=1.0, lease_seconds=2.0)
    relay = stack.relay()
    consumer = stack.consumer("consumer-1", concurrency=4)
    short = stack.accept("sleep", {"seconds": 0.3}, 3)
    [long] = stack.accept("sleep", {"seconds": 3.0})
    stack.wait(lambda: all(started(stack.settings, j) for j in [*short, long]), 20, "all four started")
    assert consumer.terminate(timeout=20) == 0
    assert relay.terminate(timeout=20) == 0
    assert running_without_live_lease(stack.settings, time.time(), stack.engine) == []
    assert all(stack.job(j).state is State.SUCCEEDED for j in short)
    released = stack.job(long)
    assert (released.state, released.attempts) == (State.QUEUED, 0)
    assert "released" in log_of(consumer)

    stack.relay("relay-2")
    stack.consumer("consumer-2")
    stack.wait_state(long, {State.SUCCEEDED})
    assert [a.outcome for a in stack.attempts(long)] == ["released", "succeeded"]
    check_invariants(stack.settings, accepted=[*short, long], executions={long: {2}}, engine=stack.engine)
