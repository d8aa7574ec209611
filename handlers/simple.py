"""The small kinds: `noop` and `sleep` for benchmarks and demos, `flaky` for tests of the retry path."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from outbox_bridge.handlers.base import JobContext, PermanentError, TransientError, kind


class NoopPayload(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


def run_noop(ctx: JobContext, payload: NoopPayload) -> dict[str, Any]:
    return {"ok": True}


class SleepPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    seconds: float = Field(ge=0, le=3600)


def run_sleep(ctx: JobContext, payload: SleepPayload) -> dict[str, Any]:
    """Sleep in short steps, checking for cancellation and a lost lease between them."""
    end = time.monotonic() + payload.seconds
    while (left := end - time.monotonic()) > 0:
        ctx.check_cancel()
        time.sleep(min(0.05, left))
    return {"slept": payload.seconds}


class FlakyPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    # Fail transiently on attempts up to and including this one (a large number: always).
    fail_until_attempt: int = Field(default=1_000_000, ge=0)
    mode: Literal["transient", "permanent"] = "transient"


def run_flaky(ctx: JobContext, payload: FlakyPayload) -> dict[str, Any]:
    if ctx.attempts > payload.fail_until_attempt:
        return {"succeeded_on_attempt": ctx.attempts}
    if payload.mode == "permanent":
        raise PermanentError("flaky_permanent", "this job is set to fail permanently")
    raise TransientError("flaky_transient", f"attempt {ctx.attempts} failed on purpose")


kind("noop", payload=NoopPayload)(run_noop)
kind("sleep", payload=SleepPayload)(run_sleep)
kind("flaky", payload=FlakyPayload)(run_flaky)
