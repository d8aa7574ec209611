"""What `status` and the dashboard warn about, read from the real store (SQLite and PostgreSQL): jobs due
with no consumer alive, an outbox due with no relay alive, a job queued past the threshold."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.cli import WARNED
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, heartbeats
from outbox_bridge.jobstore.heartbeats import this_process
from outbox_bridge.jobstore.overview import Liveness, overview
from tests.support import procs
from tests.support.store import new_jobs

LIVENESS = Liveness(alive_within=15.0, queued_age_limit=60.0)


def _beat(engine: Engine, me: heartbeats.Process, now: float) -> None:
    db.transact(engine, heartbeats.beat, me, now, forget_before=now - 300.0)


def test_waiting_jobs_with_no_consumer_alive_are_a_warning_until_one_beats(
    engine: Engine, clock: FakeClock
) -> None:
    new_jobs(engine, 2)
    relay = this_process("relay", clock.now())
    _beat(engine, relay, clock.now())

    before = db.read(engine, overview, clock.now(), LIVENESS)
    _beat(engine, this_process("consumer", clock.now()), clock.now())
    after = db.read(engine, overview, clock.now(), LIVENESS)

    assert [a.code for a in before.alerts] == ["no-consumer"]
    assert before.alive == {"api": 0, "relay": 1, "consumer": 0, "worker": 0}
    assert after.alerts == []
    assert after.alive == {"api": 0, "relay": 1, "consumer": 1, "worker": 0}


def test_a_pending_outbox_with_no_relay_alive_is_a_warning(engine: Engine, clock: FakeClock) -> None:
    new_jobs(engine, 1)
    _beat(engine, this_process("consumer", clock.now()), clock.now())

    view = db.read(engine, overview, clock.now(), LIVENESS)

    assert [a.code for a in view.alerts] == ["no-relay"]


def test_a_job_queued_past_the_threshold_is_a_warning(engine: Engine, clock: FakeClock) -> None:
    new_jobs(engine, 1)
    clock.advance(61)
    for role in ("relay", "consumer"):
        _beat(engine, this_process(role, clock.now()), clock.now())

    view = db.read(engine, overview, clock.now(), LIVENESS)

    assert [a.code for a in view.alerts] == ["queued-too-long"]
    assert view.due.jobs == 1 and view.due.oldest_age_seconds == pytest.approx(61)


def test_the_dashboard_shows_the_warnings_in_its_error_colour_and_who_is_alive(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    new_jobs(engine, 1)
    _beat(engine, this_process("relay", clock.now()), clock.now())
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)

    with TestClient(create_app(settings)) as client:
        page = client.get("/ui?refresh=0", headers={"Authorization": f"Bearer {token}"})

    assert page.status_code == 200
    assert re.search(r'<div class="flash error" role="alert" data-warning="no-consumer">1 job', page.text)
    assert '<span data-alive="relay">1 relay</span>' in page.text
    assert '<span data-alive="consumer">0 consumers</span>' in page.text


def test_status_prints_the_warnings_first_and_who_is_alive(engine: Engine, settings: Settings) -> None:
    new_jobs(engine, 2)

    shown = procs.run(["status"], settings)

    assert shown.returncode == WARNED, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "WARNING no-consumer: 2 job(s) waiting and no consumer or worker is alive"
    assert lines[1] == "WARNING no-relay: 2 outbox row(s) due and no relay is alive"
    assert "alive: api 0, relay 0, consumer 0, worker 0" in lines


def test_status_exits_0_when_there_is_nothing_to_warn_about_and_3_when_it_warned(
    engine: Engine, settings: Settings
) -> None:
    quiet = procs.run(["status", "--json"], settings)
    assert quiet.returncode == 0, quiet.stderr
    assert json.loads(quiet.stdout)["warnings"] == []

    new_jobs(engine, 1)
    warned = procs.run(["status", "--json"], settings)
    assert warned.returncode == WARNED == 3, warned.stderr
    assert [w["code"] for w in json.loads(warned.stdout)["warnings"]] == ["no-consumer", "no-relay"]
