"""What an attempt at a webhook delivery leads to, as plain values: delivered on a 2xx, pending again after
a full-jitter backoff otherwise, failed once the retry window since its creation (or replay) is over; and
the request it makes: a CloudEvents body and Standard Webhooks headers."""

from __future__ import annotations

import json
import random

import pytest

from outbox_bridge.core.signatures import signature
from outbox_bridge.jobstore.webhook_deliveries import Attempted, RetryPolicy, decide
from outbox_bridge.jobstore.webhooks import EVENTS, DeliveryState, Endpoint, WebhookDelivery, check_events
from outbox_bridge.relay.webhook_request import cloud_event, headers

T0 = 1_700_000_000.0
POLICY = RetryPolicy.of(base=1.0, cap=3600.0, retry_seconds=86400.0)


def a_delivery(**fields: object) -> WebhookDelivery:
    values: dict[str, object] = {
        "id": "d1", "endpoint_id": "e1", "tenant": "acme", "job_id": "j1", "event": "job.dead",
        "occurred_at": T0, "created_at": T0, "state": DeliveryState.PENDING, "attempts": 0,
        "next_attempt_at": T0, "last_status": None, "last_error": None, "delivered_at": None,
        "replayed_at": None,
    }  # fmt: skip
    return WebhookDelivery(**values | fields)  # type: ignore[arg-type]


def answered(status: int | None) -> Attempted:
    return Attempted(at=T0, status_code=status, latency_ms=1.0, error=None if status else "timeout")


@pytest.mark.parametrize("status", [200, 201, 204, 299])
def test_a_2xx_delivers(status: int) -> None:
    assert decide(a_delivery(), answered(status), POLICY, T0 + 1).state is DeliveryState.DELIVERED


@pytest.mark.parametrize("status", [None, 199, 301, 302, 400, 410, 500, 503])
def test_anything_else_is_retried_within_the_window(status: int | None) -> None:
    decision = decide(a_delivery(attempts=3), answered(status), POLICY, T0 + 10)
    assert decision.state is DeliveryState.PENDING
    assert T0 + 10 <= decision.next_attempt_at <= T0 + 10 + 8.0  # the 4th failure: up to 1 s x 2^3


def test_past_the_window_a_failure_fails_for_good() -> None:
    assert decide(a_delivery(), answered(500), POLICY, T0 + 86400).state is DeliveryState.FAILED


def test_a_replay_starts_the_window_again() -> None:
    replayed = a_delivery(replayed_at=T0 + 100_000)
    assert decide(replayed, answered(500), POLICY, T0 + 100_010).state is DeliveryState.PENDING


def test_the_last_retry_is_never_scheduled_past_the_window() -> None:
    decision = decide(a_delivery(attempts=30), answered(500), POLICY, T0 + 86399)
    assert decision.state is DeliveryState.PENDING and decision.next_attempt_at <= T0 + 86400


def test_backoff_is_full_jitter_doubling_to_the_cap() -> None:
    policy = RetryPolicy.of(base=1.0, cap=3600.0, retry_seconds=86400.0, rng=random.Random(7))
    for attempts, ceiling in [(1, 1.0), (2, 2.0), (5, 16.0), (13, 3600.0), (500, 3600.0)]:
        waits = [policy.backoff.seconds(attempts) for _ in range(200)]
        assert all(0.0 <= w <= ceiling for w in waits)
        assert min(waits) < ceiling * 0.1 and max(waits) > ceiling * 0.9  # anywhere from 0 to the ceiling


def test_the_event_is_a_structured_cloud_event_with_the_view_as_data() -> None:
    body = cloud_event(a_delivery(), {"id": "j1", "state": "dead"})
    event = json.loads(body)
    assert event == {
        "specversion": "1.0", "id": "d1", "type": "outbox_bridge.job.dead", "source": "outbox-bridge",
        "subject": "j1", "time": "2023-11-14T22:13:20.000Z", "datacontenttype": "application/json",
        "data": {"id": "j1", "state": "dead"},
    }  # fmt: skip


def test_the_headers_sign_the_body_with_every_key() -> None:
    keys = [bytes(32), bytes(range(32))]
    sent = headers("d1", 1_700_000_001, b"{}", keys)
    assert sent == {
        "content-type": "application/cloudevents+json",
        "webhook-id": "d1",
        "webhook-timestamp": "1700000001",
        "webhook-signature": signature(keys, "d1", 1_700_000_001, b"{}"),
    }


def test_an_endpoint_signs_with_the_previous_secret_during_its_grace_only() -> None:
    endpoint = Endpoint(
        id="e1", tenant="acme", url="https://e.test/", events=EVENTS, secret="new", previous_secret="old",
        previous_secret_until=T0 + 60, created_at=T0, created_by="op",
    )  # fmt: skip
    assert endpoint.sealed_secrets(T0) == ("new", "old")
    assert endpoint.sealed_secrets(T0 + 60) == ("new",)


def test_events_default_to_all_and_keep_their_order() -> None:
    assert check_events([]) == EVENTS
    assert check_events(["job.unknown", "job.succeeded", "job.unknown"]) == ("job.succeeded", "job.unknown")
