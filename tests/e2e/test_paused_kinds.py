"""Pausing a kind end to end, with a real relay and a real consumer: jobs of a kind paused with `outbox-bridge
kinds pause` are published and delivered, and the consumer acks each delivery without running it: they stay
queued with no attempt spent, nothing reaches the dead-letter queue and nothing is redelivered; a kind not
paused runs meanwhile; `outbox-bridge kinds resume` and they all succeed, each in one attempt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_bridge.jobstore.states import State
from tests.e2e.test_broker_scenarios import Stack, log_of
from tests.support import procs

pytestmark = [pytest.mark.broker]


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str) -> Iterator[Stack]:
    made = Stack(tmp_path, rabbitmq_url)
    yield made
    made.close()


def operator(stack: Stack, *args: str) -> str:
    done = procs.run(list(args), stack.settings)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_paused_kind_waits_queued_without_attempts_or_dead_letters_and_runs_after_resume(
    stack: Stack,
) -> None:
    relay = stack.relay()
    consumer = stack.consumer("consumer")
    stack.wait_log(relay, "holding the relay role", 20)
    operator(stack, "kinds", "pause", "export")

    held = stack.accept("export", {"rows": 2, "chunk": 2}, count=5)
    other = stack.accept("noop", {}, count=1)
    stack.wait_terminal(other, 20)
    stack.wait(
        lambda: log_of(consumer).count("(kind_paused): delivery acked") == 5, 20, "five deliveries acked"
    )

    stack.wait(lambda: stack.depth(stack.settings.queue) == 0, 10, "no delivery waiting")
    assert stack.depth(stack.settings.dead_letter_queue) == 0
    assert [(stack.job(i).state, stack.job(i).attempts) for i in held] == [(State.QUEUED, 0)] * 5
    assert stack.job(other[0]).state is State.SUCCEEDED

    assert "5 queued jobs announced again" in operator(stack, "kinds", "resume", "export")
    stack.wait_terminal(held, 20)
    assert [(stack.job(i).state, stack.job(i).attempts) for i in held] == [(State.SUCCEEDED, 1)] * 5
    assert stack.depth(stack.settings.dead_letter_queue) == 0
    stack.stop_consumers_and_check_every_delivery_was_acked(consumer)
