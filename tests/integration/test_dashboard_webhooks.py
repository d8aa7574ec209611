"""The dashboard's webhooks page: the endpoints without their secrets, the deliveries newest first (of all
endpoints, or of one), and the replay of a delivered or failed delivery, recorded with the operator token's
`sub`; a pending one, or a visitor who is no operator, is refused. Endpoints are added, rotated and removed
from it as `outbox-bridge webhooks` does it: a new secret is shown once, on the page answering the form, and
a refused form writes nothing."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import Engine, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.api.dashboard.access import FLASH_COOKIE
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.core.signatures import signature
from outbox_bridge.jobstore import db, fenced, intake
from outbox_bridge.jobstore.schema import webhook_actions, webhook_deliveries, webhook_endpoints
from outbox_bridge.jobstore.webhook_deliveries import Attempted, RetryDecision, record_attempt
from outbox_bridge.jobstore.webhooks import DeliveryState, get_delivery, get_endpoint
from tests.support.store import claimed, new_job
from tests.support.webhooks import add_endpoint, deliveries, verify

OPERATOR = "olga"


@pytest.fixture
def client(settings: Settings, engine: Engine, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as test_client:
        yield test_client


def bearer(settings: Settings, *, operator: bool = True) -> dict[str, str]:
    token = issue_token(settings.auth_secret, tenant="ops", user=OPERATOR, operator=operator)
    return {"Authorization": f"Bearer {token}"}


def finished(engine: Engine, clock: FakeClock) -> str:
    held = claimed(engine, new_job(engine, intake.new_id()))
    db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {}, clock.now())
    return held.job_id


def test_the_page_lists_endpoints_without_secrets_and_their_deliveries(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    one, secret = add_endpoint(engine, settings, "acme", "https://one.example/hook")
    other, _ = add_endpoint(engine, settings, "acme", "https://other.example/hook", ("job.failed",))
    finished(engine, clock)
    (delivery,) = deliveries(engine)

    page = client.get("/ui/webhooks", headers=bearer(settings))
    assert page.status_code == 200
    assert sorted(re.findall(r'data-endpoint="([0-9a-f-]+)"', page.text)) == sorted([one.id, other.id])
    assert re.findall(r'data-delivery="([0-9a-f]+)"', page.text) == [delivery.id]
    assert secret.removeprefix("whsec_") not in page.text and "v1." not in page.text
    theirs = client.get(f"/ui/webhooks?endpoint={other.id}", headers=bearer(settings))
    assert re.findall(r'data-delivery="([0-9a-f]+)"', theirs.text) == []
    assert client.get("/ui/webhooks", headers=bearer(settings, operator=False)).status_code == 404


def test_a_replay_from_the_page_makes_a_delivered_delivery_pending_and_records_who(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    add_endpoint(engine, settings, "acme", "https://one.example/hook")
    finished(engine, clock)
    (delivery,) = deliveries(engine)
    path = f"/ui/webhooks/deliveries/{delivery.id}/replay"

    refused = client.post(path, headers=bearer(settings), data={"back": "/ui/webhooks"})
    assert "still pending" in unquote(refused.cookies.get("outbox_bridge_flash", ""))

    sent = Attempted(at=clock.now(), status_code=200, latency_ms=1.0)
    delivered = RetryDecision(DeliveryState.DELIVERED, delivery.next_attempt_at)
    assert db.transact(engine, record_attempt, delivery, sent, delivered)
    done = client.post(path, headers=bearer(settings), data={"back": "/ui/webhooks"})
    assert done.status_code == 303 and "replayed" in unquote(done.cookies.get("outbox_bridge_flash", ""))
    again = db.read(engine, get_delivery, delivery.id)
    assert again is not None and again.state is DeliveryState.PENDING
    actors = db.read(
        engine,
        lambda c: [tuple(r) for r in c.execute(select(webhook_actions.c.action, webhook_actions.c.actor))],
    )
    assert ("replay", OPERATOR) in actors
    assert client.post(path, data={"back": "/ui/webhooks"}).status_code == 401


# --- endpoints added, rotated and removed from the page ---------------------------------------------------

OWN = "http://testserver"
URL = "https://hooks.example.test/jobs"


def rows(engine: Engine, table: Any) -> list[dict[str, Any]]:
    return db.read(engine, lambda conn: [dict(r) for r in conn.execute(select(table)).mappings()])


def shown_secret(page: Response) -> str:
    """The secret a page shows once, or a failed test."""
    found = re.search(r'data-field="secret"[^>]*>(whsec_[A-Za-z0-9+/=]+)<', page.text)
    assert found, "the page shows no new secret"
    return found.group(1)


def add(client: TestClient, settings: Settings, **fields: Any) -> Response:
    form = {"tenant": "acme", "url": URL, "event": ["job.succeeded", "job.failed"]} | fields
    return client.post("/ui/webhooks", headers=bearer(settings), data=form)


def flash(answer: Response) -> str:
    return unquote(answer.cookies.get(FLASH_COOKIE, ""))


def test_an_endpoint_added_from_the_page_shows_its_secret_once_and_keeps_it_sealed(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    answer = add(client, settings)
    assert answer.status_code == 200, answer.text
    secret = shown_secret(answer)
    assert "copy the secret now" in answer.text and "shown this once" in answer.text
    assert FLASH_COOKIE not in answer.cookies and "location" not in answer.headers
    assert answer.headers["cache-control"] == "no-store"

    (stored,) = rows(engine, webhook_endpoints)
    assert stored["tenant"] == "acme" and stored["url"] == URL
    assert stored["events"] == "job.succeeded,job.failed" and stored["created_by"] == OPERATOR
    key = base64.b64decode(secret.removeprefix("whsec_"))
    assert Sealer.of(settings.auth_secret).open(str(stored["secret"])) == key
    assert secret.removeprefix("whsec_") not in str(stored["secret"])
    assert [(a["action"], a["actor"]) for a in rows(engine, webhook_actions)] == [("add", OPERATOR)]

    again = client.get("/ui/webhooks", headers=bearer(settings))
    assert again.status_code == 200 and stored["id"] in again.text
    assert secret.removeprefix("whsec_") not in again.text and 'data-field="secret"' not in again.text
    assert str(stored["secret"]) not in again.text and "v1." not in again.text


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        pytest.param({"url": "ftp://hooks.example.test/jobs"}, "only http:// and https://", id="ftp-url"),
        pytest.param({"url": "javascript:alert(1)"}, "only http:// and https://", id="javascript-url"),
        pytest.param({"url": "https://user:pw@hooks.example.test/"}, "credentials", id="credentials"),
        pytest.param({"url": ""}, "only http:// and https://", id="no-url"),
        pytest.param(
            {"event": ["job.succeeded", "job.done"]}, "'job.done' is not one of", id="unknown-event"
        ),
        pytest.param({"event": []}, "tick at least one event", id="no-event"),
        pytest.param({"tenant": ""}, "the tenant must be", id="no-tenant"),
        pytest.param({"tenant": "a tenant"}, "the tenant must be", id="tenant-with-a-space"),
        pytest.param(
            {"url": "http://169.254.169.254/latest/meta-data/"},
            "refused: 169.254.169.254 is a link-local address; set WEBHOOK_ALLOW_PRIVATE=1",
            id="link-local",
        ),
        pytest.param(
            {"url": "http://2130706433/"}, "refused: 127.0.0.1 is a loopback", id="disguised-loopback"
        ),
    ],
)
def test_a_refused_add_says_why_on_the_page_and_writes_nothing(
    client: TestClient, settings: Settings, engine: Engine, fields: dict[str, Any], says: str
) -> None:
    answer = add(client, settings, **fields)
    assert answer.status_code == 400
    error = re.search(r'id="add-error"[^>]*>([^<]*)<', answer.text)
    assert error, answer.text
    said = html.unescape(error.group(1))
    assert said.startswith("Not added: ") and says in said, said
    assert "whsec_" not in answer.text
    assert rows(engine, webhook_endpoints) == [] and rows(engine, webhook_actions) == []
    if fields.get("url"):  # what was typed is in the form again
        assert 'value="' + fields["url"].replace("&", "&amp;") + '"' in answer.text


def test_only_an_operator_adds_rotates_or_removes_an_endpoint(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    endpoint, _ = add_endpoint(engine, settings, "acme", URL)
    before = rows(engine, webhook_endpoints), rows(engine, webhook_actions)
    form = {"tenant": "acme", "url": URL, "event": "job.succeeded", "grace": "1h"}
    for path in (
        "/ui/webhooks",
        f"/ui/webhooks/endpoints/{endpoint.id}/rotate",
        f"/ui/webhooks/endpoints/{endpoint.id}/remove",
    ):
        assert client.post(path, headers=bearer(settings, operator=False), data=form).status_code == 404
        assert client.post(path, data=form).status_code == 401
    assert (rows(engine, webhook_endpoints), rows(engine, webhook_actions)) == before


def test_a_form_posted_under_the_session_without_its_csrf_token_adds_nothing(
    settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    token = issue_token(settings.auth_secret, tenant="ops", user=OPERATOR, operator=True)
    with TestClient(create_app(settings), follow_redirects=False) as browser:
        assert browser.post("/ui/login", data={"token": token}, headers={"Origin": OWN}).status_code == 303
        page = browser.get("/ui/webhooks")
        csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert csrf
        form = {"tenant": "acme", "url": URL, "event": "job.succeeded"}
        assert browser.post("/ui/webhooks", data=form, headers={"Origin": OWN}).status_code == 403
        foreign = {"Origin": "http://evil.testserver"}
        assert (
            browser.post("/ui/webhooks", data=form | {"csrf": csrf.group(1)}, headers=foreign).status_code
            == 403
        )
        assert rows(engine, webhook_endpoints) == []
        made = browser.post("/ui/webhooks", data=form | {"csrf": csrf.group(1)}, headers={"Origin": OWN})
        assert made.status_code == 200 and shown_secret(made)
    (stored,) = rows(engine, webhook_endpoints)
    assert stored["created_by"] == OPERATOR


def test_a_rotation_from_the_page_shows_the_new_secret_once_and_both_sign_during_the_grace(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    old = shown_secret(add(client, settings))
    (stored,) = rows(engine, webhook_endpoints)
    endpoint_id = str(stored["id"])
    path = f"/ui/webhooks/endpoints/{endpoint_id}/rotate"

    answer = client.post(path, headers=bearer(settings), data={"grace": "1h", "back": "/ui/webhooks"})
    assert answer.status_code == 200, answer.text
    new = shown_secret(answer)
    assert new != old and "The previous secret signs too until" in answer.text
    assert FLASH_COOKIE not in answer.cookies
    assert 'action="/ui/webhooks"' in answer.text  # the answer's forms lead to the page, not the rotation

    def sign(now: float) -> dict[str, str]:
        endpoint = db.read(engine, get_endpoint, endpoint_id)
        assert endpoint is not None
        sealer = Sealer.of(settings.auth_secret)
        keys = [sealer.open(sealed) for sealed in endpoint.sealed_secrets(now)]
        timestamp = int(clock.now())
        return {
            "webhook-id": "d1",
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(keys, "d1", timestamp, b"{}"),
        }

    during = sign(clock.now())
    assert verify(old, during, b"{}", tolerance=1e12) and verify(new, during, b"{}", tolerance=1e12)
    after = sign(clock.advance(3601))
    assert verify(new, after, b"{}", tolerance=1e12) and not verify(old, after, b"{}", tolerance=1e12)
    assert new.removeprefix("whsec_") not in client.get("/ui/webhooks", headers=bearer(settings)).text
    actions = [(a["action"], a["actor"]) for a in rows(engine, webhook_actions)]
    assert actions == [("add", OPERATOR), ("rotate", OPERATOR)]

    refused = client.post(path, headers=bearer(settings), data={"grace": "soon", "back": "/ui/webhooks"})
    assert refused.status_code == 303 and "Not rotated: grace" in flash(refused)
    missing = client.post(
        "/ui/webhooks/endpoints/nope/rotate", headers=bearer(settings), data={"grace": "1h"}
    )
    assert missing.status_code == 303 and "no webhook endpoint nope" in flash(missing)
    assert len(rows(engine, webhook_actions)) == 2
    no_grace = client.post(path, headers=bearer(settings), data={"grace": "0"})
    assert "The previous secret no longer signs" in no_grace.text
    (stored,) = rows(engine, webhook_endpoints)
    assert stored["previous_secret"] is None


def test_a_removal_from_the_page_takes_the_endpoint_and_its_deliveries_and_records_who(
    client: TestClient, settings: Settings, engine: Engine, clock: FakeClock
) -> None:
    endpoint, _ = add_endpoint(engine, settings, "acme", URL)
    kept, _ = add_endpoint(engine, settings, "acme", "https://other.example.test/")
    finished(engine, clock)
    assert len(deliveries(engine)) == 2
    back = f"/ui/webhooks?endpoint={endpoint.id}"

    answer = client.post(
        f"/ui/webhooks/endpoints/{endpoint.id}/remove", headers=bearer(settings), data={"back": back}
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/webhooks"
    assert "removed, with its deliveries" in flash(answer)
    assert [r["id"] for r in rows(engine, webhook_endpoints)] == [kept.id]
    assert [r["endpoint_id"] for r in rows(engine, webhook_deliveries)] == [kept.id]
    assert ("remove", OPERATOR) in [(a["action"], a["actor"]) for a in rows(engine, webhook_actions)]
    again = client.post(f"/ui/webhooks/endpoints/{endpoint.id}/remove", headers=bearer(settings), data={})
    assert again.status_code == 303 and "Not removed: no webhook endpoint" in flash(again)
