"""The relay's webhook sender against a receiver on 127.0.0.1: CloudEvents bodies signed as Standard Webhooks
say (checked by the specification's algorithm, written in the test), the same `webhook-id` on every retry
with each attempt logged, no redirect followed, a hanging endpoint that delays no other, a retry window that
ends in `failed`, and a replay under the same id."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, update

from outbox_bridge.api.schemas import view_fields
from outbox_bridge.core import clock, destinations
from outbox_bridge.core.sealing import Sealer
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, webhooks
from outbox_bridge.jobstore.schema import webhook_endpoints
from outbox_bridge.jobstore.webhooks import DeliveryState
from outbox_bridge.relay.webhook_sender import WebhookSender
from outbox_bridge.worker.metrics import registry_for
from tests.support.store import claimed, job_row, new_job
from tests.support.webhooks import add_endpoint, attempt_rows, deliveries, receiver, verify

FAST = {
    "webhook_poll_seconds": 0.02,
    "webhook_backoff_base_seconds": 0.05,
    "webhook_backoff_max_seconds": 0.2,
    "webhook_timeout_seconds": 1.0,
    "webhook_senders": 6,
    "webhook_max_in_flight_per_endpoint": 2,
    "webhook_allow_private": True,  # the receiver is on 127.0.0.1
}


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(**FAST)


@contextmanager
def sending(
    settings: Settings, engine: Engine, holds_role: Callable[[], bool] = lambda: True
) -> Iterator[None]:
    sender = WebhookSender(settings, engine, holds_role)
    sender.start()
    try:
        yield
    finally:
        sender.stop(wait=0.5)


def finished_job(engine: Engine, tenant: str = "acme", key: str = "k") -> str:
    """A job of `tenant` that succeeded, its deliveries written."""
    held = claimed(engine, new_job(engine, key, tenant=tenant, payload={"secret": "not for receivers"}))
    db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, {"n": 1}, clock.now())
    return held.job_id


def wait_until(check: Callable[[], bool], timeout: float = 4.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.01)


def always(status: int | None) -> Callable[[str, int], int | None]:
    return lambda _path, _count: status


def test_a_finished_job_is_delivered_once_as_a_signed_cloud_event(engine: Engine, settings: Settings) -> None:
    with receiver(always(204)) as got:
        endpoint, secret = add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        add_endpoint(engine, settings, "globex", f"{got.url}/globex")
        job_id = finished_job(engine)
        with sending(settings, engine):
            (request,) = got.wait_for("/hook")
            wait_until(lambda: deliveries(engine)[0].state is DeliveryState.DELIVERED)
            time.sleep(0.1)  # a second send would come now
        assert len(got.on("/hook")) == 1 and got.on("/globex") == []

    (delivery,) = deliveries(engine)
    assert request.headers["content-type"] == "application/cloudevents+json"
    assert request.headers["webhook-id"] == delivery.id
    assert verify(secret, request.headers, request.body)
    assert not verify(secret, request.headers, request.body.replace(b"succeeded", b"failed"))
    event = request.event()
    assert {k: event[k] for k in ("specversion", "id", "type", "subject")} == {
        "specversion": "1.0",
        "id": delivery.id,
        "type": "outbox_bridge.job.succeeded",
        "subject": job_id,
    }
    assert event["source"] and event["time"] == clock.isoformat(delivery.occurred_at)
    view = view_fields(job_row(engine, job_id))
    assert set(event["data"]) == set(view) and "payload" not in event["data"]
    assert event["data"]["id"] == job_id and event["data"]["state"] == "succeeded"
    assert event["data"]["result_url"].startswith(f"/jobs/{job_id}/result?expires=")
    assert b"not for receivers" not in request.body
    (attempt,) = attempt_rows(engine, delivery.id)
    assert attempt["status_code"] == 204 and attempt["error"] is None
    assert endpoint.id == delivery.endpoint_id and delivery.delivered_at is not None


def test_during_a_rotation_grace_both_secrets_verify_and_after_it_only_the_new_one(
    engine: Engine, settings: Settings
) -> None:
    with receiver(always(200)) as got:
        endpoint, old = add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        sealer = Sealer.of(settings.auth_secret)
        _, new = db.transact(
            engine, webhooks.rotate_secret, sealer, endpoint.id, clock.now(), grace=3600, actor="op"
        )
        finished_job(engine, key="during")
        with sending(settings, engine):
            (during,) = got.wait_for("/hook")
            assert len(during.headers["webhook-signature"].split(" ")) == 2
            assert verify(old, during.headers, during.body) and verify(new, during.headers, during.body)
            db.transact(
                engine,
                lambda conn: conn.execute(
                    update(webhook_endpoints).values(previous_secret_until=clock.now() - 1)
                ),
            )
            finished_job(engine, key="after")
            after = got.wait_for("/hook", 2)[1]
    assert verify(new, after.headers, after.body)
    assert not verify(old, after.headers, after.body)


def test_a_refused_delivery_is_sent_again_with_the_same_webhook_id_and_each_attempt_logged(
    engine: Engine, settings: Settings
) -> None:
    with receiver(lambda _path, count: 500 if count == 1 else 200) as got:
        add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        finished_job(engine)
        with sending(settings, engine):
            first, second = got.wait_for("/hook", 2)
            wait_until(lambda: deliveries(engine)[0].state is DeliveryState.DELIVERED)

    (delivery,) = deliveries(engine)
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == delivery.id
    # The same event; only the view's fresh result link differs from one send to the next.
    unlinked = [
        {**r.event(), "data": {**r.event()["data"], "result_url": None, "result_expires_at": None}}
        for r in (first, second)
    ]
    assert unlinked[0] == unlinked[1]
    attempts = attempt_rows(engine, delivery.id)
    assert [(a["attempt"], a["status_code"]) for a in attempts] == [(1, 500), (2, 200)]
    assert attempts[0]["error"] == "HTTP 500" and attempts[0]["latency_ms"] >= 0
    assert delivery.attempts == 2 and delivery.last_status == 200


def test_a_hanging_endpoint_does_not_delay_another_endpoints_delivery(
    engine: Engine, settings: Settings
) -> None:
    with receiver(lambda path, _count: None if path == "/slow" else 200) as got:
        add_endpoint(engine, settings, "acme", f"{got.url}/slow")
        for n in range(5):  # more than its bound of requests in flight
            finished_job(engine, key=f"slow-{n}")
        with sending(settings, engine):
            got.wait_for("/slow", settings.webhook_max_in_flight_per_endpoint)
            add_endpoint(engine, settings, "acme", f"{got.url}/fast")
            started = time.monotonic()
            finished_job(engine, key="fast")
            got.wait_for("/fast", timeout=2.0)
            took = time.monotonic() - started
            slow = len(got.on("/slow"))
    assert took < 1.0, f"the fast endpoint waited {took:.2f}s"
    assert slow == settings.webhook_max_in_flight_per_endpoint


def test_a_redirect_is_an_answer_not_followed(engine: Engine, settings: Settings) -> None:
    with receiver(lambda path, _count: 302 if path == "/hook" else 200) as got:
        add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        finished_job(engine)
        with sending(settings, engine):
            got.wait_for("/hook", 2)  # retried, as any refusal is
        assert got.on("/elsewhere") == []
    (delivery,) = deliveries(engine)
    assert delivery.last_status == 302 and "not followed" in (delivery.last_error or "")


def test_a_delivery_refused_past_its_retry_window_fails_and_a_replay_sends_it_again_under_its_id(
    engine: Engine, settings_factory: Callable[..., Settings]
) -> None:
    settings = settings_factory(**FAST | {"webhook_retry_seconds": 0.5})
    answers = {"status": 500}
    with receiver(lambda _path, _count: answers["status"]) as got:
        add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        finished_job(engine)
        with sending(settings, engine):
            wait_until(lambda: deliveries(engine)[0].state is DeliveryState.FAILED)
            failed = deliveries(engine)[0]
            answers["status"] = 200
            db.transact(engine, webhooks.replay, failed.id, clock.now(), actor="op")
            wait_until(lambda: deliveries(engine)[0].state is DeliveryState.DELIVERED)
        ids = {r.headers["webhook-id"] for r in got.on("/hook")}
    assert ids == {failed.id}
    assert failed.attempts >= 1 and failed.last_status == 500 and failed.next_attempt_at
    assert [a["status_code"] for a in attempt_rows(engine, failed.id)][-1] == 200


def test_a_relay_without_the_role_sends_nothing(engine: Engine, settings: Settings) -> None:
    with receiver(always(200)) as got:
        add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        finished_job(engine)
        with sending(settings, engine, holds_role=lambda: False):
            time.sleep(0.2)
        assert got.on("/hook") == []
    assert deliveries(engine)[0].state is DeliveryState.PENDING


def test_a_secret_sealed_under_another_auth_secret_is_logged_as_such_and_not_sent(
    engine: Engine, settings: Settings, settings_factory: Callable[..., Settings]
) -> None:
    with receiver(always(200)) as got:
        add_endpoint(engine, settings, "acme", f"{got.url}/hook")
        finished_job(engine)
        changed = settings_factory(**FAST | {"auth_secret": "another-secret-that-is-long-enough-for-it"})
        with sending(changed, engine):
            wait_until(lambda: deliveries(engine)[0].attempts >= 1)
        assert got.on("/hook") == []
    (delivery,) = deliveries(engine)
    assert "AUTH_SECRET" in (delivery.last_error or "") and "webhooks rotate" in (delivery.last_error or "")


def test_the_relays_metrics_count_attempts_by_outcome_and_show_the_oldest_pending_age_per_endpoint(
    engine: Engine, settings: Settings
) -> None:
    registry = registry_for(engine, settings, "relay")

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    before = {o: sample("outbox_bridge_webhook_attempts_total", outcome=o) for o in ("delivered", "retry")}
    requests_before = sample("outbox_bridge_webhook_request_seconds_count")
    with receiver(lambda path, _count: 500 if path == "/refusing" else 200) as got:
        refusing, _ = add_endpoint(engine, settings, "acme", f"{got.url}/refusing")
        answering, _ = add_endpoint(engine, settings, "acme", f"{got.url}/answering")
        finished_job(engine)
        with sending(settings, engine):
            got.wait_for("/refusing", 2)
            got.wait_for("/answering")
            delivered = "outbox_bridge_webhook_attempts_total"
            wait_until(lambda: sample(delivered, outcome="delivered") > before["delivered"])

    assert sample("outbox_bridge_webhook_attempts_total", outcome="retry") >= before["retry"] + 2
    assert sample("outbox_bridge_webhook_request_seconds_count") >= requests_before + 3
    pending_age = sample("outbox_bridge_webhook_oldest_pending_age_seconds", endpoint=refusing.id)
    assert pending_age > 0
    assert (
        registry.get_sample_value(
            "outbox_bridge_webhook_oldest_pending_age_seconds", {"endpoint": answering.id}
        )
        is None
    )


def test_a_tenants_hanging_endpoints_hold_at_most_its_share_and_another_tenant_is_delivered_meanwhile(
    engine: Engine, settings_factory: Callable[..., Settings]
) -> None:
    # 6 senders, 2 per endpoint, a tenant's share 4: acme's four hanging endpoints alone could hold 8.
    settings = settings_factory(**FAST | {"webhook_timeout_seconds": 30.0, "webhook_tenant_share": 0.75})
    with receiver(lambda path, _count: None if path.startswith("/acme") else 204) as got:
        for n in range(4):
            add_endpoint(engine, settings, "acme", f"{got.url}/acme-{n}")
        for n in range(3):
            finished_job(engine, key=f"acme-{n}")
        add_endpoint(engine, settings, "globex", f"{got.url}/globex")
        with sending(settings, engine):
            wait_until(lambda: sum(len(got.on(f"/acme-{n}")) for n in range(4)) >= 4)
            finished_job(engine, tenant="globex", key="globex")
            got.wait_for("/globex")
            hanging = sum(len(got.on(f"/acme-{n}")) for n in range(4))
    assert hanging == 4, "acme's requests held more than its share of the senders"
    assert [d.state for d in deliveries(engine) if d.tenant == "globex"] == [DeliveryState.DELIVERED]


def test_a_name_that_resolves_to_a_private_address_at_delivery_is_refused_at_connect_and_retried(
    engine: Engine, settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_factory(**FAST | {"webhook_allow_private": False})
    with receiver(always(204)) as got:
        url = f"http://hooks.example.com:{got.url.rsplit(':', 1)[1]}/hook"
        monkeypatch.setattr(destinations, "resolve", lambda host, port: ["93.184.216.34"])
        assert webhooks.check_target(url, allow_private=False) == url  # public when registered
        add_endpoint(engine, settings, "acme", url)
        monkeypatch.setattr(destinations, "resolve", lambda host, port: ["127.0.0.1"])  # private now
        finished_job(engine)
        with sending(settings, engine):
            wait_until(lambda: deliveries(engine)[0].attempts >= 2)
        assert got.received == []
    (delivery,) = deliveries(engine)
    refusal = "refused: 127.0.0.1 is a loopback address; set WEBHOOK_ALLOW_PRIVATE=1 to allow private targets"
    assert delivery.state is DeliveryState.PENDING and delivery.last_error == refusal
    assert [a["error"] for a in attempt_rows(engine, delivery.id)][:2] == [refusal, refusal]


def test_a_disguised_loopback_url_is_refused_at_connect_unless_private_targets_are_allowed(
    engine: Engine, settings_factory: Callable[..., Settings]
) -> None:
    with receiver(always(204)) as got:
        url = f"http://0x7f000001:{got.url.rsplit(':', 1)[1]}/hook"
        add_endpoint(engine, settings_factory(**FAST), "acme", url)  # as a store written before the rule
        finished_job(engine)
        with sending(settings_factory(**FAST | {"webhook_allow_private": False}), engine):
            wait_until(lambda: deliveries(engine)[0].attempts >= 1)
        assert got.received == []
        assert (deliveries(engine)[0].last_error or "").startswith("refused: 127.0.0.1 is a loopback address")
        with sending(settings_factory(**FAST), engine):
            got.wait_for("/hook")
    assert deliveries(engine)[0].state is DeliveryState.DELIVERED
