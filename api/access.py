"""The optional access log (`--access-log`, ACCESS_LOG=1): one line per HTTP request on the
`outbox_bridge.access` logger, with its method, path, status and duration. The path is logged without its
query string: a result link carries its signature there, and a log line is no place for a credential."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox_bridge.telemetry.logs import ACCESS

# What an answer that escaped every handler becomes (api.problems answers unexpected errors with 503).
UNHANDLED_STATUS = 503


class AccessLog:
    """ASGI middleware: logs each HTTP request once its answer is sent (or its handling failed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def noting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        except Exception:
            status = status or UNHANDLED_STATUS
            raise
        finally:
            _log(scope, status, (time.perf_counter() - started) * 1000)


def _log(scope: Scope, status: int, duration_ms: float) -> None:
    method, path = scope.get("method", ""), scope.get("path", "")
    fields = {"method": method, "path": path, "status": status, "duration_ms": round(duration_ms, 2)}
    ACCESS.info("%s %s %d %.1fms", method, path, status, duration_ms, extra=fields)
