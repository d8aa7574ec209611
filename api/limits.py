"""The request body limits, enforced by the API itself on the raw body: its size (`MAX_BODY_BYTES`) and how
long it may take to arrive (`HTTP_BODY_TIMEOUT_SECONDS`, counted from the request's head).

A declared Content-Length over the size limit is refused before any of the body is read. Otherwise the bytes
are counted as they arrive (chunked or streamed uploads included). The moment the count passes the limit the
client gets 413; when the body is not whole by its deadline, 400 `body-timeout`. Either way the app stops
reading, whatever it would have answered is discarded, and the connection is closed. Once the app has begun
its answer it needs no more of the body, and the deadline no longer applies.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox_bridge.api.problems import BODY_TIMEOUT, PAYLOAD_TOO_LARGE, ProblemType, problem_response

# What the client gets instead of the app's answer: a problem and its detail.
Refusal = tuple[ProblemType, str]


class BodyRefused(Exception):
    """Raised into the app from `receive` when the body passes a limit."""


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, read_seconds: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_seconds = read_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await refuse((PAYLOAD_TOO_LARGE, self._too_large()), scope, receive, send)
            return
        await self._guarded(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        deadline = asyncio.get_running_loop().time() + self.read_seconds
        received = 0
        whole = started = False
        refusal: Refusal | None = None

        async def guarded_receive() -> Message:
            nonlocal received, whole, refusal
            if whole or started:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                refusal = body_timeout(self.read_seconds)
                raise BodyRefused from None
            whole = message["type"] != "http.request" or not message.get("more_body", False)
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                refusal = (PAYLOAD_TOO_LARGE, self._too_large())
                raise BodyRefused
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refusal is not None:
                return  # the app's answer to a body it never got whole is replaced by the refusal
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if refusal is None:
                raise
        if refusal is not None:
            await refuse(refusal, scope, receive, send)

    def _too_large(self) -> str:
        return f"The request body is over the limit of {self.max_bytes} bytes."


def body_timeout(read_seconds: float) -> Refusal:
    return BODY_TIMEOUT, f"The request body did not arrive within {read_seconds:g} s."


def refusal_response(refusal: Refusal) -> Response:
    # The rest of the body is never read, so the connection cannot carry another request.
    return problem_response(*refusal, headers={"Connection": "close"})


async def refuse(refusal: Refusal, scope: Scope, receive: Receive, send: Send) -> None:
    await refusal_response(refusal)(scope, receive, send)


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
