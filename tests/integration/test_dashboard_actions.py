"""The dashboard's jobs pages and forms, through the app as a browser reaches them: filters and paging, the
job page with everything an operator decides from, and cancel / requeue / resolve / requeue-many, each
recorded with the operator token's `sub`; a bulk requeue changes nothing until it is confirmed."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.dashboard.access import MAX_FORM_BYTES
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.clock import isoformat as clock_iso
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, intake, queries, sweeper
from outbox_bridge.jobstore.schedule import Schedule
from outbox_bridge.jobstore.states import State
from tests.support.dashboard import flash_of
from tests.support.store import LEASE, claimed, every_row, job_row, new_job

OPERATOR = "olga"


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def ops(settings: Settings) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="ops", user=OPERATOR, operator=True)
    return {"Authorization": f"Bearer {token}"}


def ended(engine: Engine, clock: FakeClock, *, permanent: bool, **fields: object) -> str:
    """A job whose only attempt failed: `failed` when `permanent`, else `dead`."""
    job_id = new_job(engine, intake.new_id(), max_attempts=1, **fields)
    held = claimed(engine, job_id)
    db.transact(
        engine, fenced.fail, job_id, held.epoch, held.attempt_id, code="boom", message="disk full",
        permanent=permanent, now=clock.now(), backoff=Backoff(1.0, 1.0),
    )  # fmt: skip
    return job_id


def unknown(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, intake.new_id(), kind="notify", payload={"to": "a@example.com", "message": "hi"})
    held = claimed(engine, job_id)
    db.transact(engine, fenced.mark_external_started, job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=Backoff(1.0, 1.0))
    return job_id


def recorded(engine: Engine, job_id: str) -> list[tuple[str, str, str | None]]:
    return [(a.action, a.actor, a.note) for a in db.read(engine, queries.actions_of, job_id)]


def flash(response: Response) -> str:
    assert response.status_code == 303, response.text
    return flash_of(response)


def listed(page: Response) -> list[str]:
    assert page.status_code == 200, page.text
    return re.findall(r'<tr data-job="([0-9a-f-]+)"', page.text)


# who may act


@pytest.mark.parametrize("path", ["/ui/jobs/{id}/cancel", "/ui/jobs/{id}/requeue", "/ui/requeue"])
def test_only_an_operator_can_post_an_action(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock, path: str
) -> None:
    job_id = ended(engine, clock, permanent=False)
    tenant = issue_token(settings.auth_secret, tenant="acme", user="alice")
    before = every_row(engine)
    form = {"state": "dead", "confirm": "yes"}

    anonymous = client.post(path.format(id=job_id), data=form)
    not_operator = client.post(
        path.format(id=job_id), data=form, headers={"Authorization": f"Bearer {tenant}"}
    )

    assert (anonymous.status_code, not_operator.status_code) == (401, 404)
    assert every_row(engine) == before


# one job


def test_cancel_from_the_dashboard_cancels_and_records_the_operator(
    client: TestClient, engine: Engine, ops: dict[str, str]
) -> None:
    job_id = new_job(engine, intake.new_id())
    back = f"/ui/jobs/{job_id}"

    said = flash(client.post(f"/ui/jobs/{job_id}/cancel", data={"back": back, "note": "dup"}, headers=ops))

    assert f"Job {job_id} cancelled: now cancelled" in said
    assert job_row(engine, job_id).state is State.CANCELLED
    assert recorded(engine, job_id) == [("cancel", OPERATOR, "dup")]


def test_requeue_and_resolve_record_the_operator_and_the_note(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    failed, lost = ended(engine, clock, permanent=True), unknown(engine, clock)

    requeued = flash(client.post(f"/ui/jobs/{failed}/requeue", data={"note": "input fixed"}, headers=ops))
    resolved = flash(
        client.post(f"/ui/jobs/{lost}/resolve", data={"outcome": "succeeded", "note": "msg-7"}, headers=ops)
    )

    assert "now queued" in requeued and "now succeeded" in resolved
    assert recorded(engine, failed) == [("requeue", OPERATOR, "input fixed")]
    assert recorded(engine, lost) == [("resolve_succeeded", OPERATOR, "msg-7")]


def test_cancel_of_a_finished_job_is_refused_in_the_flash(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    job_id = ended(engine, clock, permanent=True)
    before = every_row(engine)
    said = flash(client.post(f"/ui/jobs/{job_id}/cancel", data={}, headers=ops))
    assert f"Not cancelled: job {job_id} is failed: cannot cancel" in said
    assert every_row(engine) == before


def test_the_job_page_shows_input_attempts_actions_and_the_resolution_note(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    lost = unknown(engine, clock)
    client.post(
        f"/ui/jobs/{lost}/resolve", data={"outcome": "succeeded", "note": "provider msg-7"}, headers=ops
    )

    page = client.get(f"/ui/jobs/{lost}", headers=ops)

    assert page.status_code == 200
    assert job_row(engine, lost).operation_key in page.text
    assert "a@example.com" in page.text, "the payload is shown"
    assert 'data-action-row="resolve_succeeded"' in page.text and OPERATOR in page.text
    assert "resolved as succeeded by" in page.text and "provider msg-7" in page.text
    assert 'data-field="error"' not in page.text, "a resolved success shows its note, not an error"
    assert "lost" in page.text or "unknown" in page.text, "the attempt and its outcome are listed"


def test_the_job_page_tells_apart_attempts_made_within_the_same_second(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    job_id = new_job(engine, intake.new_id())
    for _ in range(2):  # two attempts: attempt ids are time-ordered, so they begin alike
        held = claimed(engine, job_id)
        db.transact(
            engine, fenced.fail, job_id, held.epoch, held.attempt_id, code="boom", message="again",
            permanent=False, now=clock.now(), backoff=Backoff(0.0, 0.0),
        )  # fmt: skip
    ids = [a.id for a in db.read(engine, queries.attempts_of, job_id)]

    page = client.get(f"/ui/jobs/{job_id}", headers=ops)

    shown = re.findall(r'data-attempt="[^"]+">([^<]+)<', page.text)
    assert ids[0][:8] == ids[1][:8], "the case this is about"
    assert len(shown) == 2 and len(set(shown)) == 2, shown


def test_the_job_page_links_a_committed_result_the_operator_can_open(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    job_id = new_job(engine, intake.new_id(), tenant="globex")
    held = claimed(engine, job_id)
    db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {"answer": 42}, clock.now())

    page = client.get(f"/ui/jobs/{job_id}", headers=ops)
    result = client.get(f"/ui/jobs/{job_id}/result", headers=ops)

    assert f'href="/ui/jobs/{job_id}/result"' in page.text
    assert (result.status_code, result.json()) == (200, {"answer": 42})
    assert client.get(f"/ui/jobs/{new_job(engine, 'waiting')}/result", headers=ops).status_code == 404


def test_the_job_page_shows_when_a_job_may_start_and_how_far_it_has_got(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    delayed = db.transact(
        engine, intake.accept, tenant="acme", owner="alice", kind="noop", payload={}, operation_key="later",
        now=clock.now(), max_attempts=3, schedule=Schedule(delay_seconds=10),
    ).job.id  # fmt: skip
    running = new_job(engine, "running", kind="export", payload={"rows": 100, "chunk": 10})
    held = claimed(engine, running)
    db.transact(
        engine, fenced.save_checkpoint, running, held.epoch, {"rows_written": 40, "rows": 100}, clock.now()
    )
    clock.advance(12)

    def field(job_id: str, name: str) -> str:
        page = client.get(f"/ui/jobs/{job_id}", headers=ops)
        assert page.status_code == 200, page.text
        found = re.search(rf'data-field="{name}">(.*?)</td>', page.text, re.S)
        assert found, f"no {name} on the page"
        return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())

    assert field(delayed, "run-at") == clock_iso(clock.now() - 2)
    assert field(delayed, "progress") == "- queued, waited 2.0 s"
    assert field(running, "run-at") == "at once"
    assert field(running, "progress") == "40 of 100"


# many jobs


def test_the_jobs_page_filters_by_state_kind_tenant_id_and_time(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    old = ended(engine, clock, permanent=False, kind="export", payload={"rows": 1, "chunk": 1})
    clock.advance(7200)
    dead = ended(engine, clock, permanent=False, kind="export", payload={"rows": 1, "chunk": 1})
    other_tenant = ended(engine, clock, permanent=False, tenant="globex")
    queued = new_job(engine, intake.new_id())

    assert set(listed(client.get("/ui/jobs", headers=ops))) == {old, dead, other_tenant, queued}
    assert set(listed(client.get("/ui/jobs?state=dead", headers=ops))) == {old, dead, other_tenant}
    assert listed(client.get("/ui/jobs?state=dead&kind=export&since=1h", headers=ops)) == [dead]
    assert listed(client.get("/ui/jobs?tenant=globex", headers=ops)) == [other_tenant]
    assert listed(client.get(f"/ui/jobs?id={queued[:8].upper()}", headers=ops)) == [queued]
    bad = client.get("/ui/jobs?since=yesterday", headers=ops)
    assert listed(bad) == [] and 'id="filter-error"' in bad.text, "a bad filter lists nothing, not everything"


def test_the_jobs_page_pages_through_every_match_once(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    ids = set()
    for _ in range(5):
        ids.add(new_job(engine, intake.new_id()))
        clock.advance(1)
    seen: list[str] = []
    url: str | None = "/ui/jobs?state=queued&limit=2"
    while url is not None:
        page = client.get(url.replace("&amp;", "&"), headers=ops)
        seen += listed(page)
        found = re.search(r'href="([^"]+)" id="next-page"', page.text)
        url = found.group(1) if found else None
    assert len(seen) == 5 and set(seen) == ids


def test_requeue_many_shows_the_count_and_the_jobs_first_and_changes_nothing_until_confirmed(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    dead = sorted(ended(engine, clock, permanent=False) for _ in range(3))
    failed = ended(engine, clock, permanent=True)
    form = {"state": "dead", "kind": "noop", "back": "/ui/jobs?state=dead"}
    before = every_row(engine)

    confirm = client.post("/ui/requeue", data=form, headers=ops)

    assert confirm.status_code == 200
    assert re.search(r'data-figure="matching">3<', confirm.text), confirm.text
    assert sorted(re.findall(r'<tr data-job="([^"]+)">', confirm.text)) == dead, "the jobs it would requeue"
    assert 'id="preview-more"' not in confirm.text
    assert 'name="confirm" value="yes"' in confirm.text
    assert every_row(engine) == before
    said = flash(
        client.post(
            "/ui/requeue", data={**form, "confirm": "yes", "expected": "3", "note": "ok"}, headers=ops
        )
    )
    assert said == "ok:Requeued 3 jobs."
    for job_id in dead:
        assert job_row(engine, job_id).state is State.QUEUED
        assert recorded(engine, job_id) == [("requeue", OPERATOR, "ok")]
    assert job_row(engine, failed).state is State.FAILED and recorded(engine, failed) == []


def test_requeue_many_moves_nothing_when_the_count_changed_since_confirmed_and_asks_again(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    ended(engine, clock, permanent=False)
    before = every_row(engine)
    form = {"state": "dead", "confirm": "yes", "expected": "2"}
    again = client.post("/ui/requeue", data=form, headers=ops)
    assert again.status_code == 200
    assert "1 jobs match now, not the 2 you confirmed; nothing was requeued." in again.text
    assert re.search(r'data-figure="matching">1<', again.text)
    assert 'name="expected" value="1"' in again.text
    assert every_row(engine) == before


def test_requeue_many_of_unknown_jobs_needs_the_effect_confirmed(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    job_id = unknown(engine, clock)
    form = {"state": "unknown", "confirm": "yes", "expected": "1"}
    asked = client.post("/ui/requeue", data=form, headers=ops)
    assert 'name="effect_may_repeat"' in asked.text and "will happen again" in asked.text
    assert job_row(engine, job_id).state is State.UNKNOWN
    said = flash(client.post("/ui/requeue", data={**form, "effect_may_repeat": "yes"}, headers=ops))
    assert said == "ok:Requeued 1 job."
    assert job_row(engine, job_id).state is State.QUEUED


def test_requeue_of_one_unknown_job_needs_the_effect_confirmed(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str]
) -> None:
    job_id = unknown(engine, clock)
    page = client.get(f"/ui/jobs/{job_id}", headers=ops)
    assert 'name="effect_may_repeat"' in page.text
    said = flash(client.post(f"/ui/jobs/{job_id}/requeue", data={}, headers=ops))
    assert said.startswith("error:Not requeued:") and "external effect may happen again" in said
    assert job_row(engine, job_id).state is State.UNKNOWN and recorded(engine, job_id) == []
    said = flash(client.post(f"/ui/jobs/{job_id}/requeue", data={"effect_may_repeat": "yes"}, headers=ops))
    assert said.startswith("ok:") and job_row(engine, job_id).state is State.QUEUED


@pytest.mark.parametrize("state", ["", "queued", "succeeded", "bogus"])
def test_requeue_many_of_a_state_requeue_does_not_take_changes_nothing(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str], state: str
) -> None:
    ended(engine, clock, permanent=False)
    new_job(engine, intake.new_id())
    before = every_row(engine)
    said = flash(client.post("/ui/requeue", data={"state": state, "confirm": "yes"}, headers=ops))
    assert "Filter on failed, dead or unknown jobs" in said
    assert every_row(engine) == before


# the form's size


@pytest.mark.parametrize("path", ["/ui/jobs/{id}/cancel", "/ui/requeue"])
def test_a_form_over_the_limit_gets_413_and_is_never_read_as_an_empty_form(
    client: TestClient, engine: Engine, clock: FakeClock, ops: dict[str, str], path: str
) -> None:
    job_id = new_job(engine, intake.new_id())
    dead = ended(engine, clock, permanent=False)
    before = every_row(engine)
    form = {"state": "dead", "confirm": "yes", "expected": "1", "note": "x" * MAX_FORM_BYTES}
    answer = client.post(path.format(id=job_id), data=form, headers=ops)
    assert answer.status_code == 413
    assert "text/html" in answer.headers["content-type"]
    assert f"larger than {MAX_FORM_BYTES // 1024} KB" in answer.text and "Nothing was changed" in answer.text
    assert every_row(engine) == before
    assert (job_row(engine, job_id).state, job_row(engine, dead).state) == (State.QUEUED, State.DEAD)


def test_a_form_at_the_limit_is_read(client: TestClient, engine: Engine, ops: dict[str, str]) -> None:
    job_id = new_job(engine, intake.new_id())
    body = "back=/ui&note="
    body += "x" * (MAX_FORM_BYTES - len(body))
    answer = client.post(
        f"/ui/jobs/{job_id}/cancel",
        content=body,
        headers={**ops, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert "Keep the note to 500 characters" in flash(answer)
    assert job_row(engine, job_id).state is State.QUEUED


def test_a_form_streamed_without_a_length_is_refused_once_it_passes_the_limit(
    client: TestClient, engine: Engine, ops: dict[str, str]
) -> None:
    job_id = new_job(engine, intake.new_id())
    chunks = [b"back=/ui&note=", *([b"x" * 1024] * 20)]
    answer = client.post(
        f"/ui/jobs/{job_id}/cancel",
        content=iter(chunks),
        headers={**ops, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 413
    assert job_row(engine, job_id).state is State.QUEUED
