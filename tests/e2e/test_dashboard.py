"""The operator dashboard, served by a real `outbox-bridge api` process over a real SQLite store whose jobs
were moved into their states by the store's own transitions, and driven in headless Chromium."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, sync_playwright
from sqlalchemy import Connection, Engine, func, select

from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import claiming, db, fenced, intake, operator, pausing, queries, sweeper
from outbox_bridge.jobstore.records import Claim, Job
from outbox_bridge.jobstore.schema import kind_actions, outbox
from outbox_bridge.jobstore.states import State
from tests.conftest import IN_CI
from tests.support import procs
from tests.support.dashboard import flash_of

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WORKER = "seed-worker"
BACKOFF = Backoff(0.05, 0.5)


@dataclass
class Seeded:
    """The jobs put into each state, by id."""

    by_state: dict[State, list[str]]
    finished: int
    accepted_at: float

    def counts(self) -> dict[str, int]:
        return {state.value: len(self.by_state.get(state, [])) for state in State}


def _accept(conn: Connection, key: str, kind: str, payload: dict[str, object], now: float) -> str:
    accepted = intake.accept(
        conn,
        tenant="acme",
        owner="ana",
        kind=kind,
        payload=payload,
        operation_key=key,
        now=now,
        max_attempts=3,
    )
    return accepted.job.id


def _claim(engine: Engine, job_id: str, now: float, lease: float = 600.0) -> Claim:
    result = db.transact(engine, claiming.claim, job_id, WORKER, now, lease)
    assert result.claim is not None, result
    return result.claim


def _fail(engine: Engine, claim: Claim, now: float, *, permanent: bool, code: str) -> State:
    decision = db.transact(
        engine,
        fenced.fail,
        claim.job_id,
        claim.epoch,
        claim.attempt_id,
        code=code,
        message=f"{code} (seeded)",
        permanent=permanent,
        now=now,
        backoff=BACKOFF,
    )
    return decision.state


def seed_store(engine: Engine) -> Seeded:
    """Jobs in every state, each moved there by the transitions a client, a worker or the sweeper runs,
    within the last minute, so every finished one falls inside the dashboard's throughput window."""
    t = time.time() - 60
    by_state: dict[State, list[str]] = {state: [] for state in State}

    def new(state: State, kind: str, payload: dict[str, object]) -> str:
        job_id = db.transact(engine, _accept, f"{state.value}-{len(by_state[state])}", kind, payload, t)
        by_state[state].append(job_id)
        return job_id

    for _ in range(2):
        new(State.QUEUED, "noop", {})
    _claim(engine, new(State.RUNNING, "export", {"rows": 1000, "chunk": 100}), t + 1)
    for _ in range(2):
        c = _claim(engine, new(State.SUCCEEDED, "noop", {}), t + 2)
        db.transact(engine, fenced.complete, c.job_id, c.epoch, c.attempt_id, {"ok": True}, t + 3)
    c = _claim(engine, new(State.FAILED, "document", {"document": ""}), t + 4)
    assert _fail(engine, c, t + 5, permanent=True, code="invalid_payload") is State.FAILED
    db.transact(
        engine, operator.request_cancel, new(State.CANCELLED, "export", {"rows": 9, "chunk": 9}), t + 6
    )
    for _ in range(2):
        _exhaust(engine, new(State.DEAD, "export", {"rows": 5, "chunk": 5}), t + 7)
    for _ in range(2):
        job_id = new(State.UNKNOWN, "notify", {"to": "ops@example.com", "message": "hi"})
        c = _claim(engine, job_id, t + 20, lease=5.0)
        db.transact(engine, fenced.mark_external_started, job_id, c.epoch, c.attempt_id, t + 21)
    settled = db.transact(engine, sweeper.sweep_expired, t + 30, backoff=BACKOFF)
    assert settled == {"unknown": 2}, settled
    finished = sum(len(by_state[s]) for s in State if s not in (State.QUEUED, State.RUNNING))
    return Seeded(by_state, finished, accepted_at=t)


def _exhaust(engine: Engine, job_id: str, start: float) -> None:
    """Three claims, three transient failures: the attempt budget is spent and the job is dead."""
    states = []
    for attempt in range(3):
        c = _claim(engine, job_id, start + 4 * attempt)
        states.append(_fail(engine, c, start + 4 * attempt + 1, permanent=False, code="upstream_timeout"))
    assert states == [State.QUEUED, State.QUEUED, State.DEAD]


