"""Flow limits end to end, with real relays, consumers and workers on each store: `KIND_MAX_RUNNING` with four
consumers never lets more run than the cap (sampled from the store through the run, and from the attempts'
intervals after it) and drains everything; consumers SIGKILLed holding capped jobs give the room back when
their leases run out; jobs sharing a concurrency key never overlap; `KIND_RATE_LIMITS` of 5/s holds over 10 s
within one start; baseline workers keep the same rules. Held jobs are not delivered again in a loop: the
consumers ack few more held deliveries than there are jobs."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.schema import attempts, jobs
from outbox_bridge.jobstore.states import State
from tests.e2e.test_broker_scenarios import Stack, log_of
from tests.support import procs
from tests.support.store import new_jobs

pytestmark = [pytest.mark.slow]

CAP = 2


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str) -> Iterator[Stack]:
    made = Stack(tmp_path, rabbitmq_url, kind_max_running={"sleep": CAP}, kind_rate_limits={"noop": "5/s"})
    yield made
    made.close()


class Sampler:
    """Counts the running jobs of one kind (or one concurrency key) in the store every few milliseconds,
    on a thread of its own, and keeps the highest count seen."""

    def __init__(self, engine: Engine, **where: str) -> None:
        query = select(func.count()).where(jobs.c.state == State.RUNNING.value)
        for name, value in where.items():
            query = query.where(jobs.c[name] == value)
        self._query = query
        self._engine = engine
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            count = int(db.read(self._engine, lambda conn: conn.execute(self._query).scalar_one()))
            self.peak = max(self.peak, count)
            self.samples += 1
            time.sleep(0.005)


def intervals(engine: Engine, ids: list[str]) -> list[tuple[float, float]]:
    """Each attempt of `ids` as the store recorded it: (started, ended)."""
    query = select(attempts.c.started_at, attempts.c.ended_at).where(attempts.c.job_id.in_(ids))
    rows = db.read(engine, lambda conn: conn.execute(query).all())
    assert all(ended is not None for _, ended in rows), "every attempt ended"
    return [(float(started), float(ended)) for started, ended in rows]


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of `spans` open at one moment (an attempt ending when another starts is not overlapping)."""
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def finished_once(stack: Stack, ids: list[str]) -> list[tuple[State, int]]:
    return sorted({(stack.job(i).state, stack.job(i).attempts) for i in ids})


def held_acks(*consumers: procs.Proc) -> int:
    return sum(log_of(c).count("(held): delivery acked") for c in consumers)


@pytest.mark.broker
def test_a_kind_cap_of_two_with_four_consumers_never_runs_three_and_drains_everything(stack: Stack) -> None:
    relay = stack.relay()
    consumers = [stack.consumer(f"consumer-{n}", concurrency=2) for n in range(4)]
    stack.wait_log(relay, "holding the relay role", 20)

    with Sampler(stack.engine, kind="sleep") as sampler:
        capped = stack.accept("sleep", {"seconds": 0.3}, count=12)
        others = stack.accept("noop", {}, count=4)
        stack.wait_terminal(capped + others, 60)

    assert sampler.peak == CAP, f"the cap was reached and never passed ({sampler.samples} samples)"
    assert most_at_once(intervals(stack.engine, capped)) == CAP
    assert finished_once(stack, capped + others) == [(State.SUCCEEDED, 1)]
    assert held_acks(*consumers) <= 3 * len(capped), "held deliveries are not sent again in a loop"
    assert stack.depth(stack.settings.dead_letter_queue) == 0


@pytest.mark.broker
def test_consumers_killed_holding_capped_jobs_give_the_room_back_when_their_leases_run_out(
    stack: Stack,
) -> None:
    relay = stack.relay()
    doomed = stack.consumer("doomed", concurrency=2)
    stack.wait_log(relay, "holding the relay role", 20)

    with Sampler(stack.engine, kind="sleep") as sampler:
        capped = stack.accept("sleep", {"seconds": 1.0}, count=6)
        stack.wait(lambda: sampler.peak == CAP, 20, "the doomed consumer runs two capped jobs")
        doomed.kill()
        survivor = stack.consumer("survivor", concurrency=4)
        stack.wait_terminal(capped, 60)

    assert sampler.peak == CAP
    assert most_at_once(intervals(stack.engine, capped)) == CAP, "the killed attempts ended before others ran"
    states = {stack.job(i).state for i in capped}
    assert states == {State.SUCCEEDED}, states
    assert held_acks(survivor) <= 4 * len(capped)


@pytest.mark.broker
def test_jobs_sharing_a_concurrency_key_never_overlap_and_other_keys_run_beside_them(stack: Stack) -> None:
    relay = stack.relay()
    consumers = [stack.consumer(f"consumer-{n}", concurrency=3) for n in range(2)]
    stack.wait_log(relay, "holding the relay role", 20)

    shared = _keyed(stack, 6, "customer-7")
    beside = _keyed(stack, 6, "customer-8")
    stack.wait_terminal(shared + beside, 60)

    assert most_at_once(intervals(stack.engine, shared)) == 1
    assert most_at_once(intervals(stack.engine, beside)) == 1
    assert most_at_once(intervals(stack.engine, shared + beside)) == 2, "two keys, two at once"
    assert finished_once(stack, shared + beside) == [(State.SUCCEEDED, 1)]
    assert held_acks(*consumers) <= 3 * 10


def _keyed(stack: Stack, count: int, key: str, **fields: Any) -> list[str]:
    return new_jobs(
        stack.engine, count, kind="sleep", payload={"seconds": 0.2}, concurrency_key=key,
        max_attempts=stack.settings.max_attempts, **fields,
    )  # fmt: skip


@pytest.mark.broker
def test_a_rate_of_five_a_second_holds_over_ten_seconds_within_one_start(stack: Stack) -> None:
    relay = stack.relay()
    consumers = [stack.consumer(f"consumer-{n}", concurrency=2) for n in range(2)]
    stack.wait_log(relay, "holding the relay role", 20)

    rated = stack.accept("noop", {}, count=56)
    stack.wait_terminal(rated, 40)

    starts = sorted(started for started, _ in intervals(stack.engine, rated))
    in_ten = sum(start < starts[0] + 10.0 for start in starts)
    print(f"starts in the first 10 s: {in_ten}; all 56 in {starts[-1] - starts[0]:.2f} s")
    assert in_ten <= 51, "5/s over 10 s is 50 starts, within one"
    assert in_ten >= 45, "and the rate is used, not starved"
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.2 - 1e-6, "starts are spaced by the rate's interval"
    assert finished_once(stack, rated) == [(State.SUCCEEDED, 1)]
    assert held_acks(*consumers) <= 3 * len(rated)


def test_baseline_workers_keep_the_cap_and_the_keys_and_finish_everything(stack: Stack) -> None:
    workers = [stack.start(["worker", "--concurrency", "3"], f"worker-{n}") for n in range(2)]
    assert workers

    with Sampler(stack.engine, kind="sleep") as sampler:
        capped = stack.accept("sleep", {"seconds": 0.2}, count=8)
        keyed = new_jobs(
            stack.engine, 4, kind="noop", concurrency_key="k", max_attempts=stack.settings.max_attempts
        )
        stack.wait_terminal(capped + keyed, 60)

    assert sampler.peak == CAP
    assert most_at_once(intervals(stack.engine, capped)) == CAP
    assert most_at_once(intervals(stack.engine, keyed)) == 1
    assert finished_once(stack, capped + keyed) == [(State.SUCCEEDED, 1)]
