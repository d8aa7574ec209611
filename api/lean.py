"""`POST /jobs` in front of the whole app, for the requests the route would accept as sent.

The route's own work (the kind, the payload, the schedule, the group commit, the answer) is small beside
what the app does around it for every request: the middleware stack (FastAPI's and Starlette's error,
telemetry, body-limit and exit-stack layers, then the project's headers, request counter and body limit),
the routing through the included router, ten dependencies, and reading and validating the body. Under
load that was most of the api's CPU per accepted job.

`LeanFront` is the outermost layer of the app (`api.app.App` puts it in front of FastAPI's own handling of
a request, so FastAPI's telemetry check and Starlette's dispatch are skipped too). It takes a `POST /jobs`
whose headers are each sent once, with a Content-Length within MAX_BODY_BYTES, reads the body itself
(within HTTP_BODY_TIMEOUT_SECONDS, or it answers `body-timeout` as the body limit does) and, when the
request is as the route would take it (a JSON body that is a valid `JobCreate`, a bearer token the
deployment accepts, one Idempotency-Key of 1 to 255 characters), calls the route's `accept_job`.
Anything else (a bad token, a missing key, a body that does not validate, a chunked body, an unusual
header) goes through the whole stack to the FastAPI route with the body replayed, so every refusal is the
one the route has always given, word for word.

What the layers it skips would do for an answer it gives, it does itself: what `accept_job` raises (an
unknown kind, a bad payload, a conflict, a store that is down) is answered by the app's own exception
handler for it, an unexpected error by the app's error handler and then raised again for the server to
log; every answer gets `api.headers.headers_for` the path and is counted under the route's template.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox_bridge.api.auth import Identity, InvalidToken
from outbox_bridge.api.deps import decoded_key, token_identity
from outbox_bridge.api.headers import encoded, headers_for, put
from outbox_bridge.api.limits import body_timeout, length, refusal_response
from outbox_bridge.api.routes.jobs import accept_job
from outbox_bridge.api.schemas import JobCreate
from outbox_bridge.core.settings import Settings

PATH = "/jobs"
_METHOD = "POST"

Handler = Callable[[Request, Exception], Any]


class LeanFront:
    """The fast path of `POST /jobs` (see the module) in front of `stack`, the app as FastAPI serves it.
    `state` is the app's (settings, committer, metrics, links); `handlers` its exception handlers, by
    exception class (`Exception`'s is the error handler for what no other handler takes)."""

    def __init__(self, stack: ASGIApp, state: Any, handlers: Mapping[Any, Handler]) -> None:
        self._stack = stack
        self._state = state
        self._handlers = {key: value for key, value in handlers.items() if isinstance(key, type)}
        self._headers = encoded(headers_for(PATH))
        self._settings: Settings = state.settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != _METHOD or scope["path"] != PATH:
            await self._stack(scope, receive, send)
            return
        headers = _sent_once(scope)
        declared = length(headers.get(b"content-length")) if headers is not None else None
        if headers is None or declared is None or declared > self._settings.max_body_bytes:
            await self._stack(scope, receive, send)  # the body limit and the route answer these
            return
        try:
            async with asyncio.timeout(self._settings.http_body_timeout_seconds):
                body = await _whole_body(receive)
        except TimeoutError:
            refusal = body_timeout(self._settings.http_body_timeout_seconds)
            await self._answer(refusal_response(refusal), scope, receive, send)
            return
        except ClientDisconnect:
            return  # nobody is left to answer
        parsed = _parse(headers, body, self._settings)
        if parsed is None:
            await self._stack(scope, _replaying(body, receive), send)
            return
        await self._accept(parsed, scope, receive, send)

    async def _accept(
        self, parsed: tuple[JobCreate, str, Identity, str | None], scope: Scope, receive: Receive, send: Send
    ) -> None:
        job, key, identity, traceparent = parsed
        state = self._state
        try:
            response = await accept_job(
                job, key, identity, state.settings, state.committer, state.metrics, state.links, traceparent
            )
        except Exception as exc:
            handler = self._handler_for(exc)
            answer = handler(Request(scope, receive), exc)
            response = await answer if inspect.isawaitable(answer) else answer
            await self._answer(response, scope, receive, send)
            if handler is self._handlers.get(Exception):
                raise  # as the app's error layer does: answered, then left to the server to log
            return
        await self._answer(response, scope, receive, send)

    def _handler_for(self, exc: Exception) -> Handler:
        for cls in type(exc).__mro__:
            handler = self._handlers.get(cls)
            if handler is not None:
                return handler
        raise exc  # no handler at all, not even `Exception`'s: the server's own 500

    async def _answer(self, response: Response, scope: Scope, receive: Receive, send: Send) -> None:
        put(response.raw_headers, self._headers)  # as the app's header layer does
        try:
            await response(scope, receive, send)
        finally:
            self._state.metrics.request_done(_METHOD, PATH, response.status_code)


def _sent_once(scope: Scope) -> dict[bytes, bytes] | None:
    """The request's headers by name; None when one was sent twice (the route decides what that means)."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in headers:
            return None
        headers[name] = value
    return headers


async def _whole_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` again, whole, then whatever the connection says next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _parse(
    headers: dict[bytes, bytes], body: bytes, settings: Settings
) -> tuple[JobCreate, str, Identity, str | None] | None:
    """The job, key, caller and trace context of a request the route would accept as sent; None for any
    other (the route answers it)."""
    if headers.get(b"content-type", b"").split(b";")[0].strip().lower() != b"application/json":
        return None
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    key = decoded_key(headers.get(b"idempotency-key", b"").decode("latin-1"))
    if scheme.lower() != "bearer" or not token or key is None:
        return None
    try:
        identity = token_identity(settings, token)
        fields = json.loads(body)
        if not isinstance(fields, dict):
            return None
        job = JobCreate.model_validate(fields)
    except (InvalidToken, ValueError, RecursionError):  # pydantic's and JSON's errors are ValueErrors
        return None
    traceparent = headers.get(b"traceparent")
    return job, key, identity, traceparent.decode("latin-1") if traceparent is not None else None
