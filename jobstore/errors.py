"""Named outcomes of guarded transitions that lost."""

from __future__ import annotations


class StoreError(Exception):
    """Base class for the store's refusals."""


class Fenced(StoreError):
    """A worker write matched no row: the epoch is stale, the lease expired, the job is no longer running,
    or its deadline passed. Nothing was written."""

    def __init__(self, job_id: str, epoch: int) -> None:
        super().__init__(f"job {job_id} epoch {epoch}: write fenced out")
        self.job_id = job_id
        self.epoch = epoch


class IdempotencyConflict(StoreError):
    """The tenant already used this idempotency key for a different request (kind, payload, deadline or
    start)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"idempotency key already used for job {job_id} with a different request")
        self.job_id = job_id


class Unstorable(StoreError):
    """The store refused a value of one request (text the database cannot hold, say); nothing was written
    for it."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the store refused a value of this request: {reason}")
        self.reason = reason


class JobNotFound(StoreError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class InvalidTransition(StoreError):
    def __init__(self, job_id: str, state: str, action: str) -> None:
        super().__init__(f"job {job_id} is {state}: cannot {action}")
        self.job_id = job_id
        self.state = state
        self.action = action


class Retry(Exception):
    """Raised inside a transaction to roll it back and run it again (e.g. a lost insert race)."""
