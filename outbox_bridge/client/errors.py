"""The errors of the public API: what `enqueue` raises, and what the client raises for each HTTP answer
that is not a success (a subclass per status, carrying the problem document the api sent)."""

from __future__ import annotations

from typing import Any


class InvalidJob(ValueError):
    """The job cannot be accepted as asked: a kind the deployment does not accept, a payload that does not
    fit its kind, a start that cannot be kept, a key or a name out of bounds. Nothing was written.
    `errors` says where (as the api's `errors` does)."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class UnknownDependencies(InvalidJob):
    """`after` names jobs the tenant does not have (no such job, or another tenant's): `ids` lists them.
    Nothing was written."""

    def __init__(self, message: str, ids: list[str], errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, errors)
        self.ids = ids


class StoreMismatch(RuntimeError):
    """The connection `enqueue` was given is not on a store it can write to as the deployment does: a
    SQLite database not in WAL mode, or a schema that is not at the code's revision. Nothing was written."""


class ClientError(Exception):
    """An answer of the api that is not a success: its `status` and its problem document (`problem`,
    RFC 9457: `type`, `title`, `status`, `detail`, and for some `errors`)."""

    status = 0

    def __init__(self, problem: dict[str, Any], status: int | None = None) -> None:
        self.problem = problem
        if status is not None:
            self.status = status
        super().__init__(f"{self.status} {problem.get('title', '')}: {problem.get('detail', '')}".strip())

    @property
    def detail(self) -> str:
        return str(self.problem.get("detail", ""))


class BadRequest(ClientError):
    status = 400


class Unauthorized(ClientError):
    status = 401


class NotFound(ClientError):
    status = 404


class Conflict(ClientError):
    """The idempotency key was used before for a different request (409): the client's and `enqueue`'s.
    `job_id` names the job the key belongs to, when known."""

    status = 409

    def __init__(self, problem: dict[str, Any], status: int | None = None, job_id: str | None = None) -> None:
        super().__init__(problem, status)
        self.job_id = job_id


class PayloadTooLarge(ClientError):
    status = 413


class Unavailable(ClientError):
    status = 503
