"""A job a worker claimed ahead of its threads (`worker.budget`) is `running` but not started: the job view's
`running_since` is null until one of the worker's threads runs it, the client reads it so, and the
dashboard's job page says "claimed, waiting for a thread". A claim that hands the job a free thread at once
records it started in the claim itself (a claim of more jobs than threads free records them all as claimed
ahead); a job claimed ahead gets one write once its thread has run it a moment (`claiming.mark_running`),
and a short one that ends first costs none beyond its outcome."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

import outbox_bridge
from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.schemas import JobView
from outbox_bridge.core.clock import FakeClock, isoformat
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced
from outbox_bridge.jobstore.states import State
from tests.integration.test_share_claiming_ahead import THREADS, Delivered, claiming_ahead
from tests.support.procs import wait_for
from tests.support.store import LEASE, job_row, new_jobs


def claim(engine: Engine, job_ids: list[str], now: float, *, ahead: bool) -> list[claiming.ClaimResult]:
    return db.transact(engine, claiming.claim_many, job_ids, "w1", now, LEASE, ahead=ahead)


def test_a_claim_with_a_free_thread_records_the_job_started_and_one_ahead_of_them_does_not(
    engine: Engine, clock: FakeClock
) -> None:
    at_once, ahead = new_jobs(engine, 2)
    claim(engine, [at_once], clock.now(), ahead=False)
    claim(engine, [ahead], clock.now(), ahead=True)
    assert job_row(engine, at_once).running_since == clock.now()
    assert (job_row(engine, ahead).state, job_row(engine, ahead).running_since) == (State.RUNNING, None)
    assert JobView.of(job_row(engine, ahead)).running_since is None
    assert JobView.of(job_row(engine, at_once)).running_since == isoformat(clock.now())


def test_marking_a_job_claimed_ahead_started_holds_only_under_its_fence(
    engine: Engine, clock: FakeClock
) -> None:
    job_id, other = new_jobs(engine, 2)
    [taken] = claim(engine, [job_id], clock.now(), ahead=True)
    [ended] = claim(engine, [other], clock.now(), ahead=True)
    assert taken.claim is not None and ended.claim is not None
    stale = (job_id, taken.claim.epoch - 1, clock.now() + 1)
    db.transact(engine, claiming.mark_running, [stale])
    assert job_row(engine, job_id).running_since is None, "another epoch's mark writes nothing"
    db.transact(engine, claiming.mark_running, [(job_id, taken.claim.epoch, clock.now() + 2)])
    assert job_row(engine, job_id).running_since == clock.now() + 2

    # The other job ends before its mark is written: the mark changes nothing.
    db.transact(engine, fenced.complete, other, ended.claim.epoch, ended.claim.attempt_id, {}, clock.now())
    db.transact(engine, claiming.mark_running, [(other, ended.claim.epoch, clock.now() + 3)])
    finished = job_row(engine, other)
    assert (finished.state, finished.running_since) == (State.SUCCEEDED, None)
    assert JobView.of(finished).running_since is None


def test_jobs_claimed_ahead_read_as_waiting_for_a_thread_until_a_thread_runs_them(
    engine: Engine, settings: Settings
) -> None:
    heavy = new_jobs(engine, 8, tenant="heavy", kind="sleep", payload={"seconds": 1.5})

    def shown_started() -> list[str]:
        return [job_id for job_id in heavy if job_row(engine, job_id).running_since is not None]

    with claiming_ahead(engine, settings) as writer:
        for job_id in heavy:
            writer.offer(Delivered(job_id, "heavy"))
        writer.start()
        wait_for(lambda: len(shown_started()) >= THREADS, 10, what="the jobs the threads took shown started")
        assert all(job_row(engine, j).state is State.RUNNING for j in heavy), "all eight claimed at once"
        started = shown_started()
        assert len(started) == THREADS, "the four a thread runs, and only those, read as started"
        waiting = [job_id for job_id in heavy if job_id not in started]
        wait_for(
            lambda: all(job_row(engine, j).running_since is not None for j in waiting),
            10,
            what="the waiting jobs shown started once their threads ran them",
        )
        wait_for(lambda: all(job_row(engine, j).state is State.SUCCEEDED for j in heavy), 10, what="done")
    began = {job_id: job_row(engine, job_id).running_since or 0.0 for job_id in heavy}
    assert min(began[j] for j in waiting) > max(began[j] for j in started), "each from its own thread's start"


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


def test_the_api_the_client_and_the_dashboard_tell_a_job_waiting_for_a_thread_from_a_started_one(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    waiting, started = new_jobs(engine, 2, tenant="acme")
    claim(engine, [waiting], clock.now(), ahead=True)
    claim(engine, [started], clock.now(), ahead=False)

    def answer(request: httpx.Request) -> httpx.Response:
        got = client.request(request.method, request.url.raw_path.decode(), headers=request.headers)
        return httpx.Response(got.status_code, headers=got.headers, content=got.content)

    with outbox_bridge.Client("http://api", token=token, transport=httpx.MockTransport(answer)) as api:
        assert (api.get(waiting).state, api.get(waiting).running_since) == ("running", None)
        assert api.get(started).running_since is not None

    ops = {
        "Authorization": f"Bearer {issue_token(settings.auth_secret, tenant='ops', user='o', operator=True)}"
    }
    page = client.get(f"/ui/jobs/{waiting}", headers=ops)
    assert page.status_code == 200, page.text
    assert 'data-field="waiting-for-thread">claimed, waiting for a thread</span>' in page.text
    other = client.get(f"/ui/jobs/{started}", headers=ops).text
    assert 'data-field="waiting-for-thread"' not in other
    assert f'data-field="running-since">{isoformat(clock.now())}</td>' in other