def pending_outbox_rows(conn: Connection, now: float) -> int:
    query = select(func.count()).where(outbox.c.published_at.is_(None), outbox.c.available_at <= now)
    return int(conn.execute(query).scalar_one())


def stored(engine: Engine, job_id: str) -> Job:
    job = db.read(engine, queries.get_job, job_id)
    assert job is not None, job_id
    return job


def text(page: Page, selector: str) -> str:
    found = page.text_content(selector)
    assert found is not None, selector
    return found


def attribute(page: Page, selector: str, name: str) -> str:
    found = page.get_attribute(selector, name)
    assert found is not None, (selector, name)
    return found


@pytest.fixture
def seeded(engine: Engine) -> Seeded:
    return seed_store(engine)


@pytest.fixture
def api_url(settings: Settings, engine: Engine, tmp_path: Path) -> Iterator[str]:
    """A real `outbox-bridge api` process on the test's store."""
    port = procs.free_port()
    proc = procs.start(
        ["api", "--host", "127.0.0.1", "--port", str(port)], settings, tmp_path / "logs", "api"
    )
    base = f"http://127.0.0.1:{port}"
    try:
        procs.wait_http(f"{base}/healthz", proc, timeout=30)
        yield base
    finally:
        try:
            proc.terminate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def token(settings: Settings, *, operator: bool) -> str:
    return issue_token(settings.auth_secret, tenant="ops", user="olga", operator=operator)


def test_dashboard_refuses_anyone_without_an_operator_token(
    settings: Settings, engine: Engine, seeded: Seeded, api_url: str
) -> None:
    dead = seeded.by_state[State.DEAD][0]
    with httpx.Client(base_url=api_url, timeout=10) as client:
        anonymous = client.get("/ui")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert 'action="/ui/login"' in anonymous.text
        assert client.get("/ui", headers={"Authorization": "Bearer not-a-token"}).status_code == 401
        forged = issue_token("some-other-secret-that-is-long-enough", tenant="ops", user="x", operator=True)
        assert client.get("/ui", headers={"Authorization": f"Bearer {forged}"}).status_code == 401

        user = {"Authorization": f"Bearer {token(settings, operator=False)}"}
        assert client.get("/ui", headers=user).status_code == 404
        assert client.get(f"/ui/jobs/{dead}", headers=user).status_code == 404
        assert client.post(f"/ui/jobs/{dead}/requeue", headers=user).status_code == 404
        refused_login = client.post("/ui/login", data={"token": token(settings, operator=False)})
        assert refused_login.status_code == 401
        assert "set-cookie" not in refused_login.headers

        operator = {"Authorization": f"Bearer {token(settings, operator=True)}"}
        assert client.get("/ui", headers=operator).status_code == 200
    assert stored(engine, dead).state is State.DEAD


def test_actions_that_cannot_apply_change_nothing_and_say_why(
    settings: Settings, engine: Engine, seeded: Seeded, api_url: str
) -> None:
    unknown, queued = seeded.by_state[State.UNKNOWN][0], seeded.by_state[State.QUEUED][0]
    operator = {"Authorization": f"Bearer {token(settings, operator=True)}"}
    with httpx.Client(base_url=api_url, timeout=10, headers=operator) as client:

        def act(path: str, form: dict[str, str]) -> str:
            answer = client.post(path, data=form)
            assert answer.status_code == 303
            assert answer.headers["location"] == "/ui"
            return flash_of(answer)

        no_note = act(f"/ui/jobs/{unknown}/resolve", {"outcome": "succeeded", "note": " "})
        assert no_note.startswith("error:") and "Say how you know" in no_note
        bad_outcome = act(f"/ui/jobs/{unknown}/resolve", {"outcome": "cancelled", "note": "n"})
        assert bad_outcome.startswith("error:") and "succeeded or failed" in bad_outcome
        not_dead = act(f"/ui/jobs/{queued}/requeue", {"back": "https://elsewhere.example/ui"})
        assert not_dead == f"error:Not requeued: job {queued} is queued: cannot requeue."
        missing = act("/ui/jobs/no-such-job/resolve", {"outcome": "failed", "note": "n", "back": "//x/ui"})
        assert missing == "error:Not resolved: job no-such-job not found."
        assert client.get("/ui/jobs/no-such-job").status_code == 404
    assert stored(engine, unknown).state is State.UNKNOWN
    assert stored(engine, queued).state is State.QUEUED


