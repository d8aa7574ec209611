"""The dashboard's sign-in is a session of its own, and a form posted under it acts only when it comes from
the dashboard's own page: a page on another origin of the same site (another port, a sibling host) cannot
cancel or requeue anything with the operator's cookie, nor show a flash message of its own; a session ended
by sign-out, by its token's expiry or by a change of what verified that token opens nothing; a form over the
size the dashboard reads is refused, never read as an empty one."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from urllib.parse import quote

import jwt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.dashboard.access import FLASH_COOKIE, MAX_FORM_BYTES, SESSION_COOKIE, open_flash
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import intake
from outbox_bridge.jobstore.schema import dashboard_sessions, paused_kinds
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


# a session lasts no longer than what made it


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"auth_secret": "a-new-secret-that-is-long-enough-for-hs256"}, id="AUTH_SECRET"),
        pytest.param({"auth_audience": "outbox-bridge"}, id="AUTH_AUDIENCE"),
    ],
)
def test_a_session_ends_when_what_verified_its_token_changes(
    browser: TestClient, settings: Settings, engine: Engine, changed: dict[str, object]
) -> None:
    job_id = new_job(engine, intake.new_id())
    csrf, secret = csrf_of(browser), browser.cookies.get(SESSION_COOKIE) or ""
    rotated = settings.model_copy(update=changed)
    with TestClient(create_app(rotated), follow_redirects=False) as after:
        after.cookies.set(SESSION_COOKIE, secret, path="/ui")
        assert after.get("/ui").status_code == 401
        cancel = after.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf}, headers={"Origin": OWN})
        pause = after.post("/ui/kinds/export/pause", data={"csrf": csrf}, headers={"Origin": OWN})
        assert (cancel.status_code, pause.status_code) == (401, 401)
    assert job_row(engine, job_id).state is State.QUEUED
    with engine.connect() as conn:
        assert conn.execute(select(paused_kinds)).all() == []


def test_a_session_made_from_a_short_token_ends_at_the_tokens_exp(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    clock.set(time.time())  # the token's exp is wall-clock time
    short = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True, ttl_seconds=60)
    exp = jwt.decode(short, options={"verify_signature": False})["exp"]
    with TestClient(create_app(settings), follow_redirects=False) as client:
        assert client.post("/ui/login", data={"token": short}, headers={"Origin": OWN}).status_code == 303
        clock.set(exp - 1)
        assert client.get("/ui").status_code == 200
        clock.set(exp)
        assert client.get("/ui").status_code == 401


# the flash message


def test_a_flash_planted_from_another_port_is_not_shown(browser: TestClient) -> None:
    planted = quote("error:Your session expired: sign in again at http://testserver:18799/", safe="")
    browser.cookies.set(FLASH_COOKIE, planted, path="/ui")  # cookies do not keep ports apart
    page = browser.get("/ui")
    assert page.status_code == 200
    assert "18799" not in page.text and 'id="flash"' not in page.text


def test_an_altered_flash_is_not_shown(browser: TestClient, settings: Settings, engine: Engine) -> None:
    job_id = new_job(engine, intake.new_id())
    acted = browser.post(
        f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf_of(browser)}, headers={"Origin": OWN}
    )
    signed = acted.cookies.get(FLASH_COOKIE) or ""
    said = open_flash(settings, signed)
    assert said is not None and said.text.startswith(f"Job {job_id} cancelled")
    browser.cookies.set(FLASH_COOKIE, signed, path="/ui")
    assert f"Job {job_id} cancelled" in browser.get("/ui").text
    altered = signed.replace("cancelled", "requeued", 1)
    assert altered != signed and open_flash(settings, altered) is None
    browser.cookies.set(FLASH_COOKIE, altered, path="/ui")
    page = browser.get("/ui")
    assert page.status_code == 200 and f"Job {job_id} requeued" not in page.text


# the form's size


def test_a_form_over_the_limit_is_refused_with_413_and_changes_nothing(
    browser: TestClient, engine: Engine
) -> None:
    job_id = new_job(engine, intake.new_id())
    before = every_row(engine)
    form = {"csrf": csrf_of(browser), "note": "x" * MAX_FORM_BYTES}
    answer = browser.post(f"/ui/jobs/{job_id}/cancel", data=form, headers={"Origin": OWN})
    assert answer.status_code == 413
    assert "text/html" in answer.headers["content-type"] and "16 KB" in answer.text
    assert every_row(engine) == before


def test_the_sign_in_page_says_the_cookie_holds_a_session_key_not_the_token(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    with TestClient(create_app(settings)) as client:
        page = client.get("/ui/login").text
    assert "The token is kept" not in page
    assert "never the token" in page


@pytest.mark.parametrize("csrf", ["é" * 64, "\ufffd"], ids=["accented", "replacement-character"])
def test_a_form_whose_csrf_token_is_not_ascii_is_refused_as_forged(
    browser: TestClient, engine: Engine, csrf: str
) -> None:
    job_id = new_job(engine, intake.new_id())
    answer = browser.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf}, headers={"Origin": OWN})
    assert answer.status_code == 403
    assert job_row(engine, job_id).state is State.QUEUED


def test_a_flash_cookie_that_is_not_ascii_is_not_shown(browser: TestClient) -> None:
    session = browser.cookies.get(SESSION_COOKIE)
    cookies = f"{SESSION_COOKIE}={session}; {FLASH_COOKIE}=ok%3Ahello.\u00e9\u00e9".encode()
    browser.cookies.clear()
    page = browser.get("/ui", headers={"Cookie": cookies})  # type: ignore[dict-item]
    assert page.status_code == 200 and 'id="flash"' not in page.text


def test_a_sign_in_over_the_form_limit_gets_413_and_starts_no_session(
    settings: Settings, engine: Engine, clock: FakeClock, token: str
) -> None:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        form = {"token": token, "padding": "x" * MAX_FORM_BYTES}
        answer = client.post("/ui/login", data=form, headers={"Origin": OWN})
        assert answer.status_code == 413 and SESSION_COOKIE not in answer.cookies
    with engine.connect() as conn:
        assert conn.execute(select(dashboard_sessions)).all() == []
