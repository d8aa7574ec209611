"""The condition rules (alive, late, lost by time, lost at once by a pid gone from its host), how a running
job's lease is matched to its process, and how a lease reads when its worker is gone."""

from __future__ import annotations

import os
import socket

import pytest

from outbox_bridge.core.durations import format_age
from outbox_bridge.jobstore.conditions import (
    Condition,
    LeaseOwners,
    ProcessStatus,
    condition,
    judge,
    lease_note,
    pid_gone,
)
from outbox_bridge.jobstore.queries import Leases
from tests.support.processes import a_process, gone_pid

BEAT = 5.0  # alive within 3 beats (15 s), late after 1.5 beats (7.5 s)
NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("seen_ago", "expected"),
    [
        (0.0, Condition.ALIVE),
        (7.5, Condition.ALIVE),
        (7.6, Condition.LATE),
        (15.0, Condition.LATE),
        (15.1, Condition.LOST),
        (299.0, Condition.LOST),
    ],
)
def test_a_process_is_late_after_a_missed_beat_and_lost_outside_the_alive_window(
    seen_ago: float, expected: Condition
) -> None:
    assert condition(seen_ago, BEAT) is expected


def test_a_process_whose_pid_is_gone_is_lost_at_once() -> None:
    assert condition(0.0, BEAT, pid_gone=True) is Condition.LOST


def test_a_pid_is_gone_only_on_its_own_host_and_only_when_no_process_has_it() -> None:
    here = socket.gethostname()
    exited = a_process("consumer", NOW, pid=gone_pid())

    assert pid_gone(exited, here) is True
    assert pid_gone(exited, "another-host") is False, "another host's pids cannot be checked from here"
    assert pid_gone(a_process("consumer", NOW, pid=os.getpid()), here) is False
    assert pid_gone(a_process("consumer", NOW, pid=1), here) is False, "exists, even if not ours to signal"


def test_each_process_holds_the_leases_of_the_name_it_reported() -> None:
    consumer = a_process("consumer", NOW, worker="consumer-h-1")
    relay = a_process("relay", NOW)
    held = {"consumer-h-1": Leases(4, NOW + 12), "consumer-h-2": Leases(1, NOW + 3)}

    found = judge([consumer, relay], held, NOW + 1, BEAT, socket.gethostname())

    assert [(s.condition, s.leases) for s in found] == [
        (Condition.ALIVE, Leases(4, NOW + 12)),
        (Condition.ALIVE, Leases()),
    ]


def statuses(*named: tuple[str, str | None, Condition]) -> list[ProcessStatus]:
    return [ProcessStatus(a_process(role, NOW, worker=worker), state) for role, worker, state in named]


def test_a_lease_whose_owner_is_lost_or_no_live_process_has_lost_its_worker() -> None:
    owners = LeaseOwners.of(
        statuses(
            ("consumer", "consumer-h-1", Condition.ALIVE),
            ("worker", "baseline@h:2", Condition.LATE),
            ("consumer", "consumer-h-3", Condition.LOST),
            ("relay", None, Condition.ALIVE),
        )
    )

    assert not owners.worker_lost("consumer-h-1")
    assert not owners.worker_lost("baseline@h:2"), "late is not lost"
    assert owners.worker_lost("consumer-h-3")
    assert owners.worker_lost("consumer-h-9"), "no process at all"
    assert not owners.worker_lost(None)


def test_while_a_live_runner_does_not_say_its_name_only_a_lost_process_leases_are_flagged() -> None:
    owners = LeaseOwners.of(
        statuses(("consumer", None, Condition.ALIVE), ("consumer", "consumer-h-3", Condition.LOST))
    )

    assert owners.worker_lost("consumer-h-3")
    assert not owners.worker_lost("consumer-h-9"), "it may be the live one that did not say its name"


@pytest.mark.parametrize(
    ("left", "worker_lost", "text"),
    [
        (12.4, False, "expires in 12s"),
        (-3.0, False, "expired 3s ago"),
        (12.4, True, "worker lost, lease expires in 12s"),
        (-3.0, True, "worker lost, lease expired 3s ago, the sweeper will retry or settle it"),
        (90.0, True, "worker lost, lease expires in 1m"),
    ],
)
def test_a_lease_reads_as_time_left_and_says_when_its_worker_is_lost(
    left: float, worker_lost: bool, text: str
) -> None:
    assert lease_note(NOW + left, NOW, worker_lost=worker_lost) == text
    assert lease_note(None, NOW, worker_lost=worker_lost) == ""


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-1.0, "0s"), (0.4, "0s"), (42.9, "42s"), (60.0, "1m"), (7199.0, "1h"), (3 * 86_400 + 5, "3d")],
)
def test_an_age_reads_in_its_largest_whole_unit(seconds: float, text: str) -> None:
    assert format_age(seconds) == text
