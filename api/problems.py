"""Every error the API gives, as RFC 9457 `application/problem+json` with a stable `type` URI.

The status codes are bounded to 400, 401, 403 (signed result links only), 404, 409, 413 and 503: whatever
goes wrong (a framework 422 or 405, an unknown route, a store failure, an unexpected exception) is answered
with one of the problem types below.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match

from outbox_bridge.api.headers import headers_for
from outbox_bridge.jobstore.db import StoreUnavailable
from outbox_bridge.jobstore.errors import IdempotencyConflict, JobNotFound, Unstorable
from outbox_bridge.jobstore.queries import BadCursor

log = logging.getLogger(__name__)

TYPE_PREFIX = "urn:outbox-bridge:problem:"
MEDIA_TYPE = "application/problem+json"
RETRY_AFTER_SECONDS = 1


@dataclass(frozen=True)
class ProblemType:
    slug: str
    title: str
    status: int

    @property
    def uri(self) -> str:
        return TYPE_PREFIX + self.slug

    def error(
        self, detail: str, *, headers: Mapping[str, str] | None = None, **extensions: Any
    ) -> ProblemError:
        return ProblemError(self, detail, headers=headers, extensions=extensions)


INVALID_REQUEST = ProblemType("invalid-request", "The request is not valid", 400)
UNKNOWN_KIND = ProblemType("unknown-kind", "This job kind is not accepted", 400)
INVALID_PAYLOAD = ProblemType("invalid-payload", "The payload does not fit the job kind", 400)
BAD_CURSOR = ProblemType("bad-cursor", "The cursor is not valid", 400)
REQUEST_HEAD_TOO_LARGE = ProblemType(
    "request-head-too-large", "The request line and headers are too large", 400
)
BODY_TIMEOUT = ProblemType("body-timeout", "The request body did not arrive in time", 400)
METHOD_NOT_ALLOWED = ProblemType("method-not-allowed", "This route does not take this method", 400)
UNAUTHORIZED = ProblemType("unauthorized", "A valid bearer token is required", 401)
RESULT_LINK_EXPIRED = ProblemType("result-link-expired", "The result link has expired", 403)
RESULT_LINK_INVALID = ProblemType("result-link-invalid", "The result link is not valid", 403)
JOB_NOT_FOUND = ProblemType("job-not-found", "Job not found", 404)
RESULT_NOT_READY = ProblemType("result-not-ready", "The job has no committed result", 404)
RESOLVED_WITHOUT_RESULT = ProblemType(
    "resolved-without-result", "An operator resolved the job as succeeded; it has no result", 404
)
RESULT_GONE = ProblemType("result-gone", "The committed result can no longer be read", 404)
BATCH_NOT_FOUND = ProblemType("batch-not-found", "Batch not found", 404)
ROUTE_NOT_FOUND = ProblemType("route-not-found", "No such route", 404)
IDEMPOTENCY_CONFLICT = ProblemType(
    "idempotency-conflict", "The Idempotency-Key was already used for a different request", 409
)
PAYLOAD_TOO_LARGE = ProblemType("payload-too-large", "The request body is too large", 413)
STORE_UNAVAILABLE = ProblemType("store-unavailable", "The job store is unavailable", 503)
INTERNAL_ERROR = ProblemType("internal-error", "The request could not be handled", 503)

ALL_TYPES: tuple[ProblemType, ...] = (
    INVALID_REQUEST,
    UNKNOWN_KIND,
    INVALID_PAYLOAD,
    BAD_CURSOR,
    REQUEST_HEAD_TOO_LARGE,
    BODY_TIMEOUT,
    METHOD_NOT_ALLOWED,
    UNAUTHORIZED,
    RESULT_LINK_EXPIRED,
    RESULT_LINK_INVALID,
    JOB_NOT_FOUND,
    RESULT_NOT_READY,
    RESOLVED_WITHOUT_RESULT,
    RESULT_GONE,
    BATCH_NOT_FOUND,
    ROUTE_NOT_FOUND,
    IDEMPOTENCY_CONFLICT,
    PAYLOAD_TOO_LARGE,
    STORE_UNAVAILABLE,
    INTERNAL_ERROR,
)

# Unknown ids and other tenants' ids must be indistinguishable: one fixed detail, never the id.
JOB_NOT_FOUND_DETAIL = "No job with this id is visible to you."
BATCH_NOT_FOUND_DETAIL = "No batch with this id is visible to you."
BEARER_CHALLENGE = {"WWW-Authenticate": "Bearer"}
INVALID_TOKEN_CHALLENGE = {"WWW-Authenticate": 'Bearer error="invalid_token"'}


class ProblemError(Exception):
    """Raised by routes and dependencies; answered as the problem it carries."""

    def __init__(
        self,
        problem: ProblemType,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.headers = dict(headers or {})
        self.extensions = dict(extensions or {})


class ProblemResponse(Response):
    """An `application/problem+json` body. ASCII-escaped, so no client input can make it unencodable."""

    media_type = MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def problem_response(
    problem: ProblemType,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> ProblemResponse:
    body = {"type": problem.uri, "title": problem.title, "status": problem.status, "detail": detail}
    body.update(extensions or {})
    return ProblemResponse(body, status_code=problem.status, headers=dict(headers or {}))


def job_not_found() -> ProblemResponse:
    return problem_response(JOB_NOT_FOUND, JOB_NOT_FOUND_DETAIL)


def batch_not_found() -> ProblemError:
    return BATCH_NOT_FOUND.error(BATCH_NOT_FOUND_DETAIL)


def batch_conflict(batch_id: str) -> ProblemError:
    """The 409 for a batch's Idempotency-Key that names another batch request."""
    url = f"/batches/{batch_id}"
    return IDEMPOTENCY_CONFLICT.error(
        f"This Idempotency-Key was used for a different batch request (its jobs or its callback); that batch "
        f"is at {url}.",
        batch_url=url,
    )


