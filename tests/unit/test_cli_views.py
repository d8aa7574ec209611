"""The JSON documents the operator's commands print: the api's job view plus the operator's fields, whole
ids, RFC 3339 UTC times, and the same keys every time."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console
from rich.table import Table

from outbox_bridge import views
from outbox_bridge.api.schemas import JobView
from outbox_bridge.broker.connection import NO_ANSWER, QueueDepth
from outbox_bridge.jobstore.alerts import Alert
from outbox_bridge.jobstore.conditions import Condition, ProcessStatus
from outbox_bridge.jobstore.heartbeats import Process
from outbox_bridge.jobstore.outbox import Backlog
from outbox_bridge.jobstore.overview import Overview
from outbox_bridge.jobstore.queries import DueQueue, Leases
from outbox_bridge.jobstore.records import Attempt
from outbox_bridge.jobstore.states import State
from outbox_bridge.status_text import print_processes
from tests.support.store import a_job

RELAY = Process(
    id="p-1",
    role="relay",
    host="h1",
    pid=42,
    version="0.1.0",
    started_at=1_700_000_000.0,
    last_seen_at=1_700_000_005.0,
    detail={"broker_connected": True, "broker": "rabbit-2:5672"},
)
GONE = Process(
    id="p-2",
    role="consumer",
    host="h1",
    pid=43,
    version="0.1.0",
    started_at=1_700_000_000.0,
    last_seen_at=1_700_000_005.0,
    detail={"concurrency": 4, "in_flight": 1, "worker": "consumer-h1-43"},
)
HELD = a_job(
    id="0b9e5c1a-0000-4000-8000-000000000001",
    kind="sleep",
    state=State.RUNNING,
    epoch=1,
    attempts=1,
    lease_owner="consumer-h1-43",
    lease_expires_at=1_700_000_030.0,
    started_at=1_700_000_001.0,
)
JOB = a_job(
    kind="notify",
    payload={"to": "ops@example.com", "message": "hi"},
    state=State.UNKNOWN,
    epoch=2,
    attempts=2,
    external_epoch=2,
    error_code="lease_lost_after_effect",
    error_message="the provider may have been called",
    updated_at=1_700_000_042.5,
    started_at=1_700_000_001.0,
    finished_at=1_700_000_042.5,
)


def test_a_job_is_the_api_view_plus_the_operator_fields() -> None:
    document = views.job_document(JOB)

    api_view = JobView.of(JOB).model_dump(mode="json")
    assert {k: document[k] for k in api_view} == api_view
    assert document["id"] == JOB.id
    assert document["finished_at"] == "2023-11-14T22:14:02.500Z" == document["updated_at"]
    assert (document["tenant"], document["owner"], document["epoch"]) == ("acme", "alice", 2)
    assert document["error"] == {
        "code": "lease_lost_after_effect",
        "message": "the provider may have been called",
    }
    assert "payload" not in document, "listings stay small; `jobs show` carries the payload"


def test_a_job_has_the_same_keys_whatever_its_state() -> None:
    fresh = replace(
        JOB, state=State.QUEUED, error_code=None, error_message=None, started_at=None, finished_at=None
    )
    assert views.job_document(fresh).keys() == views.job_document(JOB).keys()
    assert views.job_document(fresh)["error"] is None


def test_show_carries_input_and_attempts_oldest_first() -> None:
    attempt = Attempt(
        id="att-1", job_id=JOB.id, epoch=1, worker="w1", started_at=1_700_000_001.0, ended_at=None,
        outcome="running", external_started_at=1_700_000_002.0, output=None, error_code=None,
        error_message=None,
    )  # fmt: skip

    document = views.show_document(JOB, [attempt], [])

    assert document["payload"] == JOB.payload and document["operation_key"] == "op-1"
    assert document["attempts"] == [
        {
            "id": "att-1",
            "epoch": 1,
            "worker": "w1",
            "outcome": "running",
            "started_at": "2023-11-14T22:13:21.000Z",
            "ended_at": None,
            "external_started_at": "2023-11-14T22:13:22.000Z",
            "error": None,
        }
    ]


def test_status_names_its_figures_and_a_silent_broker_as_null() -> None:
    view = Overview(
        counts={s.value: 0 for s in State} | {"unknown": 1},
        backlog=Backlog(pending=0, oldest_age_seconds=0.0),
        throughput=[(1_700_000_000.0, 4)],
        recent=[JOB],
        dead=[],
        unknown=[JOB],
        due=DueQueue(jobs=0, oldest_age_seconds=0.0),
        statuses=[
            ProcessStatus(RELAY, Condition.ALIVE),
            ProcessStatus(GONE, Condition.LOST, pid_gone=True, leases=Leases(1, 1_700_000_030.0)),
        ],
        worker_lost=[HELD],
        alerts=[Alert("no-consumer", "1 job(s) waiting and no consumer or worker is alive")],
        at=1_700_000_018.0,
    )

    document = views.status_document(view, "jobs.dead", QueueDepth(None, NO_ANSWER))

    assert set(document) == {
        "warnings",
        "alive",
        "processes",
        "lost_processes",
        "worker_lost_jobs",
        "queued_due",
        "counts",
        "outbox",
        "finished_per_minute",
        "dead",
        "unknown",
        "dead_letter_queue",
        "paused_kinds",
        "schedules",
        "held",
        "queues",
    }
    assert (document["paused_kinds"], document["schedules"], document["held"]) == ([], [], [])
    assert document["finished_per_minute"] == [{"minute": "2023-11-14T22:13:20.000Z", "jobs": 4}]
    assert [j["id"] for j in document["unknown"]] == [JOB.id]
    assert document["dead_letter_queue"] == {
        "name": "jobs.dead",
        "messages": None,
        "problem": "the broker did not answer",
    }
    assert document["warnings"] == [
        {"code": "no-consumer", "message": "1 job(s) waiting and no consumer or worker is alive"}
    ]
    assert document["alive"] == {"api": 0, "relay": 1, "consumer": 0, "worker": 0}
    assert document["processes"] == [
        {
            "id": "p-1",
            "role": "relay",
            "host": "h1",
            "pid": 42,
            "version": "0.1.0",
            "started": "2023-11-14T22:13:20.000Z",
            "last_seen": "2023-11-14T22:13:25.000Z",
            "detail": {"broker_connected": True, "broker": "rabbit-2:5672"},
            "condition": "alive",
            "pid_gone": False,
            "held_jobs": 0,
            "soonest_lease_expires_at": None,
        }
    ], "only the live processes, as before, with what they hold and the broker node they are on"
    [lost] = document["lost_processes"]
    assert (lost["pid"], lost["condition"], lost["pid_gone"]) == (43, "lost", True)
    assert (lost["held_jobs"], lost["jobs"]) == (1, [HELD.id])
    assert lost["soonest_lease_expires_at"] == "2023-11-14T22:13:50.000Z"
    [flagged] = document["worker_lost_jobs"]
    assert flagged["id"] == HELD.id and flagged["lease_owner"] == "consumer-h1-43"
    assert flagged["lease"] == "worker lost, lease expires in 12s"


def test_status_text_says_which_broker_node_each_process_is_on() -> None:
    view = Overview(
        counts={s.value: 0 for s in State},
        backlog=Backlog(pending=0, oldest_age_seconds=0.0),
        throughput=[],
        recent=[],
        dead=[],
        unknown=[],
        due=DueQueue(jobs=0, oldest_age_seconds=0.0),
        statuses=[ProcessStatus(RELAY, Condition.ALIVE)],
        worker_lost=[],
        alerts=[],
        at=1_700_000_018.0,
    )
    printed = io.StringIO()

    print_processes(Console(file=printed, width=300), lambda **o: Table(box=None, **o), view, view.at)

    [row] = [line for line in printed.getvalue().splitlines() if line.lstrip().startswith("relay")]
    assert "broker=rabbit-2:5672" in row
