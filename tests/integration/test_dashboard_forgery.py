"""The dashboard's sign-in is a session of its own, and a form posted under it acts only when it comes from
the dashboard's own page: a page on another origin of the same site (another port, a sibling host) cannot
cancel or requeue anything with the operator's cookie, and a session ended by sign-out opens nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.dashboard.access import SESSION_COOKIE
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import intake
from outbox_bridge.jobstore.schema import dashboard_sessions
from outbox_bridge.jobstore.states import State
from tests.support.store import every_row, job_row, new_job

OWN = "http://testserver"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def token(settings: Settings) -> str:
    return issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)


@pytest.fixture
def browser(settings: Settings, engine: Engine, clock: FakeClock, token: str) -> Iterator[TestClient]:
    """A browser signed in to the dashboard: it holds the session cookie, and sends no Authorization."""
    with TestClient(create_app(settings), follow_redirects=False) as client:
        signed_in = client.post("/ui/login", data={"token": token}, headers={"Origin": OWN})
        assert signed_in.status_code == 303, signed_in.text
        yield client


def csrf_of(client: TestClient) -> str:
    page = client.get("/ui")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert found, "the page's forms carry no CSRF token"
    return found.group(1)


def test_the_cookie_holds_a_session_of_its_own_not_the_token(
    browser: TestClient, engine: Engine, token: str
) -> None:
    secret = browser.cookies.get(SESSION_COOKIE)
    assert secret and secret != token and token not in secret
    with engine.connect() as conn:
        [stored] = conn.execute(select(dashboard_sessions.c.id, dashboard_sessions.c.user)).all()
    assert stored.user == "olga" and secret not in stored.id  # the store keeps a hash of it


def test_a_form_from_the_dashboards_own_page_acts(browser: TestClient, engine: Engine) -> None:
    job_id = new_job(engine, intake.new_id())
    answer = browser.post(
        f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf_of(browser)}, headers={"Origin": OWN}
    )
    assert answer.status_code == 303
    assert job_row(engine, job_id).state is State.CANCELLED


@pytest.mark.parametrize(
    ("headers", "with_csrf"),
    [
        pytest.param({}, False, id="no-csrf-token"),
        pytest.param({"Origin": "http://testserver:18799"}, True, id="another-port"),
        pytest.param({"Origin": "http://evil.testserver"}, True, id="a-sibling-host"),
        pytest.param({"Sec-Fetch-Site": "same-site"}, True, id="fetch-site-same-site"),
        pytest.param({"Sec-Fetch-Site": "cross-site"}, True, id="fetch-site-cross-site"),
        pytest.param({"Content-Type": "text/plain"}, True, id="text-plain-body"),
    ],
)
def test_a_forged_form_under_the_session_changes_nothing(
    browser: TestClient, engine: Engine, clock: FakeClock, headers: dict[str, str], with_csrf: bool
) -> None:
    job_id = new_job(engine, intake.new_id())
    fields = f"back=/ui&note=forged{'&csrf=' + csrf_of(browser) if with_csrf else ''}"
    before = every_row(engine)
    answer = browser.post(
        f"/ui/jobs/{job_id}/cancel", content=fields, headers={"Content-Type": FORM, **headers}
    )
    assert answer.status_code == 403
    assert every_row(engine) == before
    many = browser.post("/ui/requeue", content=fields + "&state=dead&confirm=yes&expected=0", headers={
        "Content-Type": FORM, **headers
    })  # fmt: skip
    assert many.status_code == 403


def test_sign_out_ends_the_session_and_its_cookie_opens_nothing_after(
    browser: TestClient, engine: Engine
) -> None:
    secret = browser.cookies.get(SESSION_COOKIE)
    assert (
        browser.post("/ui/logout", data={"csrf": csrf_of(browser)}, headers={"Origin": OWN}).status_code
        == 303
    )
    browser.cookies.set(SESSION_COOKIE, secret or "", path="/ui")  # a copy of the cookie kept from before
    assert browser.get("/ui").status_code == 401
    job_id = new_job(engine, intake.new_id())
    assert browser.post(f"/ui/jobs/{job_id}/cancel", data={}, headers={"Origin": OWN}).status_code == 401
    assert job_row(engine, job_id).state is State.QUEUED


def test_a_session_ends_when_it_expires(browser: TestClient, clock: FakeClock, settings: Settings) -> None:
    assert browser.get("/ui").status_code == 200
    clock.advance(settings.dashboard_session_seconds + 1)
    assert browser.get("/ui").status_code == 401


def test_a_sign_in_posted_from_another_origin_starts_no_session(
    settings: Settings, engine: Engine, clock: FakeClock, token: str
) -> None:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        answer = client.post("/ui/login", data={"token": token}, headers={"Origin": "http://testserver:1"})
        assert answer.status_code == 403 and SESSION_COOKIE not in answer.cookies
    with engine.connect() as conn:
        assert conn.execute(select(dashboard_sessions)).all() == []


def test_the_bearer_token_as_a_cookie_opens_nothing(
    settings: Settings, engine: Engine, clock: FakeClock, token: str
) -> None:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        client.cookies.set(SESSION_COOKIE, token, path="/ui")
        assert client.get("/ui").status_code == 401
