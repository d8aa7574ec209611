"""A schedule end to end: added with `outbox-bridge schedules add --every 1s`, fired by a real relay, run by a
real consumer: one job per slot, every slot from the first on, each under its slot's key, each succeeded;
and with two relays, the one that holds the relay role SIGKILLed and started again, still one job per slot
and none missed (the standby takes the role over within the window a late slot is still fired in)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schema import jobs
from outbox_bridge.jobstore.states import State
from tests.e2e.test_broker_scenarios import Stack
from tests.support import procs

pytestmark = [pytest.mark.broker]


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str) -> Iterator[Stack]:
    made = Stack(tmp_path, rabbitmq_url)
    yield made
    made.close()


def add_every_second(stack: Stack) -> None:
    args = ["schedules", "add", "--tenant", "acme", "--name", "tick", "--every", "1s", "--kind", "noop"]
    done = procs.run([*args, "--payload", "{}"], stack.settings)
    assert done.returncode == 0, done.stdout + done.stderr


def scheduled(stack: Stack) -> list[Job]:
    query = select(jobs).where(jobs.c.schedule_name == "tick").order_by(jobs.c.operation_key)
    return db.read(stack.engine, lambda conn: [Job.from_row(r) for r in conn.execute(query).mappings()])


def slots_of(found: list[Job]) -> list[int]:
    """Each job's slot, from its key `schedule:tick:<RFC 3339>`, in Unix seconds."""
    prefix = "schedule:tick:"
    assert all(job.operation_key.startswith(prefix) for job in found)
    return [int(datetime.fromisoformat(job.operation_key.removeprefix(prefix)).timestamp()) for job in found]


def assert_one_job_per_slot_without_a_gap(found: list[Job]) -> None:
    slots = slots_of(found)
    assert len(set(slots)) == len(slots), f"a slot made two jobs: {slots}"
    assert slots == list(range(slots[0], slots[0] + len(slots))), f"a slot made no job: {slots}"


def succeeded(stack: Stack, count: int) -> bool:
    return sum(job.state is State.SUCCEEDED for job in scheduled(stack)) >= count


def test_an_every_second_schedule_makes_one_job_per_slot_that_a_consumer_runs(stack: Stack) -> None:
    add_every_second(stack)
    stack.relay()
    stack.consumer("consumer")
    stack.wait(lambda: succeeded(stack, 4), 30, "four slots' jobs succeeded")

    found = scheduled(stack)
    assert_one_job_per_slot_without_a_gap(found)
    first = found[:4]
    assert all((job.state, job.attempts, job.schedule_name) == (State.SUCCEEDED, 1, "tick") for job in first)


@pytest.mark.slow
def test_two_relays_one_killed_and_started_again_make_one_job_per_slot(stack: Stack) -> None:
    add_every_second(stack)
    holder = stack.relay("relay-1")
    stack.wait_log(holder, "holding the relay role", 20)
    standby = stack.relay("relay-2")
    stack.consumer("consumer")
    stack.wait(lambda: succeeded(stack, 2), 20, "two slots' jobs succeeded")

    holder.kill()
    stack.wait_log(standby, "holding the relay role", 20)
    made = len(scheduled(stack))
    stack.relay("relay-1-again")
    stack.wait(lambda: len(scheduled(stack)) >= made + 3, 20, "three more slots' jobs")
    stack.wait(lambda: succeeded(stack, made + 3), 20, "those succeeded")

    assert_one_job_per_slot_without_a_gap(scheduled(stack))
