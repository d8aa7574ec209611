"""Heartbeats: which api processes, relays, consumers and workers are alive.

Every long-running process owns one row of `processes`, under an id it picks afresh at each start, and
writes it every few seconds (`beat`); that is the only write liveness costs, never one per job. A process
is alive while its row was seen within the reader's window (`alive`). The same beat deletes the rows of
processes gone quiet for long (killed, not stopped), so the table holds about as many rows as there are
processes; a clean stop deletes its own row (`remove`). `Heartbeat` is the thread each long-running process
runs to write its row. How an operator's reader judges each row (alive, late, lost) is `conditions`.

A store that does not answer never stops the process: the beat is logged once, tried again at the next
interval, and its return is logged too. A clean stop deletes the row at once; a killed process's row ages
out of the live window within `ALIVE_BEATS` beats and is deleted by the others' beats later
(`FORGET_AFTER_BEATS`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from outbox_bridge.core import clock, version
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db

log = logging.getLogger(__name__)

ROLES = ("api", "relay", "consumer", "worker")
# The roles always reported, as 0 when none is alive.
BEATING = ROLES
# A row not seen for this many beats belongs to a process that is gone: the next beat of any process
# deletes it. Long enough that an operator can still find the row of a process that was just killed.
FORGET_AFTER_BEATS = 60
STORE_ERRORS = (db.StoreUnavailable, SQLAlchemyError)


@dataclass(frozen=True)
class Process:
    """A process as its heartbeat row says: who, where, since when, last seen when, and what it reported."""

    id: str
    role: str
    host: str
    pid: int
    version: str
    started_at: float
    last_seen_at: float
    detail: dict[str, Any] = field(default_factory=dict)


def beat(conn: Connection, me: Process, now: float, *, forget_before: float) -> None:
    """Record that `me` is alive at `now` with its latest `detail` (its row is created at its first beat),
    and delete every row not seen since `forget_before`."""
    detail = json.dumps(me.detail, sort_keys=True, separators=(",", ":"))
    if not db.execute(conn, "process_beat", {"id": me.id, "now": now, "detail": detail}):
        db.execute(
            conn,
            "process_add",
            {
                "id": me.id,
                "role": me.role,
                "host": me.host,
                "pid": me.pid,
                "version": me.version,
                "started_at": me.started_at,
                "last_seen_at": now,
                "detail": detail,
            },
        )
    db.execute(conn, "processes_forget", {"before": forget_before})


def remove(conn: Connection, process_id: str) -> bool:
    """Delete the row of a process that stopped cleanly; False when it was already gone."""
    return bool(db.execute(conn, "process_remove", {"id": process_id}))


def alive(conn: Connection, now: float, within: float) -> list[Process]:
    """The processes seen within `within` seconds of `now`, by role, host, then pid."""
    return seen_since(conn, now - within)


def seen_since(conn: Connection, since: float) -> list[Process]:
    """The processes whose row was last written at or after `since`, by role, host, then pid."""
    rows = db.execute(conn, "processes_seen_since", {"since": since})
    return [
        Process(
            id=id_, role=role, host=host, pid=pid, version=version_, started_at=started_at,
            last_seen_at=last_seen_at, detail=json.loads(detail),
        )
        for id_, role, host, pid, version_, started_at, last_seen_at, detail in rows
    ]  # fmt: skip


def by_role(alive_processes: list[Process]) -> dict[str, int]:
    """How many of `alive_processes` there are of each role: every role that beats (0 when none), and any
    other role a process reported."""
    counts = Counter(p.role for p in alive_processes)
    return {role: counts.get(role, 0) for role in BEATING} | dict(sorted(counts.items()))


def this_process(role: str, now: float) -> Process:
    """This process as its first beat records it, under a fresh id."""
    return Process(
        id=str(uuid.uuid4()),
        role=role,
        host=socket.gethostname(),
        pid=os.getpid(),
        version=version.installed(),
        started_at=now,
        last_seen_at=now,
    )


class Heartbeat:
    """Beats for one process until `stop`. `detail()` is asked at every beat for what the process reports
    about itself (a small JSON object: its concurrency, the jobs it holds)."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        role: str,
        detail: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        assert role in ROLES, role
        self._engine = engine
        self._interval = settings.heartbeat_seconds
        self._detail = detail
        self.me = this_process(role, clock.now())
        self._failing = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def beat(self) -> bool:
        """Write one beat now; False (logged once per outage) when the store did not take it."""
        now = clock.now()
        me = replace(self.me, detail=self._detail(), last_seen_at=now)
        forget_before = now - FORGET_AFTER_BEATS * self._interval
        try:
            db.transact(self._engine, beat, me, now, forget_before=forget_before)
        except STORE_ERRORS as exc:
            if not self._failing:
                log.warning("heartbeat not recorded (tried again every %.0fs): %s", self._interval, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("heartbeat recorded again")
        self._failing = False
        return True

    def stop(self) -> None:
        """Stop beating and delete this process's row (left to age out when the store does not answer)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        try:
            db.transact(self._engine, remove, self.me.id)
        except STORE_ERRORS as exc:
            log.info("heartbeat row left to age out: %s", exc)

    def _loop(self) -> None:
        self.beat()
        while not self._stop.wait(self._interval):
            self.beat()
