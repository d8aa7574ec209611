"""A long-running process's heartbeat: a thread that writes this process's row of `processes` every
`HEARTBEAT_SECONDS` (`jobstore.heartbeats.beat`), so `status`, the dashboard and `/metrics` can say who is
alive. Relays, consumers and baseline workers each run one.

A store that does not answer never stops the process: the beat is logged once, tried again at the next
interval, and its return is logged too. A clean stop deletes the row at once; a killed process's row ages
out of the live window within `ALIVE_BEATS` beats and is deleted by the others' beats later
(`FORGET_AFTER_BEATS`)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from importlib import metadata
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from core import clock
from core.settings import Settings
from jobstore import db, heartbeats
from jobstore.heartbeats import Process
from worker.lease import LeaseKeeper

log = logging.getLogger(__name__)

# A row not seen for this many beats belongs to a process that is gone: the next beat of any process
# deletes it. Long enough that an operator can still find the row of a process that was just killed.
FORGET_AFTER_BEATS = 60
STORE_ERRORS = (db.StoreUnavailable, SQLAlchemyError)


def this_process(role: str, now: float) -> Process:
    """This process as its first beat records it, under a fresh id."""
    return Process(
        id=str(uuid.uuid4()),
        role=role,
        host=socket.gethostname(),
        pid=os.getpid(),
        version=_version(),
        started_at=now,
        last_seen_at=now,
    )


def _version() -> str:
    try:
        return metadata.version("outbox-bridge")
    except metadata.PackageNotFoundError:
        return "unknown"


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
        assert role in heartbeats.ROLES, role
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
            db.transact(self._engine, heartbeats.beat, me, now, forget_before=forget_before)
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
            db.transact(self._engine, heartbeats.remove, self.me.id)
        except STORE_ERRORS as exc:
            log.info("heartbeat row left to age out: %s", exc)

    def _loop(self) -> None:
        self.beat()
        while not self._stop.wait(self._interval):
            self.beat()


def runner_detail(keeper: LeaseKeeper, concurrency: int) -> Callable[[], dict[str, Any]]:
    """What a consumer or worker reports at each beat: its concurrency and the jobs it holds now."""
    return lambda: {"concurrency": concurrency, "in_flight": len(keeper.held())}
