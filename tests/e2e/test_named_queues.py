"""Named queues end to end, through real `outbox-bridge` processes: the relay publishes each job to its kind's
queue (declaring a queue it has not seen, on either store), a consumer or baseline worker started with
`--queues` runs only those queues' jobs, and a queue given `=N` threads keeps them when another queue has a
burst of long jobs."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pika.exceptions
import pytest

from outbox_bridge.broker import topology
from outbox_bridge.broker.message import JobMessage
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, intake
from outbox_bridge.jobstore.states import State
from tests.e2e.test_broker_scenarios import Stack, log_of
from tests.support import procs
from tests.support.procs import Proc

pytestmark = [pytest.mark.slow]

QUEUE_KINDS = '''
"""Two kinds on two named queues; a job ends once the file its payload names exists (at once without one)."""
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

import outbox_bridge


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    release: str = ""


def _wait(step: Step) -> None:
    while step.release and not Path(step.release).exists():
        time.sleep(0.02)


@outbox_bridge.kind("team.fast", payload=Step, queue="fast")
def fast(ctx: outbox_bridge.JobContext, step: Step) -> dict:
    _wait(step)
    return {"ran_on": "fast"}


@outbox_bridge.kind("team.slow", payload=Step, queue="slow")
def slow(ctx: outbox_bridge.JobContext, step: Step) -> dict:
    _wait(step)
    return {"ran_on": "slow"}
'''
NAMED = ("fast", "slow", "elsewhere")


class QueueStack(Stack):
    """A `Stack` whose processes load the kinds of `QUEUE_KINDS`, and that deletes the named queues too."""

    def __init__(self, tmp_path: Path, rabbitmq_url: str) -> None:
        self.kinds_path = tmp_path / "kinds"
        self.kinds_path.mkdir()
        (self.kinds_path / "queuekinds.py").write_text(textwrap.dedent(QUEUE_KINDS))
        super().__init__(tmp_path, rabbitmq_url, outbox_bridge_kinds=("queuekinds",), allowed_kinds=None)
        self.release = tmp_path / "release"

    def start(self, args: list[str], name: str, settings: Settings | None = None, faults: str = "") -> Proc:
        proc = procs.start(args, settings or self.settings, self.logs, name, PYTHONPATH=str(self.kinds_path))
        self.procs.append(proc)
        return proc

    def runner(self, command: str, queues: str, name: str) -> Proc:
        """A consumer or a baseline worker of `queues`, once it takes work."""
        proc = self.start([command, "--concurrency", "1", "--queues", queues], name)
        self.wait_log(proc, "consuming" if command == "consumer" else "started", 20)
        return proc

    def on_queue(self, kind: str, queue: str, *, blocked: bool = False) -> str:
        """A job of `kind` on `queue` written straight into the store (as `accept` writes it), waiting for
        `self.release` when `blocked`."""
        payload = {"release": str(self.release)} if blocked else {}
        accepted = db.transact(
            self.engine, intake.accept, tenant="acme", owner="alice", kind=kind, payload=payload,
            operation_key=intake.new_id(), now=time.time(), max_attempts=3, queue=queue,
        )  # fmt: skip
        return accepted.job.id

    def broker_queue(self, queue: str) -> str:
        return topology.queue_name(self.settings, queue)

    def waiting_on(self, queue: str) -> int | None:
        """How many messages wait in the named queue's broker queue; None while it does not exist."""
        try:
            return self.depth(self.broker_queue(queue))
        except pika.exceptions.ChannelClosedByBroker:
            return None

    def ran_in(self, job_id: str) -> list[str]:
        """The lease owner of each attempt of the job (a consumer's or worker's name ends in its pid)."""
        return [attempt.worker for attempt in self.attempts(job_id)]

    def close(self) -> None:
        try:
            channel = self.channel()
            for queue in NAMED:
                channel.queue_delete(self.broker_queue(queue))
        finally:
            super().close()


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str) -> Iterator[QueueStack]:
    made = QueueStack(tmp_path, rabbitmq_url)
    yield made
    made.close()


def pid_of(worker: str) -> int:
    return int(worker.replace(":", "-").rsplit("-", 1)[1])


@pytest.mark.broker
@pytest.mark.databases("sqlite", "postgresql")
def test_the_relay_declares_a_named_queue_and_publishes_its_jobs_there(stack: QueueStack) -> None:
    # A queue no kind of the relay's names: declared on demand all the same.
    elsewhere = stack.on_queue("noop", "elsewhere")
    fast = stack.on_queue("team.fast", "fast")
    default = stack.on_queue("noop", "default")
    relay = stack.relay()

    for queue in ("elsewhere", "fast", "default"):
        stack.wait(lambda q=queue: stack.waiting_on(q) == 1, 20, f"a message on {queue}")
    channel = stack.channel()
    bodies = {}
    for queue in ("elsewhere", "fast", "default"):
        method, _properties, body = channel.basic_get(stack.broker_queue(queue))
        bodies[queue] = JobMessage.decode(body).job_id
        if queue == "fast":  # dead-lettered as `jobs`'s are: to the dead-letter queue
            channel.basic_reject(method.delivery_tag, requeue=False)
        else:
            channel.basic_ack(method.delivery_tag)
    assert bodies == {"elsewhere": elsewhere, "fast": fast, "default": default}
    assert stack.broker_queue("default") == stack.settings.queue
    # The relay's dead-letter check found it in the dead-letter queue and announced the job again.
    stack.wait(lambda: stack.waiting_on("fast") == 1, 20, "the fast job published again")
    stack.wait_log(relay, "dead-lettered messages settled from the store", 20)
    assert [stack.job(i).state for i in (elsewhere, fast, default)] == [State.QUEUED] * 3