def issues(exc: ValidationError | RequestValidationError, *, prefix: tuple[str, ...] = ()) -> list[dict]:
    """Validation errors without the offending input or its context (which may not be serializable)."""
    found = []
    for error in exc.errors():
        loc = [*prefix, *(p if isinstance(p, int) else str(p) for p in error.get("loc", ()))]
        found.append({"loc": loc, "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))})
    return found


async def _on_problem(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem_response(exc.problem, exc.detail, headers=exc.headers, extensions=exc.extensions)


async def _on_validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return problem_response(
        INVALID_REQUEST,
        "The request does not match the documented schema.",
        extensions={"errors": issues(exc)},
    )


# The order `Allow` names methods in.
METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request, refused: HTTPException) -> str:
    """`Allow` for a request refused for its method: every method some route takes at its path (a router
    hands the request to the first route at the path, which names only its own), with HEAD wherever GET is
    (`api.edge` answers HEAD as GET)."""
    named = (refused.headers or {}).get("Allow", "")
    found = {method.strip().upper() for method in named.split(",") if method.strip()}
    for route in request.app.router.routes:
        if route.matches(request.scope)[0] is not Match.NONE:
            found |= getattr(route, "methods", None) or set()
    if "GET" in found:
        found.add("HEAD")
    known = [method for method in METHOD_ORDER if method in found]
    return ", ".join(known + sorted(found - set(METHOD_ORDER)))


def _for_http_status(exc: HTTPException, allow: str = "") -> ProblemResponse:
    if exc.status_code == 404:
        return problem_response(ROUTE_NOT_FOUND, "There is no route at this path.")
    if exc.status_code == 405:
        return problem_response(
            METHOD_NOT_ALLOWED, f"This route takes: {allow}.", headers={"Allow": allow} if allow else None
        )
    if exc.status_code == 401:
        return problem_response(UNAUTHORIZED, "Send Authorization: Bearer <token>.", headers=BEARER_CHALLENGE)
    if exc.status_code == 413:
        return problem_response(PAYLOAD_TOO_LARGE, "The request body is over the limit.")
    if exc.status_code >= 500:
        return problem_response(INTERNAL_ERROR, "The request could not be handled.")
    return problem_response(INVALID_REQUEST, str(exc.detail))


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _for_http_status(exc, allowed_methods(request, exc) if exc.status_code == 405 else "")


async def _on_job_not_found(_: Request, exc: Exception) -> Response:
    return job_not_found()


async def _on_conflict(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, IdempotencyConflict)
    url = f"/jobs/{exc.job_id}"
    return problem_response(
        IDEMPOTENCY_CONFLICT,
        f"This Idempotency-Key was used for a different request (kind, payload, deadline or start); that "
        f"job is at {url}.",
        extensions={"job_url": url},
    )


async def _on_bad_cursor(_: Request, exc: Exception) -> Response:
    return problem_response(BAD_CURSOR, "Pass back a next_cursor exactly as a previous page gave it.")


async def _on_unstorable(_: Request, exc: Exception) -> Response:
    return problem_response(
        INVALID_REQUEST,
        "The store cannot keep a value of this request (text it cannot encode, say); nothing was written.",
    )


async def _on_store_failure(_: Request, exc: Exception) -> Response:
    log.warning("store unavailable: %s", exc)
    return problem_response(
        STORE_UNAVAILABLE,
        "The job store cannot be reached or written just now; nothing was written. Try again.",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    # A bug, not a store failure. The server logs it with its traceback (the exception is re-raised after
    # this response is sent); the client still gets a bounded status and no internals. This handler runs
    # outside every middleware, so it adds the response headers itself.
    return problem_response(
        INTERNAL_ERROR,
        "The request could not be handled; the error has been logged.",
        headers=headers_for(request.url.path),
    )


def install(app: FastAPI) -> None:
    """Answer every error raised below the middleware as a problem."""
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(HTTPException, _on_http)
    app.add_exception_handler(JobNotFound, _on_job_not_found)
    app.add_exception_handler(IdempotencyConflict, _on_conflict)
    app.add_exception_handler(BadCursor, _on_bad_cursor)
    app.add_exception_handler(Unstorable, _on_unstorable)
    app.add_exception_handler(StoreUnavailable, _on_store_failure)
    app.add_exception_handler(SQLAlchemyError, _on_store_failure)
    app.add_exception_handler(Exception, _on_unexpected)
