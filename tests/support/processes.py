"""Heartbeat rows for tests: a process of any role, host and pid recorded in the store as its own beat
would record it, and the pid of a process that is gone from this host."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import replace

from sqlalchemy import Engine

from outbox_bridge.jobstore import db, heartbeats
from outbox_bridge.jobstore.heartbeats import Process, this_process


def gone_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped): no process has it now."""
    child = subprocess.Popen(["true"])
    child.wait(10)
    return child.pid


def a_process(
    role: str, now: float, *, pid: int | None = None, host: str | None = None, worker: str | None = None
) -> Process:
    """A process of `role` started at `now` on this host (or `host`), as this test process (or `pid`),
    reporting the lease owner's name `worker` when given, as consumers and workers do."""
    me = this_process(role, now)
    detail = {} if worker is None else {"concurrency": 1, "in_flight": 0, "worker": worker}
    return replace(me, pid=me.pid if pid is None else pid, host=host or socket.gethostname(), detail=detail)


def beat(engine: Engine, process: Process, now: float) -> None:
    """`process`'s heartbeat at `now` (forgetting nothing)."""
    db.transact(engine, heartbeats.beat, replace(process, last_seen_at=now), now, forget_before=0.0)