def submit(stack: QueueStack, client: httpx.Client, kind: str) -> str:
    answer = stack.submit(client, kind, {})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


@pytest.mark.broker
@pytest.mark.databases("sqlite")  # the claims' queue filter: on both stores in test_store_queues.py
def test_a_consumer_runs_only_its_queues_jobs_and_another_runs_the_rest(stack: QueueStack) -> None:
    stack.api()
    stack.relay()
    fast_consumer = stack.runner("consumer", "fast", "consumer-fast")
    with stack.client() as client:
        slow = submit(stack, client, "team.slow")  # first: a consumer of every queue would take it first
        fast = submit(stack, client, "team.fast")

    stack.wait_state(fast, {State.SUCCEEDED})
    # The relay published the slow job to its own queue, where it waits: nobody consumes that queue.
    stack.wait(lambda: stack.waiting_on("slow") == 1, 20, "the slow job's message waiting")
    assert (stack.job(slow).state, stack.job(slow).attempts) == (State.QUEUED, 0)
    assert [pid_of(w) for w in stack.ran_in(fast)] == [fast_consumer.pid]

    slow_consumer = stack.runner("consumer", "slow", "consumer-slow")
    stack.wait_state(slow, {State.SUCCEEDED})
    assert [pid_of(w) for w in stack.ran_in(slow)] == [slow_consumer.pid]
    for consumer in (fast_consumer, slow_consumer):
        assert consumer.terminate() == 0, log_of(consumer)[-2000:]
    assert [stack.waiting_on(q) for q in ("fast", "slow")] == [0, 0]


@pytest.mark.databases("sqlite")
def test_a_baseline_worker_runs_only_its_queues_jobs_and_another_runs_the_rest(stack: QueueStack) -> None:
    slow = stack.on_queue("team.slow", "slow")  # older: a worker of every queue would claim it first
    fast = stack.on_queue("team.fast", "fast")
    fast_worker = stack.runner("worker", "fast", "worker-fast")

    stack.wait_state(fast, {State.SUCCEEDED})
    assert (stack.job(slow).state, stack.job(slow).attempts) == (State.QUEUED, 0)
    assert [pid_of(w) for w in stack.ran_in(fast)] == [fast_worker.pid]

    slow_worker = stack.runner("worker", "slow", "worker-slow")
    stack.wait_state(slow, {State.SUCCEEDED})
    assert [pid_of(w) for w in stack.ran_in(slow)] == [slow_worker.pid]
    for worker in (fast_worker, slow_worker):
        assert worker.terminate() == 0, log_of(worker)[-2000:]


def check_a_burst_on_slow_leaves_fast_its_thread(stack: QueueStack, start: Callable[[], Any]) -> None:
    """Two long `slow` jobs under `--queues fast=1,slow=1`: one runs, one waits for slow's thread, and a
    `fast` job runs meanwhile on its own. One pool of two threads would run both slow jobs and leave the
    fast one waiting."""
    slow = [stack.on_queue("team.slow", "slow", blocked=True) for _ in range(2)]
    start()
    stack.wait(lambda: State.RUNNING in {stack.job(i).state for i in slow}, 20, "a slow job running")
    fast = stack.on_queue("team.fast", "fast")

    stack.wait_state(fast, {State.SUCCEEDED})
    assert sorted(stack.job(i).state for i in slow) == sorted([State.RUNNING, State.QUEUED])
    stack.release.touch()
    stack.wait_terminal(slow, 20)
    assert [stack.job(i).state for i in slow] == [State.SUCCEEDED] * 2


@pytest.mark.broker
@pytest.mark.databases("sqlite")  # the claims' queue filter: on both stores in test_store_queues.py
def test_a_consumer_queue_with_its_own_thread_runs_beside_a_burst_on_another(stack: QueueStack) -> None:
    stack.relay()
    check_a_burst_on_slow_leaves_fast_its_thread(
        stack, lambda: stack.runner("consumer", "fast=1,slow=1", "consumer")
    )


@pytest.mark.databases("sqlite")
def test_a_worker_queue_with_its_own_thread_runs_beside_a_burst_on_another(stack: QueueStack) -> None:
    check_a_burst_on_slow_leaves_fast_its_thread(
        stack, lambda: stack.runner("worker", "fast=1,slow=1", "worker")
    )
