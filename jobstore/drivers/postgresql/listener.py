"""Notifying the relays on a PostgreSQL store: LISTEN/NOTIFY.

Every INSERT statement into `outbox` sends, from a trigger in the store (migration 0008), one `NOTIFY` on
its schema's channel carrying the earliest `available_at` among the rows it added. PostgreSQL delivers it
when, and only if, the transaction commits, to every session listening on that channel: each relay keeps
one connection that listens (`Listener`), whose socket the relay's event loop watches like the SQLite
notify socket's. So a relay on any host reads rows the moment they are committed instead of at its next poll,
and no writer spends a statement on notifying.

A notification is a hint, never the truth: a relay whose listening connection is lost polls at
`relay_poll_seconds` and listens again when it can; rows nobody announced are found by the slow poll.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sqlalchemy.engine import make_url

from outbox_bridge.jobstore.drivers import ListenerLost

log = logging.getLogger(__name__)

# One channel per schema (the trigger's `TG_TABLE_SCHEMA`, the listener's `current_schema()`): deployments
# that share a database in schemas of their own do not wake each other.
CHANNEL_PREFIX = "outbox_bridge."
CONNECT_TIMEOUT_SECONDS = 5


class Listener:
    """One relay's listening connection. `fileno()` turns readable when a notification arrives; `take()`
    reads them all. Not thread-safe: the relay's event loop thread alone uses it."""

    def __init__(self, conn: psycopg.Connection[Any], channel: str, name: str) -> None:
        self._conn = conn
        self._fileno = conn.pgconn.socket  # kept: a closed connection no longer says which it was
        self.channel = channel
        self.name = name
        self._heard: list[str] = []
        conn.add_notify_handler(lambda notify: self._heard.append(notify.payload))

    @classmethod
    def open(
        cls, database_url: str, role: str = "relay", application_name: str | None = None
    ) -> Listener | None:
        """Listen on the store at `database_url` as `role`, the connection named `application_name` unless
        the URL names it; None when it cannot be reached (the process then polls)."""
        url = make_url(database_url).set(drivername="postgresql")
        conninfo = url.render_as_string(hide_password=False)
        if application_name and "application_name" not in url.query:
            conninfo = make_conninfo(conninfo, application_name=application_name)
        try:
            conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=5)
            schema = conn.execute("SELECT current_schema()").fetchone()
            channel = CHANNEL_PREFIX + (schema[0] if schema and schema[0] else "public")
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except psycopg.Error as exc:
            log.warning("cannot listen for committed outbox rows (%s): polling instead", exc)
            return None
        return cls(conn, channel, f"{role}-{socket.gethostname()}-{os.getpid()}")

    def fileno(self) -> int:
        return self._fileno

    def take(self) -> float | None:
        """Read every notification waiting; the earliest due time they announced, or None. Raises
        `ListenerLost` when the connection failed."""
        pgconn = self._conn.pgconn
        try:
            pgconn.consume_input()
        except psycopg.Error as exc:
            raise ListenerLost(str(exc)) from exc
        while (notify := pgconn.notifies()) is not None:
            self._heard.append(notify.extra.decode())
        heard, self._heard = self._heard, []
        return min((due for due in map(self._due, heard) if due is not None), default=None)

    def close(self) -> None:
        try:
            self._conn.close()
        except psycopg.Error:
            pass

    def _due(self, payload: str) -> float | None:
        try:
            return float(payload.partition(" ")[0])
        except ValueError:
            return None
