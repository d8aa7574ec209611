"""A field report as a test: one deployment (api, two relays, three consumers of concurrency 4, 4 and 2)
under a bounded load of mixed kinds from four HTTP clients, with or without a chaos thread that SIGKILLs a
random process (among those up and ready) every 0.6-1.2 s and restarts it 0.1-0.5 s later. Afterwards
every accepted job must reach a terminal state within a lease, the longest backoff and 10 s of the last
fault, and what the store, the execution log, the stub provider and the broker say must keep the
system's promises. The summary line (printed, and first in a failure's message) gives the figures and the
seed; SOAK_SEED=<seed> replays the same requests and the same draws of the chaos thread (which process
it kills also depends on which are ready at the time)."""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox_bridge.jobstore import db, outbox
from tests.e2e.test_broker_scenarios import FAST, Stack
from tests.support import soak
from tests.support.invariants import Snapshot, check_invariants, snapshot
from tests.support.procs import Proc, free_port, wait_http

pytestmark = [pytest.mark.broker, pytest.mark.slow]

LEASE_SECONDS = 3.0
BACKOFF_MAX_SECONDS = 1.5
SETTINGS = {
    **FAST,
    "lease_seconds": LEASE_SECONDS,
    "max_attempts": 5,
    "backoff_base_seconds": 0.1,
    "backoff_max_seconds": BACKOFF_MAX_SECONDS,
    "dead_letter_check_seconds": 0.5,
}
CONSUMERS = {"consumer-1": 4, "consumer-2": 4, "consumer-3": 2}
LOAD_SECONDS = 8.0
# Each of the 4 clients starts a request at most this often: ~120 requests/s in all, an ordinary load the
# consumers' 10 threads keep up with. Unpaced, a fast api accepted 4,672 in 8 s (1,232 sleep jobs of
# 0.01-0.3 s), more work than the threads could finish within TERMINAL_BOUND of the last 202.
PACE_SECONDS = 1 / 30
# Every job terminal this long after the last fault (the last kill, or the last 202 if that came later).
TERMINAL_BOUND = LEASE_SECONDS + BACKOFF_MAX_SECONDS + 10.0
# The clients' requests and the chaos thread's draws; SOAK_SEED=<seed from a summary> replays them.
SEED = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(1_000_000))


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str, store_of_this_test: str) -> Iterator[Stack]:
    made = Stack(tmp_path, rabbitmq_url, **SETTINGS)
    yield made
    made.close()


def deploy(stack: Stack) -> list[soak.Slot]:
    """Start the api (on a port it keeps across restarts), two relays and the consumers; return once the api
    answers and every relay and consumer is connected to the broker."""
    port = free_port()
    stack.api_url = f"http://127.0.0.1:{port}"
    wanted = [("api", ["api", "--port", str(port)], "Uvicorn running on")]
    wanted += [(name, ["relay"], "topology declared") for name in ("relay-1", "relay-2")]
    wanted += [(name, ["consumer", "--concurrency", str(n)], "consuming") for name, n in CONSUMERS.items()]
    slots = [soak.Slot(name, args, ready, stack.start(args, name)) for name, args, ready in wanted]
    stack.wait(lambda: all(slot.ready() for slot in slots), 30, "every process ready")
    wait_http(f"{stack.api_url}/healthz", slots[0].proc)
    return slots


def restart(stack: Stack, slot: soak.Slot) -> Proc:
    return stack.start(slot.args, slot.name)


def summary(case: str, stack: Stack, clients: soak.Clients, chaos: soak.Chaos, seen: Snapshot) -> str:
    kinds = Counter(r.kind for r in clients.requests)
    attempts = Counter(j.attempts for j in seen.jobs.values())
    reruns = sum(seen.executions(j) > 1 for j in seen.jobs)
    _, torn = soak.provider_calls(stack.settings.notify_log)
    retried = clients.retried()
    # A retry whose job was already committed by an earlier try: the api answered with the original job.
    replayed = [
        r for r in retried if r.job_id in seen.jobs and seen.jobs[r.job_id].created_at < r.last_try_at
    ]
    return (
        f"soak {case}, seed {SEED}: {len(clients.requests)} requests {dict(kinds)}, {len(retried)} retried "
        f"({len(replayed)} answered with the job an earlier try had committed), answers "
        f"{dict(clients.answers)}; kills {dict(chaos.counts())}; "
        f"states {dict(seen.states())}; jobs by attempts {dict(attempts)}; {reruns} jobs ran more than once; "
        f"{torn} torn provider lines"
    )


