"""`POST /jobs` without FastAPI's per-request machinery, for the requests that route would accept as sent.

The route's own work (the kind, the payload, the schedule, the group commit, the answer) is small beside
what FastAPI does around it for every request: resolving the route through the included router, solving
ten dependencies, reading and validating the body and building the response through its own layers (about
half of the api's CPU per accepted job under load). `LeanSubmit` sits first among the app's routes, inside
every middleware and exception handler, and does only this: it reads the headers and the body itself and,
when each is as the route would take it (a JSON body that is a valid `JobCreate`, a bearer token the
deployment accepts, one Idempotency-Key of 1 to 255 characters), calls the route's `accept_job`. Anything
else (a bad token, a missing key, a body that does not validate, an unusual header) goes to the FastAPI
route itself with the body replayed, so every refusal is the one the route has always given, word for word.
What `accept_job` raises (an unknown kind, a bad payload, a conflict, a store that is down) reaches the same
exception handlers as the route's.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import URLPath
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import Identity, InvalidToken
from api.deps import token_identity
from api.routes.jobs import accept_job
from api.schemas import JobCreate
from core.settings import Settings

PATH = "/jobs"
# The scope key that sends a request on to the FastAPI route (`LeanSubmit` steps aside for it).
_DECLINED = "outbox_bridge.lean_declined"
_MAX_KEY_CHARACTERS = 255  # as `api.deps.IdempotencyKey`


class LeanSubmit(BaseRoute):
    """The fast path of `POST /jobs` (see the module); `router` is the app's, to hand declined requests to."""

    path = path_format = PATH  # the template the request counter (and FastAPI's telemetry) label it by

    def __init__(self, state: Any, router: ASGIApp) -> None:
        self._state = state
        self._router = router

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        taken = (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] == PATH
            and not scope.get(_DECLINED)
        )
        return (Match.FULL, {"route": self}) if taken else (Match.NONE, {})

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _whole_body(receive)
        state = self._state
        parsed = _parse(scope, body, state.settings)
        if parsed is None:
            scope[_DECLINED] = True
            await self._router(scope, _replaying(body, receive), send)
            return
        job, key, identity, traceparent = parsed
        response = await accept_job(
            job, key, identity, state.settings, state.committer, state.metrics, state.links, traceparent
        )
        await response(scope, receive, send)


async def _whole_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect  # as the route's own reading of the body does
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
    scope: Scope, body: bytes, settings: Settings
) -> tuple[JobCreate, str, Identity, str | None] | None:
    """The job, key, caller and trace context of a request the route would accept as sent; None for any
    other (the route answers it)."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in headers:  # a header sent twice: the route decides what that means
            return None
        headers[name] = value
    if headers.get(b"content-type", b"").split(b";")[0].strip().lower() != b"application/json":
        return None
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    key = headers.get(b"idempotency-key", b"").decode("latin-1")
    if scheme.lower() != "bearer" or not token or not 0 < len(key) <= _MAX_KEY_CHARACTERS:
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
