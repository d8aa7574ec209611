"""The notify kind's order of effects and payload, against an in-memory context and provider."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from outbox_bridge.handlers.base import Cancelled, LeaseLost
from outbox_bridge.handlers.notify import NotifyPayload, ProviderReceipt, send_notification

PAYLOAD = NotifyPayload(to="ops@example.com", message="disk almost full")


@dataclass
class Journal:
    events: list[str] = field(default_factory=list)


@dataclass
class FakeContext:
    journal: Journal
    fenced: bool = False
    cancel_requested: bool = False
    job_id: str = "job-1"
    attempt_id: str = "attempt-1"
    epoch: int = 2
    attempts: int = 2
    tenant: str = "acme"
    owner: str = "alice"
    operation_key: str = "key-1"
    results_dir: Path = Path("results")
    checkpoint: dict[str, Any] | None = None

    def remaining_seconds(self) -> float | None:
        return None

    def check_cancel(self) -> None:
        if self.cancel_requested:
            raise Cancelled(self.job_id)

    def save_checkpoint(self, data: dict[str, Any]) -> None:
        raise AssertionError("notify keeps no checkpoint")

    def mark_external_started(self) -> None:
        if self.fenced:
            raise LeaseLost(self.job_id)
        self.journal.events.append("marked")

    def record_execution(self, event: str, **fields: Any) -> None:
        pass


@dataclass
class RecordingProvider:
    journal: Journal
    calls: list[dict[str, Any]] = field(default_factory=list)

    def send(self, **call: Any) -> ProviderReceipt:
        self.journal.events.append("sent")
        self.calls.append(call)
        return ProviderReceipt("msg-1", duplicate=False)


def test_the_external_effect_is_marked_before_the_provider_is_called() -> None:
    journal = Journal()
    provider = RecordingProvider(journal)
    output = send_notification(FakeContext(journal), PAYLOAD, provider)
    assert journal.events == ["marked", "sent"]
    assert output == {"provider_message_id": "msg-1", "operation_key": "key-1", "duplicate": False}


def test_the_provider_gets_the_jobs_operation_key_and_the_message() -> None:
    provider = RecordingProvider(Journal())
    send_notification(FakeContext(provider.journal), PAYLOAD, provider)
    assert provider.calls == [
        {
            "tenant": "acme",
            "operation_key": "key-1",
            "job_id": "job-1",
            "epoch": 2,
            "to": "ops@example.com",
            "message": "disk almost full",
        }
    ]


def test_a_fenced_mark_means_the_provider_is_never_called() -> None:
    journal = Journal()
    provider = RecordingProvider(journal)
    with pytest.raises(LeaseLost):
        send_notification(FakeContext(journal, fenced=True), PAYLOAD, provider)
    assert provider.calls == [] and journal.events == []


def test_a_cancel_requested_before_the_call_stops_it_before_anything_is_marked() -> None:
    journal = Journal()
    with pytest.raises(Cancelled):
        send_notification(FakeContext(journal, cancel_requested=True), PAYLOAD, RecordingProvider(journal))
    assert journal.events == []


@pytest.mark.parametrize("to", ["ops@example.com", "a.b+tag@mail.example.co.uk", "x@y.z"])
def test_email_like_addresses_are_accepted(to: str) -> None:
    assert NotifyPayload(to=to, message="hi").to == to


@pytest.mark.parametrize(
    "payload",
    [
        {"to": "not-an-address", "message": "hi"},
        {"to": "two@@example.com", "message": "hi"},
        {"to": "space @example.com", "message": "hi"},
        {"to": "nodot@localhost", "message": "hi"},
        {"to": "a@" + "b" * 320 + ".com", "message": "hi"},
        {"to": "ops@example.com", "message": ""},
        {"to": "ops@example.com", "message": "x" * 2_001},
        {"to": "ops@example.com"},
        {"to": "ops@example.com", "message": "hi", "cc": "boss@example.com"},
    ],
)
def test_bad_notify_payloads_are_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        NotifyPayload.model_validate(payload)
