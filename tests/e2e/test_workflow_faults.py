"""Workflows under SIGKILL: two relays and two consumers (concurrency 4 each) run batches and dependency
chains while a chaos thread SIGKILLs one of them at random every 0.5-1.5 s for 10 s and restarts it 0.1-0.5 s
later.
The work is accepted into the store during those 10 s with the store's own API, as `enqueue_batch` does:
20 batches of 10 sleeping members (every fifth with one member that fails for good), each with a `notify`
callback, and 10 chains of 3 jobs, each waiting for the one before, whose head fails in every third chain;
the first two batches' members all wait for the last job of a chain (one that fails, one that succeeds).

Then everything runs until every job has ended, and:
- every batch is done, with exactly one callback job (its key `batch:<id>:callback`, the one its request
  named), whose first attempt started after every member had ended; a watch that read the store every
  0.1 s while it ran never saw a callback job beside an unfinished member of its batch;
- no job started before every job it waits for had succeeded and ended (the attempts' start times against
  the dependencies' finish times, and the watch never saw one running beside a dependency not succeeded);
  a job whose dependency failed ended `cancelled` (`dependency_failed`) without an attempt, and so did its
  own dependents;
- every job ended as its kind and its place allow: members and chain jobs succeeded or failed as built,
  callbacks `succeeded`, or `unknown` when their consumer died after the send had begun (allowed: the
  promise is never sent twice); the stub provider was called at most once for each callback, exactly once
  for each that succeeded;
- the store's invariants (`tests/support/invariants.py`) hold, and nothing is left in the dead-letter queue.

The figures (printed, and listed at the end of the run) say how many batches, members, callbacks and kills
there were, and how long after the last kill the last callback ended. WORKFLOW_FAULTS_SEED=<seed> replays
the same work and the same draws of the chaos thread."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import FIGURE
from tests.e2e import test_soak
from tests.e2e.test_broker_scenarios import Stack
from tests.support import soak
from tests.support import workflow_faults as wf
from tests.support.invariants import Snapshot, check_invariants, snapshot

pytestmark = [pytest.mark.broker, pytest.mark.slow]

SETTINGS = test_soak.SETTINGS  # a lease of 3 s: a killed consumer's jobs run again soon after
RELAYS = ("relay-1", "relay-2")
CONSUMERS = {"consumer-1": 4, "consumer-2": 4}
CHAOS_SECONDS = 10.0
ACCEPT_SECONDS = 8.0  # the feeder's steps are spread over this much of the chaos
KILL_EVERY = (0.5, 1.5)
# Every job ended this long after the last kill: a lease, the longest backoff, and the chain's three hops
# and a batch's callback behind it, with room to spare on two busy cores.
DRAIN_BOUND = 30.0
SEED = int(os.environ.get("WORKFLOW_FAULTS_SEED") or random.SystemRandom().randrange(1_000_000))


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str, store_of_this_test: str) -> Iterator[Stack]:
    made = Stack(tmp_path, rabbitmq_url, **SETTINGS)  # type: ignore[arg-type]
    yield made
    made.close()


def deploy(stack: Stack) -> list[soak.Slot]:
    """Start the relays and the consumers; return once each is connected to the broker."""
    wanted = [(name, ["relay"], "topology declared") for name in RELAYS]
    wanted += [(name, ["consumer", "--concurrency", str(n)], "consuming") for name, n in CONSUMERS.items()]
    slots = [soak.Slot(name, args, ready, stack.start(args, name)) for name, args, ready in wanted]
    stack.wait(lambda: all(slot.ready() for slot in slots), 30, "every process ready")
    return slots


def timing(seen: Snapshot, work: wf.Workload, chaos: soak.Chaos, took: float | None) -> str:
    if took is None:
        return f"NOT every job ended within {DRAIN_BOUND:.0f}s of the last kill"
    last = wf.last_callback_end(seen, work)
    if last is None or not chaos.kills:
        return f"every job ended {took:.1f}s after the faults"
    since = last - (chaos.last_fault + time.time() - time.monotonic())
    when = f"{since:.1f}s after" if since >= 0 else f"{-since:.1f}s before"
    return f"the last callback ended {when} the last kill, every job {took:.1f}s after it"


def invariant_problems(stack: Stack, work: wf.Workload) -> list[str]:
    try:
        check_invariants(
            stack.settings, accepted=work.ends, executions=soak.allowed_executions, engine=stack.engine
        )
    except AssertionError as exc:  # the jobs not terminal are told of by the drain
        lines = [line for line in str(exc).splitlines()[1:] if not line.endswith("not terminal")]
        return [f"invariant: {line.strip()}" for line in lines]
    return []


@pytest.mark.timeout(150)
def test_batches_and_chains_under_sigkill_end_once_in_order_and_send_no_callback_twice(
    stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    slots = deploy(stack)
    watch = wf.Watch(stack.engine).start()
    chaos = soak.Chaos(slots, lambda slot: stack.start(slot.args, slot.name), seed=SEED, every=KILL_EVERY)
    feeder = wf.Feeder(stack.engine, wf.Shape(), seed=SEED, seconds=ACCEPT_SECONDS)
    chaos.start()
    feeder.start()
    try:
        time.sleep(CHAOS_SECONDS)
    finally:
        chaos.stop()
        feeder.join()
    took = soak.wait_terminal(stack.engine, chaos.last_fault or time.monotonic(), DRAIN_BOUND)
    watch.stop()

    work, seen = feeder.accepted, snapshot(stack.settings, stack.engine)
    sent = wf.sends(stack.settings.notify_log)
    problems = [*feeder.errors, *chaos.errors, *watch.problems()]
    problems += [
        f"{s.name} exited ({s.proc.popen.poll()}) and was not restarted" for s in slots if not s.proc.alive()
    ]
    if took is None:
        problems.append(
            f"not every job ended {DRAIN_BOUND:.0f}s after the last kill: {soak.stuck_summary(seen)}"
        )
    problems += wf.outcome_problems(seen, work)
    problems += wf.batch_problems(stack.engine, seen, work)
    problems += wf.dependency_problems(stack.engine, seen)
    problems += wf.send_problems(seen, work, sent)
    problems += soak.execution_problems(seen)
    problems += invariant_problems(stack, work)
    if dead_lettered := test_soak.settled_dead_letters(stack):
        problems.append(f"{dead_lettered} messages in the dead-letter queue")

    delays = wf.callback_delays(stack.engine, seen, work)
    told = (
        f"workflows under SIGKILL, seed {SEED}: {wf.figures(seen, work, sent, delays)}; "
        f"{len(chaos.kills)} kills {dict(chaos.counts())} in {CHAOS_SECONDS:.0f}s; "
        f"the watch read the store {watch.reads} times; {timing(seen, work, chaos, took)}"
    )
    print(told)
    record_property(FIGURE, told)
    assert not problems, "\n".join([told, *problems, soak.tails(stack.procs)])
