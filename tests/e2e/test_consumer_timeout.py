"""Long jobs against the broker's delivery timeout: RabbitMQ closes a channel whose oldest unacknowledged
delivery is older than its `consumer_timeout`, and gives every delivery of the channel back to the queue
(each return counts toward the message's delivery limit). Here it bites for real: a RabbitMQ node of the
test's own (scripts/rabbitmq-cluster, one node), started with `consumer_timeout` in its configuration, runs
beside the node on 5672 and is the only one these processes know. RabbitMQ 3.10 checks the timeout on each
channel's tick (`channel_tick_interval`, a minute unless configured), so the node ticks every 250 ms and the
test lasts seconds, not minutes.

Jobs that outlive the timeout, and deliveries queued behind them for longer, still each run once: the
consumer settles what it has held past `CONSUMER_DELIVERY_HOLD_SECONDS` the store's way, the broker never
times a delivery out, nothing is dead-lettered, and the consumer keeps its first connection and keeps
consuming. And what an early ack gave up the store still holds (on the node on 5672, with the usual
timeout): a consumer killed, or paused past its lease, after acking its running job's delivery early loses
nothing, the job runs again elsewhere under a new epoch, and a late delivery of it, or a late outcome, is
refused."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_bridge.broker.message import JobMessage
from outbox_bridge.jobstore.states import State
from tests.conftest import IN_CI
from tests.e2e.test_broker_scenarios import Stack, log_of
from tests.support.cluster import LocalCluster
from tests.support.cluster import missing_requirement as cluster_missing
from tests.support.invariants import check_invariants, read_starts
from tests.support.procs import Proc

# A node of its own boots in about ten seconds; the scenario itself takes about five.
pytestmark = [pytest.mark.broker, pytest.mark.slow]

CONSUMER_TIMEOUT_MS = 2500
CHANNEL_TICK_MS = 250
# Acked within an eighth more (`consumer.link.DeliveryAges`): about 1.1 s, well inside the 2.5 s.
HOLD_SECONDS = 1.0
LONG_JOB_SECONDS = 3.5  # outlives the timeout and a tick
TIMED_OUT = "timed out waiting for delivery acknowledgement"


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    """One RabbitMQ node with a short `consumer_timeout`, shared by this module's tests (each test declares
    its own queues on it)."""
    reason = cluster_missing()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    with LocalCluster(
        5761, nodes=1, consumer_timeout_ms=CONSUMER_TIMEOUT_MS, channel_tick_ms=CHANNEL_TICK_MS
    ) as made:
        yield made


@pytest.fixture
def stack(tmp_path: Path, node: LocalCluster) -> Iterator[Stack]:
    made = Stack(tmp_path, node.url, consumer_delivery_hold_seconds=HOLD_SECONDS)
    yield made
    made.close()


@pytest.mark.timeout(90)
@pytest.mark.databases("sqlite")  # the store's side of settling a held delivery is tested on both elsewhere
def test_jobs_and_deliveries_held_past_the_consumer_timeout_run_once_on_one_connection(
    stack: Stack, node: LocalCluster
) -> None:
    timeouts_before = node.log().count(TIMED_OUT)
    stack.relay()
    consumer = stack.consumer("consumer", concurrency=2)
    long = stack.accept("sleep", {"seconds": LONG_JOB_SECONDS}, 2)
    stack.wait(lambda: all(j in read_starts(stack.settings) for j in long), 20, "both long jobs started")
    behind = stack.accept("noop", {}, 3)  # delivered at once, then held behind the long jobs
    stack.wait_terminal(long + behind, 30)
    later = stack.accept("noop", {}, 1)  # the consumer still consumes
    stack.wait_terminal(later, 10)

    jobs = [*long, *behind, *later]
    assert {stack.job(j).state for j in jobs} == {State.SUCCEEDED}
    assert node.log().count(TIMED_OUT) == timeouts_before, "the broker timed a delivery out"
    told = log_of(consumer)
    assert "broker connection 1 lost" not in told and "broker connection 2 open" not in told, told[-3000:]
    assert "held past" in told, "nothing was held past the hold, so this test showed nothing"
    assert stack.depth(stack.settings.dead_letter_queue) == 0
    stack.stop_consumers_and_check_every_delivery_was_acked(consumer)
    check_invariants(stack.settings, accepted=jobs, engine=stack.engine)


@pytest.fixture
def shared(tmp_path: Path, rabbitmq_url: str) -> Iterator[Stack]:
    """A stack on the node on 5672 (queues of its own), whose consumers ack early after `HOLD_SECONDS`,
    and whose processes ask for a 2 s AMQP heartbeat: the broker gives up a paused consumer's connection
    (and what it was sent meanwhile) after about 5 s."""
    made = Stack(tmp_path, rabbitmq_url, amqp_heartbeat=2, consumer_delivery_hold_seconds=HOLD_SECONDS)
    yield made
    made.close()


def start_and_ack_early(stack: Stack, *, behind: int = 0) -> tuple[str, list[str], Proc]:
    """A consumer of one thread running a long job whose delivery it has acked early, with `behind` jobs
    waiting for its thread meanwhile; returns the long job's id, the others' and the consumer."""
    stack.relay()
    consumer = stack.consumer("consumer-1", concurrency=1)
    [running] = stack.accept("sleep", {"seconds": LONG_JOB_SECONDS})
    stack.wait(lambda: running in read_starts(stack.settings), 20, "the long job started")
    waiting = stack.accept("noop", {}, behind) if behind else []
    stack.wait_log(consumer, "acked: 1 of claimed jobs", 10)
    return running, waiting, consumer


@pytest.mark.timeout(90)
@pytest.mark.databases("sqlite")  # the store's side is the sweeper's, tested on both stores elsewhere
def test_a_consumer_killed_after_acking_early_loses_nothing_and_a_late_duplicate_is_refused(
    shared: Stack,
) -> None:
    stack = shared
    running, behind, doomed = start_and_ack_early(stack, behind=2)
    doomed.kill()  # SIGKILL: the acked delivery is not redelivered; the job's lease runs out
    other = stack.consumer("consumer-2", concurrency=1)
    stack.wait_terminal([running, *behind], 30)
    assert stack.job(running).state is State.SUCCEEDED and stack.job(running).epoch == 2
    stack.publish(JobMessage(running).encode())  # the old message, delivered once more
    stack.wait_log(other, f"job {running} not run (terminal)", 10)
    stack.stop_consumers_and_check_every_delivery_was_acked(other)
    assert stack.depth(stack.settings.dead_letter_queue) == 0
    accepted = [running, *behind]
    check_invariants(stack.settings, accepted=accepted, executions={running: {2}}, engine=stack.engine)


@pytest.mark.timeout(90)
@pytest.mark.databases("sqlite")  # the store's side is the sweeper's, tested on both stores elsewhere
def test_a_consumer_paused_past_its_lease_after_acking_early_cannot_commit_the_rescued_job(
    shared: Stack,
) -> None:
    # The job's new message may go to the paused consumer first: it runs once the broker has given that
    # consumer's connection up for missed heartbeats.
    stack = shared
    running, _, paused = start_and_ack_early(stack)
    paused.signal(signal.SIGSTOP)
    other = stack.consumer("consumer-2", concurrency=1)
    stack.wait_terminal([running], 30)
    paused.signal(signal.SIGCONT)
    stack.wait_log(paused, "fenced out", 20)
    job = stack.job(running)
    assert job.state is State.SUCCEEDED and job.epoch == 2
    stack.stop_consumers_and_check_every_delivery_was_acked(paused, other)
    assert stack.depth(stack.settings.dead_letter_queue) == 0
    check_invariants(stack.settings, accepted=[running], executions={2}, engine=stack.engine)