@pytest.mark.slow
def test_operator_signs_in_sees_the_figures_and_settles_dead_and_unknown_jobs_in_chromium(
    settings: Settings, engine: Engine, seeded: Seeded, api_url: str
) -> None:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(15_000)
            sign_in(page, api_url, token(settings, operator=True))
            read_from = time.time()
            page.goto(f"{api_url}/ui?refresh=0")
            check_figures(page, engine, seeded, read_between=(read_from, time.time()))
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            check_job_page(page, seeded.by_state[State.DEAD][1])
            requeue_dead_job(page, engine, seeded.by_state[State.DEAD][0])
            resolve_unknown_job(page, engine, seeded.by_state[State.UNKNOWN][0])
            page.screenshot(path=str(ARTIFACTS / "dashboard-after-actions.png"), full_page=True)
            page.reload()
            assert page.locator("#flash").count() == 0, "a flash is shown once"
            check_resolved_job_page(page, api_url, seeded.by_state[State.UNKNOWN][0])
            requeue_failed_jobs_after_a_confirmation(page, engine, api_url, seeded.by_state[State.FAILED])
            pause_and_resume_a_kind(page, engine, api_url)
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


def check_resolved_job_page(page: Page, base: str, job_id: str) -> None:
    """A job resolved as succeeded shows who resolved it and their note, not an error."""
    page.goto(f"{base}/ui/jobs/{job_id}")
    assert page.locator('#job [data-field="error"]').count() == 0
    assert "resolved as succeeded by olga" in text(page, '#job [data-field="note"]')
    assert page.locator('#operator-actions tr[data-action-row="resolve_succeeded"]').count() == 1


def requeue_failed_jobs_after_a_confirmation(
    page: Page, engine: Engine, base: str, failed: list[str]
) -> None:
    page.goto(f"{base}/ui/jobs?state=failed")
    assert sorted(attribute(page, f'#results tr[data-job="{j}"]', "data-job") for j in failed) == sorted(
        failed
    )
    with page.expect_navigation():
        page.click('form[data-action="requeue-matching"] button')
    assert text(page, '#confirm [data-figure="matching"]') == str(len(failed))
    assert all(stored(engine, job_id).state is State.FAILED for job_id in failed), "nothing moves before"
    page.fill('form[data-action="confirm-requeue"] input[name=note]', "input fixed upstream")
    with page.expect_navigation():
        page.click('form[data-action="confirm-requeue"] button[type=submit]')
    assert page.url == f"{base}/ui/jobs?state=failed"
    assert f"Requeued {len(failed)} job" in text(page, "#flash")
    for job_id in failed:
        assert stored(engine, job_id).state is State.QUEUED
        [action] = db.read(engine, queries.actions_of, job_id)
        assert (action.action, action.actor, action.note) == ("requeue", "olga", "input fixed upstream")


def pause_and_resume_a_kind(page: Page, engine: Engine, base: str) -> None:
    """The schedules page, reached from the navigation, pauses a kind and resumes it, each recorded with the
    operator and the note."""
    with page.expect_navigation():
        page.click('#nav a[href="/ui/schedules"]')
    row = page.locator('#kinds tr[data-kind="export"]')
    row.locator("input[name=note]").fill("upstream maintenance")
    with page.expect_navigation():
        row.locator('form[data-action="pause-kind"] button').click()
    assert page.url == f"{base}/ui/schedules"
    assert "Kind export paused" in text(page, "#flash")
    assert row.get_attribute("data-paused") == "yes"
    assert [p.kind for p in db.read(engine, pausing.paused)] == ["export"]
    page.screenshot(path=str(ARTIFACTS / "dashboard-schedules.png"), full_page=True)
    with page.expect_navigation():
        row.locator('form[data-action="resume-kind"] button').click()
    assert "Kind export resumed" in text(page, "#flash")
    assert row.get_attribute("data-paused") is None
    recorded = select(kind_actions.c.action, kind_actions.c.actor, kind_actions.c.note).order_by(
        kind_actions.c.at
    )
    assert db.read(engine, lambda conn: [tuple(r) for r in conn.execute(recorded)]) == [
        ("pause", "olga", "upstream maintenance"),
        ("resume", "olga", None),
    ]


