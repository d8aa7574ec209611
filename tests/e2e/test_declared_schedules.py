"""A schedule declared in code end to end: a team's kinds module, named by OUTBOX_BRIDGE_KINDS, declares an
every-second schedule with `outbox_bridge.schedule`; a real relay that takes the relay role adds it and fires
it, one job per slot, and `outbox-bridge schedules list --json` shows it declared. Started again with the
declaration changed, the relay updates it and its slots go on without a second job for any of them; started
with the declaration gone, it leaves the schedule running, unmarked, and says so."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outbox_bridge.jobstore.records import Job
from tests.e2e.test_broker_scenarios import Stack, log_of
from tests.e2e.test_schedules import assert_one_job_per_slot_without_a_gap, scheduled
from tests.support import procs

pytestmark = [pytest.mark.broker]

DECLARING = """
import outbox_bridge

outbox_bridge.schedule("tick", kind="noop", tenant="acme", payload={payload}, every="1s")
"""


@pytest.fixture
def stack(tmp_path: Path, rabbitmq_url: str) -> Iterator[Stack]:
    made = Stack(tmp_path, rabbitmq_url, outbox_bridge_kinds=("teamschedules",))
    yield made
    made.close()


def write_kinds_module(tmp_path: Path, text: str) -> Path:
    """The team's kinds module, importable only through PYTHONPATH."""
    where = tmp_path / "team"
    where.mkdir(exist_ok=True)
    (where / "teamschedules.py").write_text(textwrap.dedent(text))
    return where


def relay(stack: Stack, team: Path, name: str) -> procs.Proc:
    proc = procs.start(["relay"], stack.settings, stack.logs, name, PYTHONPATH=str(team))
    stack.procs.append(proc)
    return proc


def listed(stack: Stack) -> list[dict[str, Any]]:
    ran = procs.run(["schedules", "list", "--json"], stack.settings)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    schedules: list[dict[str, Any]] = json.loads(ran.stdout)["schedules"]
    return schedules


def payloads(found: list[Job]) -> list[dict[str, Any]]:
    return [job.payload for job in found]


def test_a_relay_adds_the_schedule_a_kinds_module_declares_and_fires_it(stack: Stack, tmp_path: Path) -> None:
    team = write_kinds_module(tmp_path, DECLARING.format(payload='{"round": 1}'))
    holder = relay(stack, team, "relay")
    stack.wait(lambda: len(scheduled(stack)) >= 3, 30, "three slots' jobs")

    (shown,) = listed(stack)
    assert (shown["tenant"], shown["name"], shown["declared"], shown["every_seconds"]) == (
        "acme",
        "tick",
        True,
        1,
    )
    assert shown["created_by"] == "code:teamschedules"
    found = scheduled(stack)
    assert_one_job_per_slot_without_a_gap(found)
    assert all(job.kind == "noop" and job.payload == {"round": 1} for job in found)
    assert "schedule acme/tick (declared in teamschedules:4): added" in log_of(holder)


@pytest.mark.slow
@pytest.mark.databases("sqlite")  # the store's side of an update and an undeclare: on both, in integration
def test_a_relay_started_again_updates_a_changed_declaration_and_leaves_a_removed_one_running(
    stack: Stack, tmp_path: Path
) -> None:
    team = write_kinds_module(tmp_path, DECLARING.format(payload='{"round": 1}'))
    first = relay(stack, team, "relay-1")
    stack.wait(lambda: len(scheduled(stack)) >= 2, 30, "two slots' jobs")
    assert first.terminate() == 0

    write_kinds_module(tmp_path, DECLARING.format(payload='{"round": 2}'))
    second = relay(stack, team, "relay-2")
    stack.wait_log(second, "schedule acme/tick (declared in teamschedules:4): updated its payload", 20)
    stack.wait(
        lambda: payloads(scheduled(stack))[-2:] == [{"round": 2}] * 2, 20, "two jobs of the new payload"
    )
    assert second.terminate() == 0

    write_kinds_module(tmp_path, '"""The team declares no schedule now."""\n')
    third = relay(stack, team, "relay-3")
    stack.wait_log(third, "no kinds module declares it now: it runs on", 20)
    made = len(scheduled(stack))
    stack.wait(lambda: len(scheduled(stack)) >= made + 2, 20, "two more slots' jobs")

    found = scheduled(stack)
    assert_one_job_per_slot_without_a_gap(found)
    assert payloads(found)[0] == {"round": 1} and payloads(found)[-1] == {"round": 2}
    (shown,) = listed(stack)
    assert (shown["declared"], shown["paused"]) == (False, False)
    assert log_of(third).count("no kinds module declares it now") == 1
