"""The AMQP message: a small frozen value with `encode`/`decode`. It only says "job X needs attention";
the job's state lives in the store. `message_id` is the outbox row id that produced it. The job's trace
context, when it has one, travels beside the body in the `traceparent` header (`trace_headers`,
`traceparent_of`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONTENT_TYPE = "application/json"
TRACEPARENT_HEADER = "traceparent"


class UndecodableMessage(ValueError):
    """The body is not a job message: reject it without requeue (it is dead-lettered)."""


@dataclass(frozen=True)
class JobMessage:
    job_id: str

    def encode(self) -> bytes:
        return json.dumps({"job_id": self.job_id}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> JobMessage:
        try:
            data = json.loads(body)
            job_id = data["job_id"]
            uuid.UUID(job_id)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UndecodableMessage(f"not a job message: {body[:80]!r}") from exc
        return cls(job_id=job_id)


def trace_headers(traceparent: str | None) -> dict[str, str] | None:
    """The message headers that carry `traceparent` (W3C), or None when there is none to carry."""
    return {TRACEPARENT_HEADER: traceparent} if traceparent else None


def traceparent_of(headers: Mapping[str, Any] | None) -> str | None:
    """The `traceparent` a delivery's headers carry, as sent; None without one. (Whether it is a valid
    trace context is for the tracing to decide.)"""
    value = (headers or {}).get(TRACEPARENT_HEADER)
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return value if isinstance(value, str) else None


# Headers a consumer orders the deliveries it holds by (priority first, then turns across tenants). They
# only order: a message without them (published by an older relay) counts as `normal` of no tenant.
PRIORITY_HEADER = "x-job-priority"
TENANT_HEADER = "x-job-tenant"
NORMAL_RANK = 1


def order_headers(priority: int, tenant: str) -> dict[str, object]:
    return {PRIORITY_HEADER: priority, TENANT_HEADER: tenant}


def order_of(headers: dict[str, object] | None) -> tuple[int, str]:
    """(priority rank, tenant) as the headers say; (normal, "") when they say nothing usable."""
    headers = headers or {}
    priority, tenant = headers.get(PRIORITY_HEADER), headers.get(TENANT_HEADER)
    tenant_name = tenant.decode() if isinstance(tenant, bytes) else tenant
    return (
        priority if isinstance(priority, int) else NORMAL_RANK,
        tenant_name if isinstance(tenant_name, str) else "",
    )
