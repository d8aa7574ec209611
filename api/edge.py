"""The app's own middleware, one layer: what every HTTP request and answer gets, whatever its route.

- **The body's limits** (`api.limits`): a declared Content-Length over MAX_BODY_BYTES is refused before any
  of the body is read; otherwise the bytes are counted as they arrive (chunked or streamed uploads
  included), and the moment the count passes the limit the client gets 413; when the body is not whole by
  HTTP_BODY_TIMEOUT_SECONDS after the request's head, 400 `body-timeout`. Either way the app stops reading,
  whatever it would have answered is discarded, and the connection is closed. Once the app has begun its
  answer it needs no more of the body, and the deadline no longer applies.
- **The headers of every answer at its path** (`api.headers.headers_for`), set in place of any the route
  set for them, the refusals above included.
- **HEAD as GET without the body**: the app answers a HEAD request as it would the GET of the same path
  (status and headers, `Content-Length` included), and no body goes out. A path without GET refuses HEAD as
  it refuses any method it does not take.
- **The count of every answer** (`api.metrics.Metrics.request_done`) by method, route template (never the
  raw path, so the label set stays bounded: `route_template`) and status; an error no handler took counts
  as the 503 the outermost error handler answers.

One layer rather than three, because each layer costs every request a call and a wrapped `send`, and the
api's cheapest answers are mostly that cost.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox_bridge.api.headers import encoded_for, put
from outbox_bridge.api.limits import BodyRefused, Refusal, body_timeout, content_length, refusal_response
from outbox_bridge.api.metrics import KNOWN_METHODS, UNMATCHED, Metrics
from outbox_bridge.api.problems import PAYLOAD_TOO_LARGE

# What an error no handler took is answered by the outermost error handler (`api.problems`).
UNHANDLED_STATUS = 503


class Edge:
    """ASGI middleware: the body's limits, the answers' headers and their count (see the module)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, max_bytes: int, read_seconds: float) -> None:
        self.app = app
        self.metrics = metrics
        self.max_bytes = max_bytes
        self.read_seconds = read_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = _Exchange(self, scope, receive, send)
        root_path = scope.get("root_path", "")
        try:
            await exchange.run()
        except Exception:
            exchange.status = exchange.status or UNHANDLED_STATUS
            raise
        finally:
            template = route_template(exchange.scope, root_path)
            method = scope["method"]
            self.metrics.request_done(
                method if method in KNOWN_METHODS else "other", template, exchange.status
            )

    def too_large(self) -> Refusal:
        return PAYLOAD_TOO_LARGE, f"The request body is over the limit of {self.max_bytes} bytes."


def route_template(scope: Scope, root_path: str = "") -> str:
    """The template of the route a request matched, once the app has routed it: an API route's path
    (`/jobs/{job_id}`); for a file under a mount, the mount's path and `/{path}` (`/static/redoc/{path}`);
    for the app's other routes, which have no parameters (`/openapi.json`), the path itself; `UNMATCHED`
    when no route matched. `root_path` is the scope's before routing (a mount extends it)."""
    route = scope.get("route")
    if route is not None:
        return str(route.path)
    if "endpoint" not in scope:  # what the router sets for any route it hands the request to
        return UNMATCHED
    mounted = scope.get("root_path", "")
    if mounted != root_path:
        return f"{mounted[len(root_path) :]}/{{path}}"
    return str(scope["path"])


class _Exchange:
    """One request's pass through the `Edge`: its `receive` and `send` as the app gets them."""

    __slots__ = (
        "_deadline", "_edge", "_head", "_headers", "_reading", "_receive", "_received", "_send", "refusal",
        "scope", "status",
    )  # fmt: skip

    def __init__(self, edge: Edge, scope: Scope, receive: Receive, send: Send) -> None:
        self._edge = edge
        self._head = scope["method"] == "HEAD"
        # The scope the app sees: a HEAD request's, as its GET's (the server's own scope keeps HEAD, so that
        # it sends no body either).
        self.scope = {**scope, "method": "GET"} if self._head else scope
        self._receive = receive
        self._send = send
        self._headers = encoded_for(scope["path"])
        self._deadline = 0.0
        self._received = 0
        self._reading = True  # until the body is whole or the answer has begun
        self.refusal: Refusal | None = None
        self.status = 0

    async def run(self) -> None:
        edge = self._edge
        declared = content_length(self.scope)
        if declared is not None and declared > edge.max_bytes:
            await self._refuse(edge.too_large())
            return
        self._deadline = asyncio.get_running_loop().time() + edge.read_seconds
        try:
            await edge.app(self.scope, self.receive, self.send)
        except Exception:
            if self.refusal is None:
                raise
        if self.refusal is not None:
            await self._refuse(self.refusal)

    async def receive(self) -> Message:
        if not self._reading:
            return await self._receive()
        try:
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            self.refusal = body_timeout(self._edge.read_seconds)
            raise BodyRefused from None
        self._reading = message["type"] == "http.request" and message.get("more_body", False)
        self._received += len(message.get("body", b""))
        if self._received > self._edge.max_bytes:
            self.refusal = self._edge.too_large()
            raise BodyRefused
        return message

    async def send(self, message: Message) -> None:
        if self.refusal is not None:
            return  # the app's answer to a body it never got whole is replaced by the refusal
        await self._deliver(message)

    async def _deliver(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._reading = False
            self.status = int(message["status"])
            headers = list(message.get("headers", ()))
            put(headers, self._headers)
            message["headers"] = headers
        elif self._head and message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await self._send(message)

    async def _refuse(self, refusal: Refusal) -> None:
        await refusal_response(refusal)(self.scope, self._receive, self._deliver)
