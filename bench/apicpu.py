"""The api's CPU per accepted job, in one process, without HTTP: `POST /jobs` for noop jobs goes straight
into the app (`api.app.create_app`, its group commit and store included) from `--concurrency` callers at
once, each request under a fresh Idempotency-Key, and the event loop's thread time and the whole process's
CPU time are divided by the jobs accepted. No socket, no parser and no load generator share the cores, so
the figure moves far less from run to run than the same under `wrk`; what the server in front adds
(uvicorn's parsing and writes) is left out.

    python -m outbox_bridge.bench.apicpu /tmp/apicpu.db --jobs 10000

The database must be new (a SQLite file or a PostgreSQL URL): its schema is created first. A first
`--jobs` jobs warm the process and are not counted."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from typing import Any

from starlette.types import Message

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, migrate

BODY = b'{"kind":"noop","payload":{}}'
TENANT = "apicpu"


def measure(settings: Settings, jobs: int, concurrency: int = 16) -> dict[str, float]:
    """The event loop's CPU ms per accepted job (`loop_ms`), the process's (`process_ms`, the group
    commit's thread too) and accepted jobs a second of wall time (`per_second`), over `jobs` jobs."""
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    engine.dispose()
    return asyncio.run(_measure(settings, jobs, concurrency))


async def _measure(settings: Settings, jobs: int, concurrency: int) -> dict[str, float]:
    app = create_app(settings)
    token = issue_token(settings.auth_secret, tenant=TENANT, user="apicpu").encode()
    keys = iter(range(2 * jobs))

    async def post() -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
            (b"authorization", b"Bearer " + token),
            (b"idempotency-key", f"apicpu-{next(keys)}".encode()),
        ]
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/jobs",
            "raw_path": b"/jobs",
            "root_path": "",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "state": {},
        }
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": BODY, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await app(scope, receive, send)
        if sent[0]["status"] != 202:
            raise RuntimeError(f"POST /jobs answered {sent[0]['status']}: {sent[-1].get('body', b'')!r}")

    async def posts(count: int) -> None:
        left = [count]

        async def caller() -> None:
            while left[0] > 0:
                left[0] -= 1
                await post()

        await asyncio.gather(*(caller() for _ in range(concurrency)))

    async with app.router.lifespan_context(app):
        await posts(jobs)  # warm: imports, caches, the store's first pages
        loop_started, process_started = time.thread_time(), time.process_time()
        wall_started = time.perf_counter()
        await posts(jobs)
        loop_spent = time.thread_time() - loop_started
        process_spent = time.process_time() - process_started
        wall = time.perf_counter() - wall_started
    return {
        "loop_ms": 1000 * loop_spent / jobs,
        "process_ms": 1000 * process_spent / jobs,
        "per_second": jobs / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database", help="a new SQLite file's path, or a database URL")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs measured (as many again warm up)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight at once")
    args = parser.parse_args()
    url = args.database if "://" in args.database else f"sqlite:///{args.database}"
    settings = Settings(database_url=url, auth_secret=secrets.token_urlsafe(48))
    figures = measure(settings, args.jobs, args.concurrency)
    print(
        f"event loop {figures['loop_ms']:.3f} ms/job  process {figures['process_ms']:.3f} ms/job  "
        f"{figures['per_second']:.0f} jobs/s"
    )


if __name__ == "__main__":
    main()
