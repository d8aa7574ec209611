"""When a job may start: at once, after a delay from its acceptance (`delay_seconds`), or at a given time
(`run_at`).

How the start was named is part of the request: a retried `delay_seconds: 60` is the same request as the
first (the same job, due 60 s after the first was accepted), while the same instant named as `run_at` is
another request. A delayed job's row and its outbox row both come due at its start, so neither a relay nor a
polling worker hands it out earlier, and no broker holds a timer for it."""

from __future__ import annotations

from dataclasses import dataclass

MAX_DELAY_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True)
class Schedule:
    """The start a request asked for: a delay or a time (epoch seconds), never both; neither means at once."""

    delay_seconds: float | None = None
    run_at: float | None = None

    def __post_init__(self) -> None:
        if self.delay_seconds is not None and self.run_at is not None:
            raise ValueError("a start is a delay or a time, not both")

    def start(self, accepted_at: float) -> float | None:
        """The time from which the job may start, for a request accepted at `accepted_at`; None: at once."""
        if self.run_at is not None:
            return self.run_at
        if self.delay_seconds is not None:
            return accepted_at + self.delay_seconds
        return None

    def identity(self) -> dict[str, float]:
        """What the idempotency fingerprint keeps: the start as the request named it (nothing when unset)."""
        if self.run_at is not None:
            return {"run_at": float(self.run_at)}
        if self.delay_seconds is not None:
            return {"delay_seconds": float(self.delay_seconds)}
        return {}

    def refusal(self, now: float, deadline_seconds: float | None = None) -> str | None:
        """Why a request with this start cannot be accepted at `now`, or None. A start in the past is
        accepted (the job is due at once: a client's clock a little behind ours is no error); one more than
        `MAX_DELAY_SECONDS` ahead is not, nor one as far in the past (a mistake, not a clock's drift), nor
        one at or after the job's deadline (counted from acceptance), which it could never meet."""
        start = self.start(now)
        if start is None:
            return None
        if start - now > MAX_DELAY_SECONDS:
            return f"the start is more than {MAX_DELAY_SECONDS} seconds (30 days) ahead"
        if now - start > MAX_DELAY_SECONDS:
            return f"the start is more than {MAX_DELAY_SECONDS} seconds (30 days) in the past"
        if deadline_seconds is not None and start >= now + deadline_seconds:
            return "the deadline (counted from acceptance) would pass before the job may start"
        return None


def available_from(start: float | None, now: float) -> float:
    """When a job accepted at `now` with `start` comes due: its start, or at once for none or a past one."""
    return now if start is None else max(now, start)
