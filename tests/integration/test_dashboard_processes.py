"""The dashboard's processes panel and its job list, through the app as a browser reaches them, on the real
store (SQLite and PostgreSQL): lost processes marked with links to the jobs they hold; the job list's total,
duration, worker and lease columns, exact times on hover, refresh on demand, and ticked jobs requeued after
the same confirm page, recorded as the same operator action."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock, isoformat
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, intake, queries, sweeper
from outbox_bridge.jobstore.states import State
from tests.support.dashboard import flash_of
from tests.support.processes import a_process, beat, gone_pid
from tests.support.store import LEASE, claimed, every_row, job_row, new_job

OWN = "http://testserver"


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def ops(settings: Settings) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    return {"Authorization": f"Bearer {token}"}


def page_of(client: TestClient, path: str, ops: dict[str, str]) -> str:
    page = client.get(path, headers=ops)
    assert page.status_code == 200, page.text
    return page.text


def row_of(page: str, job_id: str) -> str:
    found = re.search(rf'<tr data-job="{job_id}".*?</tr>', page, re.S)
    assert found, f"no row for {job_id}"
    return found.group(0)


def cell(row: str, name: str) -> str:
    found = re.search(rf'data-field="{name}">(.*?)</td>', row, re.S)
    assert found, f"no {name} in the row"
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())


def dead(engine: Engine, clock: FakeClock, worker: str = "w1") -> str:
    job_id = new_job(engine, intake.new_id(), max_attempts=1)
    held = claimed(engine, job_id, worker)
    clock.advance(2.5)
    db.transact(
        engine, fenced.fail, job_id, held.epoch, held.attempt_id, code="boom", message="disk full",
        permanent=False, now=clock.now(), backoff=Backoff(1.0, 1.0),
    )  # fmt: skip
    return job_id


def unknown(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, intake.new_id(), kind="notify", payload={"to": "a@example.com", "message": "hi"})
    held = claimed(engine, job_id)
    db.transact(engine, fenced.mark_external_started, job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=Backoff(1.0, 1.0))
    return job_id


def test_the_dashboard_marks_a_lost_consumer_and_links_the_jobs_it_holds(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    beat(engine, a_process("relay", clock.now()), clock.now())
    lost = a_process("consumer", clock.now(), pid=gone_pid(), worker="consumer-here-7")
    beat(engine, lost, clock.now())
    held = [new_job(engine, intake.new_id(), kind="sleep", payload={"seconds": 60}) for _ in range(2)]
    for job_id in held:
        claimed(engine, job_id, "consumer-here-7", lease=30.0)
    clock.advance(3.0)

    page = page_of(client, "/ui?refresh=0", ops)

    panel = re.search(r'<section id="processes">.*?</section>', page, re.S)
    assert panel, "no processes panel"
    consumer = re.search(
        r'<tr data-process="[^"]+" data-condition="lost" class="lost">.*?</tr>', panel[0], re.S
    )
    assert consumer and f">{lost.pid}<" in consumer[0]
    assert cell(consumer[0], "condition") == "lost pid gone"
    assert cell(consumer[0], "last-seen") == "3s ago"
    assert 'href="/ui/jobs?state=running&amp;worker=consumer-here-7"' in consumer[0]
    assert cell(consumer[0], "held") == "2"
    assert cell(consumer[0], "lease") == "worker lost, lease expires in 27s"
    assert 'data-condition="alive"' in panel[0], "the relay, alive"
    for job_id in held:
        assert "worker lost, lease expires in 27s" in row_of(panel[0], job_id)
    assert 'data-warning="worker-lost"' in page
    assert '<span data-alive="consumer">0 consumers</span>' in page


def test_the_job_list_shows_the_total_duration_worker_and_lease_with_exact_times(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    beat(engine, a_process("consumer", clock.now(), worker="consumer-alive"), clock.now())
    finished = dead(engine, clock, worker="consumer-alive")
    running = new_job(engine, "running")
    claimed(engine, running, "consumer-alive", lease=30.0)
    clock.advance(1.0)
    orphan = new_job(engine, "orphan")
    claimed(engine, orphan, "consumer-gone", lease=30.0)
    clock.advance(1.0)
    queued = new_job(engine, "queued")
    clock.advance(10.0)

    page = page_of(client, "/ui/jobs?limit=2", ops)

    assert re.search(r'<span data-figure="total">4</span> jobs match', page)
    assert len(re.findall(r'<tr data-job="', page)) == 2, "a page of 2, out of 4"
    assert cell(row_of(page, queued), "duration") == "-" and cell(row_of(page, queued), "lease") == ""
    assert cell(row_of(page, orphan), "worker") == "consumer-gone"
    assert cell(row_of(page, orphan), "lease") == "worker lost, lease expires in 19s"
    assert 'class="lost"' in row_of(page, orphan)
    created = isoformat(job_row(engine, queued).created_at)
    assert f'<span title="{created}">10s ago</span>' in cell_html(row_of(page, queued), "created")
    rest = page_of(client, "/ui/jobs?limit=10&state=running", ops)
    assert cell(row_of(rest, running), "duration") == "running for 12s"
    assert cell(row_of(rest, running), "lease") == "expires in 18s", "its worker is alive"
    done = page_of(client, "/ui/jobs?state=dead", ops)
    assert cell(row_of(done, finished), "duration") == "2.5s"
    assert cell(row_of(done, finished), "worker") == "consumer-alive", "the worker of its last attempt"


def cell_html(row: str, name: str) -> str:
    found = re.search(rf'data-field="{name}">(.*?)</td>', row, re.S)
    assert found, f"no {name} in the row"
    return found.group(1)


def test_the_job_list_refreshes_only_when_asked(
    client: TestClient, engine: Engine, ops: dict[str, str]
) -> None:
    new_job(engine, "one")

    still = page_of(client, "/ui/jobs?state=queued", ops)
    refreshing = page_of(client, "/ui/jobs?state=queued&refresh=5", ops)

    assert 'http-equiv="refresh"' not in still
    assert 'href="/ui/jobs?state=queued" id="refresh"' in still
    assert 'href="/ui/jobs?state=queued&amp;refresh=5" id="auto-refresh"' in still
    assert '<meta http-equiv="refresh" content="5">' in refreshing
    assert 'href="/ui/jobs?state=queued" id="stop-refresh"' in refreshing


def test_only_requeueable_jobs_can_be_ticked_and_tick_all_ticks_them(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    gone = dead(engine, clock)
    queued = new_job(engine, "queued")

    page = page_of(client, "/ui/jobs", ops)
    all_ticked = page_of(client, "/ui/jobs?select=all", ops)

    assert f'name="selected" value="{gone}"' in row_of(page, gone)
    assert 'name="selected"' not in row_of(page, queued)
    assert "checked" not in row_of(page, gone) and "checked" in row_of(all_ticked, gone)
    form = re.search(r'<form method="post" action="/ui/requeue" id="selection".*?</form>', page, re.S)
    assert form and 'name="csrf"' in form[0] and 'name="selection" value="yes"' in form[0]


def test_ticked_jobs_are_requeued_after_the_confirm_page_and_recorded(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    ticked = sorted(dead(engine, clock) for _ in range(2))
    left = dead(engine, clock)
    running = new_job(engine, "running")
    claimed(engine, running)
    form = {"selection": "yes", "selected": [*ticked, running], "back": "/ui/jobs"}
    before = every_row(engine)

    confirm = client.post("/ui/requeue", data=form, headers=ops)

    assert confirm.status_code == 200, confirm.text
    assert re.search(r'data-figure="matching">2<', confirm.text)
    assert sorted(re.findall(r'<tr data-job="([^"]+)">', confirm.text)) == ticked
    assert "1 of the 3 ticked are not failed, dead or unknown" in confirm.text
    assert sorted(re.findall(r'name="selected" value="([^"]+)"', confirm.text)) == sorted([*ticked, running])
    assert every_row(engine) == before, "nothing moves before it is confirmed"
    done = client.post(
        "/ui/requeue", data={**form, "confirm": "yes", "expected": "2", "note": "disk freed"}, headers=ops
    )
    assert done.status_code == 303
    assert flash_of(done) == "ok:Requeued 2 jobs."
    for job_id in ticked:
        assert job_row(engine, job_id).state is State.QUEUED
        [action] = db.read(engine, queries.actions_of, job_id)
        assert (action.action, action.actor, action.note) == ("requeue", "olga", "disk freed")
    assert job_row(engine, left).state is State.DEAD and job_row(engine, running).state is State.RUNNING


def test_nothing_ticked_is_refused_and_changes_nothing(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    dead(engine, clock)
    before = every_row(engine)

    answer = client.post("/ui/requeue", data={"selection": "yes", "confirm": "yes"}, headers=ops)

    assert flash_of(answer).startswith("error:Tick the failed")
    assert every_row(engine) == before


def test_a_ticked_unknown_job_is_requeued_only_once_its_effect_is_confirmed(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    maybe_sent = unknown(engine, clock)
    form = {"selection": "yes", "selected": [maybe_sent], "confirm": "yes", "expected": "1"}

    asked = client.post("/ui/requeue", data=form, headers=ops)

    assert asked.status_code == 200 and 'name="effect_may_repeat"' in asked.text
    assert job_row(engine, maybe_sent).state is State.UNKNOWN
    done = client.post("/ui/requeue", data={**form, "effect_may_repeat": "yes"}, headers=ops)
    assert flash_of(done) == "ok:Requeued 1 job."
    assert job_row(engine, maybe_sent).state is State.QUEUED


def test_a_ticked_requeue_under_the_session_needs_the_pages_csrf_token(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    job_id = dead(engine, clock)
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    with TestClient(create_app(settings), follow_redirects=False) as browser:
        assert browser.post("/ui/login", data={"token": token}, headers={"Origin": OWN}).status_code == 303
        page = browser.get("/ui/jobs").text
        csrf = re.search(r'id="selection".*?name="csrf" value="([0-9a-f]{64})"', page, re.S)
        assert csrf, "the selection form carries the session's CSRF token"
        form = {"selection": "yes", "selected": job_id, "confirm": "yes", "expected": "1"}

        forged = browser.post("/ui/requeue", data=form, headers={"Origin": OWN})
        assert forged.status_code == 403 and job_row(engine, job_id).state is State.DEAD
        done = browser.post("/ui/requeue", data={**form, "csrf": csrf[1]}, headers={"Origin": OWN})
        assert done.status_code == 303 and job_row(engine, job_id).state is State.QUEUED


def test_the_job_page_shows_the_worker_and_that_it_is_lost(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    beat(engine, a_process("consumer", clock.now(), pid=gone_pid(), worker="consumer-here-9"), clock.now())
    job_id = new_job(engine, "held")
    claimed(engine, job_id, "consumer-here-9", lease=30.0)
    clock.advance(40.0)

    page = page_of(client, f"/ui/jobs/{job_id}", ops)

    assert cell(page, "worker") == "consumer-here-9"
    assert cell(page, "lease") == ("worker lost, lease expired 10s ago, the sweeper will retry or settle it")
    assert cell(page, "duration") == "running for 40s"


def test_the_processes_panel_says_which_broker_node_each_relay_and_consumer_is_on(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    relay = replace(
        a_process("relay", clock.now()), detail={"broker_connected": True, "broker": "rabbit-2:5672"}
    )
    beat(engine, relay, clock.now())
    beat(engine, a_process("api", clock.now()), clock.now())

    panel = re.search(r'<section id="processes">.*?</section>', page_of(client, "/ui?refresh=0", ops), re.S)

    assert panel, "no processes panel"
    rows = re.findall(r'<tr data-process="[^"]+".*?</tr>', panel[0], re.S)
    assert sorted(cell(row, "broker") for row in rows) == ["-", "rabbit-2:5672"]