def timing(chaos: soak.Chaos, clients: soak.Clients, since: float, took: float | None) -> str:
    if took is None:
        return f"NOT all terminal {TERMINAL_BOUND:.1f}s after the last fault"
    ended = since + took
    kill = f", {ended - chaos.last_fault:.1f}s after the last kill" if chaos.kills else ""
    return (
        f"all terminal {took:.1f}s after the last fault (bound {TERMINAL_BOUND:.1f}s){kill}, "
        f"{ended - clients.last_accepted:.1f}s after the last 202"
    )


def settled_dead_letters(stack: Stack, within: float = 10.0) -> int:
    """The dead-letter queue's depth once the relays' dead-letter check had `within` seconds to empty it
    (a duplicate of a finished job may be dead-lettered until the last moment)."""
    give_up_at = time.monotonic() + within
    while (depth := stack.depth(stack.settings.dead_letter_queue)) and time.monotonic() < give_up_at:
        time.sleep(0.2)
    return depth


def stuck(stack: Stack, seen: Snapshot, dead_lettered: int) -> str:
    settings = stack.settings
    pending = db.read(stack.engine, outbox.backlog, time.time()).pending
    return (
        f"not all terminal {TERMINAL_BOUND:.1f}s after the last fault: {soak.stuck_summary(seen)}; "
        f"{settings.queue} depth {stack.depth(settings.queue)}, {settings.dead_letter_queue} depth "
        f"{dead_lettered}, {pending} outbox rows due"
    )


def afterwards(stack: Stack, clients: soak.Clients, since: float) -> tuple[float | None, Snapshot, list[str]]:
    """Once the load and the faults are over: wait until every job is terminal (at most TERMINAL_BOUND
    after `since`, monotonic), then check what the store, the execution log, the stub provider and the
    broker say. Returns how long the wait took (None: not all terminal), what the store held, and the
    problems found."""
    settings = stack.settings
    problems: list[str] = []
    took = soak.wait_terminal(stack.engine, since, TERMINAL_BOUND)
    seen = snapshot(settings, stack.engine)
    dead_lettered = settled_dead_letters(stack)
    if took is None:
        problems.append(stuck(stack, seen, dead_lettered))
    problems += soak.key_problems(stack.engine, clients.requests)
    problems += soak.outcome_problems(seen)
    problems += soak.export_problems(seen, settings.results_dir)
    problems += soak.send_problems(seen, settings.notify_log)
    problems += soak.execution_problems(seen)
    if dead_lettered:
        problems.append(f"{dead_lettered} messages in the dead-letter queue {settings.dead_letter_queue}")
    try:
        check_invariants(
            settings,
            accepted=clients.accepted().values(),
            executions=soak.allowed_executions,
            engine=stack.engine,
        )
    except AssertionError as exc:  # the jobs not terminal are told of above
        lines = [line for line in str(exc).splitlines()[1:] if not line.endswith("not terminal")]
        problems += [f"invariant: {line.strip()}" for line in lines]
    return took, seen, problems


@pytest.mark.timeout(90)
@pytest.mark.parametrize("with_chaos", [True, False], ids=["chaos", "plain"])
def test_mixed_load_with_and_without_chaos_ends_every_job_once_and_strands_nothing(
    stack: Stack, with_chaos: bool
) -> None:
    slots = deploy(stack)
    clients = soak.Clients(stack.client, seed=SEED, pace=PACE_SECONDS).start()
    chaos = soak.Chaos(slots, lambda slot: restart(stack, slot), seed=SEED)
    if with_chaos:
        chaos.start()
    try:
        time.sleep(LOAD_SECONDS)
    finally:
        clients.stop()
        chaos.stop()
        clients.join()

    problems = [*clients.failures, *chaos.errors]
    problems += [
        f"{s.name} exited ({s.proc.popen.poll()}) and was not restarted" for s in slots if not s.proc.alive()
    ]
    since = max(chaos.last_fault, clients.last_accepted)
    took, seen, found = afterwards(stack, clients, since)
    problems += found
    told = summary("chaos" if with_chaos else "plain", stack, clients, chaos, seen)
    told += "; " + timing(chaos, clients, since, took)
    print(told)
    assert not problems, "\n".join([told, *problems, soak.tails(stack.procs)])
