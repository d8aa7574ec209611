"""A delayed job end to end, on both designs: submitted through a real `outbox-bridge api` with
`delay_seconds`, it stays queued until its `run_at` and starts within a second after it, whether a real
relay publishes it to a real consumer or a baseline worker claims it from the table; and a relay cut off
from the broker at its due time only delays it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_bridge.core import clock
from outbox_bridge.jobstore import intake
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import State
from tests.e2e.test_broker_scenarios import Stack, upstream_of, via_proxy
from tests.support.faultproxy import FaultProxy
from tests.support.procs import Proc

pytestmark = [pytest.mark.slow]

DELAY_SECONDS = 2.0
WITHIN_SECONDS = 1.0


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str) -> Iterator[Stack]:
    made = Stack(tmp_path, rabbitmq_url)
    yield made
    made.close()


def submit_delayed(stack: Stack) -> Job:
    """POST a noop delayed by `DELAY_SECONDS`; the job as the store has it just after."""
    with stack.client() as client:
        response = client.post(
            "/jobs",
            json={"kind": "noop", "payload": {}, "delay_seconds": DELAY_SECONDS},
            headers={"Idempotency-Key": intake.new_id()},
        )
    assert response.status_code == 202, response.text
    assert response.json()["run_at"] is not None
    return stack.job(response.json()["id"])


def runs_on_time(stack: Stack, workers: list[Proc]) -> None:
    """Submit a delayed job: still queued, never attempted, shortly before its start; started after it and
    within `WITHIN_SECONDS` of it."""
    job = submit_delayed(stack)
    assert job.run_at is not None
    time.sleep(max(0.0, job.run_at - 0.25 - clock.now()))
    early = stack.job(job.id)
    assert (early.state, early.attempts, early.started_at) == (State.QUEUED, 0, None), "started early"
    done = stack.wait_state(job.id, {State.SUCCEEDED}, timeout=DELAY_SECONDS + 20)
    assert done.started_at is not None
    late = done.started_at - job.run_at
    assert 0 <= late < WITHIN_SECONDS, f"started {late:+.3f}s from its run_at"
    assert all(worker.alive() for worker in workers)


@pytest.mark.broker
def test_a_delayed_job_is_published_and_started_within_a_second_after_its_run_at(stack: Stack) -> None:
    stack.api()
    relay = stack.relay()
    consumer = stack.consumer("consumer")
    stack.wait_log(relay, "broker connection up", 20)
    runs_on_time(stack, [relay, consumer])


def test_a_delayed_job_is_claimed_by_the_baseline_within_a_second_after_its_run_at(tmp_path: Path) -> None:
    # The baseline needs no broker: the stack's broker names are declared by nobody and removed by nobody.
    stack = Stack(tmp_path, "amqp://guest:guest@127.0.0.1:1/%2F")
    try:
        stack.api()
        worker = stack.start(["worker"], "worker")
        stack.wait_log(worker, "started:", 20)
        runs_on_time(stack, [worker])
    finally:
        for proc in stack.procs:
            proc.kill()
        stack.engine.dispose()


@pytest.mark.broker
def test_a_relay_cut_off_from_the_broker_at_the_due_time_only_delays_a_delayed_job(stack: Stack) -> None:
    stack.api()
    consumer = stack.consumer("consumer")  # connected directly: it stays up and never claims from the table
    with FaultProxy(upstream_of(stack.settings.rabbitmq_url)) as proxy:
        relay = stack.relay(settings=via_proxy(stack.settings, proxy))
        stack.wait_log(relay, "broker connection up", 20)
        job = submit_delayed(stack)
        assert job.run_at is not None
        proxy.refuse()
        assert proxy.cut() == 1, "the relay was connected through the proxy"
        time.sleep(max(0.0, job.run_at + 1.5 - clock.now()))
        assert stack.job(job.id).state is State.QUEUED, "nothing could announce it"
        back = clock.now()
        proxy.listen()
        done = stack.wait_state(job.id, {State.SUCCEEDED}, timeout=30)
    assert done.started_at is not None and done.started_at >= back
    assert (done.attempts, relay.alive(), consumer.alive()) == (1, True, True)
