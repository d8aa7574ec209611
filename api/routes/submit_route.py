"""The route class of `POST /jobs`: FastAPI's route, with the framework's per-request work cut to what a
submission sent as documented needs.

FastAPI documents and validates the route as its endpoint declares it (the body as `JobCreate`, the
Idempotency-Key and traceparent headers, the bearer token, the app's settings, group committer and engine),
and every request reaches it through the app's whole middleware stack, as any route's does. What FastAPI does
to call the endpoint (solving ten dependencies, parsing the content type with the `email` package, validating
the body through its own field layer) cost more than the submission's own work. So for a request sent as the
route takes it (a JSON body that is a valid `JobCreate`, one bearer token the deployment accepts, one
Idempotency-Key of 1 to 255 characters, each header sent once), `SubmitRoute`'s handler reads those itself and
calls the same endpoint with them. Any other request (a bad token, a missing key, a body that does not
validate) goes to FastAPI's own handler for the route, which reads the same body again and answers with the
problem it has always given, word for word.

The bearer token is checked before any of the body is read: a request without a token the deployment
accepts is answered 401 at once, however much body it declares, so a client without a token cannot hold a
connection by sending its body slowly. What the body would have been changes nothing for it.
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message, Receive, Scope, Send

from outbox_bridge.api import payloads
from outbox_bridge.api.auth import Identity
from outbox_bridge.api.deps import bearer, bearer_identity, decoded_key
from outbox_bridge.api.schemas import JobCreate


class SubmitRoute(APIRoute):
    """An `APIRoute` that calls its endpoint with the arguments it reads from a request sent as documented,
    and hands any other request to FastAPI's handling of the route, the body replayed (see the module). The
    endpoint takes `job`, `key`, `identity`, `settings`, `committer`, `engine`, `metrics`, `links` and
    `traceparent`; what it raises goes to the app's exception handlers, as from any route."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await super().handle(scope, receive, send)  # FastAPI's 405
            return
        state = scope["app"].state
        # Raises the 401 FastAPI's handling of the route would give, before the body is waited for.
        identity = bearer_identity(state.settings, await bearer(Request(scope)))
        try:
            body = await _whole_body(receive)
        except ClientDisconnect:
            return  # nobody is left to answer
        arguments = _arguments(scope, body, identity)
        if arguments is None:
            await super().handle(scope, _replaying(body, receive), send)
            return
        response = await self.endpoint(
            **arguments,
            settings=state.settings,
            committer=state.committer,
            engine=state.engine,
            metrics=state.metrics,
            links=state.links,
        )
        await response(scope, receive, send)


async def _whole_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
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


def _arguments(scope: Scope, body: bytes, identity: Identity) -> dict[str, Any] | None:
    """The job, key, caller (`identity`, from its bearer token) and trace context of a request the route
    takes as sent; None for any other (FastAPI's handler answers it)."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in headers:
            return None  # a header sent twice: FastAPI decides what that means
        headers[name] = value
    if headers.get(b"content-type", b"").split(b";")[0].strip().lower() != b"application/json":
        return None
    key = decoded_key(headers.get(b"idempotency-key", b"").decode("latin-1"))
    if key is None:
        return None
    try:
        fields = payloads.loads(body)  # a 400 problem when nested past what it can read
        if not isinstance(fields, dict):
            return None
        job = JobCreate.model_validate(fields)
    except (ValueError, RecursionError):  # pydantic's and JSON's errors are ValueErrors
        return None
    traceparent = headers.get(b"traceparent")
    return {
        "job": job,
        "key": key,
        "identity": identity,
        "traceparent": traceparent.decode("latin-1") if traceparent is not None else None,
    }
