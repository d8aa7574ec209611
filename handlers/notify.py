"""The `notify` kind: one message through an external provider, sent with the job's operation key.

The provider here is a local stub that appends one JSON line per call to `settings.notify_log` and, like
real providers that take an idempotency key, says whether it had seen the key before. The effect is marked
as started (durably, under the fence) before the call: if that write is fenced, the call is not made; if the
lease is lost after it, the job ends `unknown` for an operator instead of being retried blindly.

Fault points (tests arm them to kill the process at the boundary): `notify.after_external_started`,
`notify.after_call`.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from outbox_bridge.core import clock, faults
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import JobContext, kind

# Deliberately loose, as providers are: one @, no spaces, a dot in the domain.
ADDRESS_PATTERN = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"


class NotifyPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    to: str = Field(max_length=320, pattern=ADDRESS_PATTERN)
    message: str = Field(min_length=1, max_length=2_000)


@dataclass(frozen=True)
class ProviderReceipt:
    """What the provider answered to one send: the id of its message, and whether it had seen the idempotency
    key before (nothing new was sent)."""

    provider_message_id: str
    duplicate: bool


class Provider(Protocol):
    """An external message provider that takes an idempotency key (tenant + operation key)."""

    def send(
        self, *, tenant: str, operation_key: str, job_id: str, epoch: int, to: str, message: str
    ) -> ProviderReceipt: ...


@dataclass(frozen=True)
class StubProvider:
    """A stand-in for a hosted e-mail provider: a JSON-lines file, one line per call.

    A call whose (tenant, operation key) the provider has seen before is a duplicate: it is still recorded,
    but nothing new is sent and the original message id comes back. Calls from several processes are
    serialised with an exclusive lock on the file."""

    log_path: Path

    def send(
        self, *, tenant: str, operation_key: str, job_id: str, epoch: int, to: str, message: str
    ) -> ProviderReceipt:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a+", encoding="utf-8") as log:
            fcntl.flock(log.fileno(), fcntl.LOCK_EX)
            log.seek(0)
            seen = log.read()
            earlier = _first_message_id(seen.splitlines(), tenant, operation_key)
            receipt = ProviderReceipt(earlier or f"msg-{uuid.uuid4().hex}", duplicate=earlier is not None)
            line = {
                "tenant": tenant,
                "operation_key": operation_key,
                "job_id": job_id,
                "epoch": epoch,
                "to": to,
                "message": message,
                "at": clock.now(),
                "provider_message_id": receipt.provider_message_id,
                "duplicate": receipt.duplicate,
            }
            torn = bool(seen) and not seen.endswith("\n")  # a writer was killed mid-line
            log.write(("\n" if torn else "") + json.dumps(line) + "\n")
            log.flush()
            os.fsync(log.fileno())
        return receipt


def _first_message_id(lines: list[str], tenant: str, operation_key: str) -> str | None:
    for text in lines:
        try:
            seen = json.loads(text)
        except json.JSONDecodeError:  # a torn line from a killed writer is not a call
            continue
        if seen.get("tenant") == tenant and seen.get("operation_key") == operation_key:
            return str(seen["provider_message_id"])
    return None


@runtime_checkable
class WithSettings(Protocol):
    """A context that carries the worker's settings (the runner's `StoreContext` does)."""

    settings: Settings


def provider_of(ctx: JobContext) -> StubProvider:
    """The provider configured for the worker running `ctx`: the stub at `settings.notify_log`."""
    if not isinstance(ctx, WithSettings):
        raise TypeError("notify needs a context that carries the worker's settings")
    return StubProvider(ctx.settings.notify_log)


def send_notification(ctx: JobContext, payload: NotifyPayload, provider: Provider) -> dict[str, Any]:
    """Mark the external effect started, then call `provider`. `LeaseLost` from the mark means no call."""
    ctx.check_cancel()
    ctx.mark_external_started()
    faults.hit("notify.after_external_started")
    receipt = provider.send(
        tenant=ctx.tenant,
        operation_key=ctx.operation_key,
        job_id=ctx.job_id,
        epoch=ctx.epoch,
        to=payload.to,
        message=payload.message,
    )
    faults.hit("notify.after_call")
    return {
        "provider_message_id": receipt.provider_message_id,
        "operation_key": ctx.operation_key,
        "duplicate": receipt.duplicate,
    }


def run_notify(ctx: JobContext, payload: NotifyPayload) -> dict[str, Any]:
    return send_notification(ctx, payload, provider_of(ctx))


kind("notify", payload=NotifyPayload)(run_notify)
