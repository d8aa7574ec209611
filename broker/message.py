"""The AMQP message: a small frozen value with `encode`/`decode`. It only says "job X needs attention";
the job's state lives in the store. `message_id` is the outbox row id that produced it."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

CONTENT_TYPE = "application/json"


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