def sign_in(page: Page, base: str, operator_token: str) -> None:
    response = page.goto(f"{base}/ui")
    assert response is not None and response.status == 401
    page.fill("#token", operator_token)
    with page.expect_navigation():
        page.click("form[action='/ui/login'] button[type=submit]")
    assert page.url == f"{base}/ui"
    cookie = next(c for c in page.context.cookies() if c["name"] == "outbox_bridge_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.locator("#counts").is_visible()


def check_figures(page: Page, engine: Engine, seeded: Seeded, read_between: tuple[float, float]) -> None:
    shown = {state.value: int(text(page, f'[data-state-count="{state.value}"]')) for state in State}
    assert shown == seeded.counts()
    pending = int(text(page, '[data-figure="outbox-pending"]'))
    assert pending == db.read(engine, pending_outbox_rows, time.time())
    assert pending > 0
    oldest = float(attribute(page, '[data-figure="outbox-oldest-seconds"]', "data-seconds"))
    # The oldest pending rows are those of the jobs still queued, due since they were accepted.
    first, last = (moment - seeded.accepted_at for moment in read_between)
    assert first - 0.1 <= oldest <= last + 0.1, (first, oldest, last)
    bars = page.locator("#throughput svg g[data-count]")
    assert bars.count() == 10
    assert sum(int(bars.nth(i).get_attribute("data-count") or "") for i in range(10)) == seeded.finished
    for state, ids in seeded.by_state.items():
        for job_id in ids:
            row = page.locator(f'#recent tr[data-job="{job_id}"]')
            assert row.locator('[data-field="state"]').inner_text().strip() == state.value
    dead_row = page.locator(f'#recent tr[data-job="{seeded.by_state[State.DEAD][0]}"]')
    assert dead_row.locator('[data-field="attempts"]').inner_text() == "3/3"
    assert dead_row.locator('[data-field="epoch"]').inner_text() == "3"
    for job_id in seeded.by_state[State.DEAD]:
        assert page.locator(f'#dead tr[data-job="{job_id}"]').count() == 1
    for job_id in seeded.by_state[State.UNKNOWN]:
        assert page.locator(f'#unknown tr[data-job="{job_id}"]').count() == 1


def check_job_page(page: Page, job_id: str) -> None:
    """The job's own page lists every attempt with its epoch and outcome; its actions return to it."""
    with page.expect_navigation():
        page.click(f'#dead tr[data-job="{job_id}"] a')
    rows = page.locator("#attempts tbody tr")
    epochs_and_outcomes = [
        tuple(rows.nth(i).locator("td").all_inner_texts()[j] for j in (0, 3)) for i in range(rows.count())
    ]
    assert epochs_and_outcomes == [("1", "retry"), ("2", "retry"), ("3", "dead")]
    back = attribute(page, f'#job form[data-action="requeue"][data-job="{job_id}"] input[name=back]', "value")
    assert back == f"/ui/jobs/{job_id}"
    page.go_back()


def requeue_dead_job(page: Page, engine: Engine, job_id: str) -> None:
    with page.expect_navigation():
        page.click(f'#dead form[data-action="requeue"][data-job="{job_id}"] button')
    assert page.url.endswith("/ui?refresh=0")
    assert f"Job {job_id} requeued: now queued" in text(page, "#flash")
    assert page.locator(f'#dead tr[data-job="{job_id}"]').count() == 0
    job = stored(engine, job_id)
    assert job.state is State.QUEUED and job.attempts == 0 and job.error_code is None


def resolve_unknown_job(page: Page, engine: Engine, job_id: str) -> None:
    note = f"provider log shows delivery {job_id[:8]}"
    form = page.locator(f'#unknown form[data-action="resolve"][data-job="{job_id}"]')
    form.locator("select[name=outcome]").select_option("succeeded")
    form.locator("input[name=note]").fill(note)
    with page.expect_navigation():
        form.locator("button[type=submit]").click()
    assert f"Job {job_id} resolved: now succeeded" in text(page, "#flash")
    assert page.locator(f'#unknown tr[data-job="{job_id}"]').count() == 0
    job = stored(engine, job_id)
    assert (job.state, job.error_code, job.error_message) == (State.SUCCEEDED, None, None)
    [action] = db.read(engine, queries.actions_of, job_id)
    assert (action.action, action.actor, action.note) == ("resolve_succeeded", "olga", note)
