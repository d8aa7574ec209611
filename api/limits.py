"""The request body's limits and their refusals: its size (`MAX_BODY_BYTES`) and how long it may take to
arrive (`HTTP_BODY_TIMEOUT_SECONDS`, counted from the request's head). `api.edge.Edge` enforces them on
every request, as that module says."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Scope

from outbox_bridge.api.problems import BODY_TIMEOUT, ProblemType, problem_response

# What the client gets instead of the app's answer: a problem and its detail.
Refusal = tuple[ProblemType, str]


class BodyRefused(Exception):
    """Raised into the app from `receive` when the body passes a limit."""


def body_timeout(read_seconds: float) -> Refusal:
    return BODY_TIMEOUT, f"The request body did not arrive within {read_seconds:g} s."


def refusal_response(refusal: Refusal) -> Response:
    # The rest of the body is never read, so the connection cannot carry another request.
    return problem_response(*refusal, headers={"Connection": "close"})


def content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return length(value)
    return None


def length(value: bytes | None) -> int | None:
    """A Content-Length header's value as a number; None when there is none or it is not a number."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
