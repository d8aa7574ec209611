"""The dashboard's webhooks page: the endpoints without their secrets, the deliveries newest first (of all
endpoints, or of one), and the replay of a delivered or failed delivery, recorded with the operator token's
`sub`; a pending one, or a visitor who is no operator, is refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, intake
from outbox_bridge.jobstore.schema import webhook_actions
from outbox_bridge.jobstore.webhook_deliveries import Attempted, Decision, record_attempt
from outbox_bridge.jobstore.webhooks import DeliveryState, get_delivery
from tests.support.store import claimed, new_job
from tests.support.webhooks import add_endpoint, deliveries

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
    assert db.transact(
        engine, record_attempt, delivery, sent, Decision(DeliveryState.DELIVERED, delivery.next_attempt_at)
    )
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
