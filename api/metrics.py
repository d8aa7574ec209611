"""Prometheus text exposition for the API process.

Counters (requests by route template and status, jobs accepted by kind) live in this process; the store's
figures (jobs by state, outbox rows pending and the age of the oldest, the oldest due queued job, the live
processes by role from their heartbeats) are read from the store at scrape time.
With `--workers N` each worker process counts its own requests.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobstore.outbox import Backlog

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNMATCHED = "unmatched"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    """Thread-safe counters for one app."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str, str]] = Counter()
        self._accepted: Counter[str] = Counter()

    def request_done(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self._requests[(method, route, str(status))] += 1

    def job_accepted(self, kind: str) -> None:
        with self._lock:
            self._accepted[kind] += 1

    def render(
        self,
        jobs_by_state: Mapping[str, int],
        backlog: Backlog,
        store: Mapping[str, float],
        *,
        alive: Mapping[str, int],
        oldest_queued_age: float,
    ) -> str:
        with self._lock:
            requests, accepted = dict(self._requests), dict(self._accepted)
        lines: list[str] = []
        lines += _family(
            "outbox_bridge_http_requests_total",
            "counter",
            "HTTP requests answered, by method, route template and status.",
            (
                (dict(zip(("method", "route", "status"), k, strict=True)), v)
                for k, v in sorted(requests.items())
            ),
        )
        lines += _family(
            "outbox_bridge_jobs_accepted_total",
            "counter",
            "Jobs created by this process (idempotent repeats not counted), by kind.",
            (({"kind": k}, v) for k, v in sorted(accepted.items())),
        )
        lines += _family(
            "outbox_bridge_jobs",
            "gauge",
            "Jobs in the store, by state.",
            (({"state": s}, n) for s, n in sorted(jobs_by_state.items())),
        )
        lines += _family(
            "outbox_bridge_outbox_pending",
            "gauge",
            "Outbox rows due and not yet published.",
            [({}, backlog.pending)],
        )
        lines += _family(
            "outbox_bridge_outbox_oldest_age_seconds",
            "gauge",
            "How long the oldest due, unpublished outbox row has waited.",
            [({}, backlog.oldest_age_seconds)],
        )
        lines += _family(
            "outbox_bridge_queued_oldest_age_seconds",
            "gauge",
            "How long the oldest due, queued job has waited to start (0 when none waits).",
            [({}, oldest_queued_age)],
        )
        lines += _family(
            "outbox_bridge_processes_alive",
            "gauge",
            "Processes whose heartbeat is fresh, by role.",
            (({"role": r}, n) for r, n in alive.items()),
        )
        lines += _store_counters(store)
        return "\n".join(lines) + "\n"


def _store_counters(store: Mapping[str, float]) -> list[str]:
    lines: list[str] = []
    for name in ("write_transactions", "read_transactions", "retries"):
        if name in store:
            lines += _family(
                f"outbox_bridge_store_{name}_total",
                "counter",
                f"Store {name.replace('_', ' ')} made by this process.",
                [({}, store[name])],
            )
    return lines


def _family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], float]]
) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{rendered}}} {_number(value)}" if rendered else f"{name} {_number(value)}")
    return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class RequestCounter:
    """ASGI middleware: counts every HTTP response by method, route template (never the raw path, so the
    label set stays bounded) and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except Exception:
            status = status or 503  # what the outermost error handler answers
            raise
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            method = scope.get("method", "")
            self.metrics.request_done(method if method in KNOWN_METHODS else "other", template, status)
