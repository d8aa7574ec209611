"""Dashboard sessions: `start` one for an operator who signed in, find who a cookie's secret names
(`holder`), `end` it at sign-out. The secret is random and only the browser holds it.

The store keys a session by an HMAC-SHA256 of its secret under a `key` the caller derives from what verified
the operator's token (the api derives it from AUTH_SECRET and the token's required issuer and audience). So
reading the database does not let anyone act as a signed-in operator, and once that key changes no cookie
opens a session made under the old one: changing AUTH_SECRET ends every session."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Connection, delete, insert, select, update

from outbox_bridge.jobstore.schema import dashboard_sessions as sessions


@dataclass(frozen=True)
class Session:
    id: str  # the secret's HMAC under the session key, hex: what the store keys the session by
    tenant: str
    user: str
    expires_at: float


def _id(key: bytes, secret: str) -> str:
    return hmac.new(key, secret.encode(), hashlib.sha256).hexdigest()


def start(
    conn: Connection, key: bytes, *, tenant: str, user: str, now: float, expires_at: float
) -> tuple[str, Session]:
    """A new session until `expires_at`, under `key`: the secret for the cookie, and the session. Sessions
    that ended or expired more than a day ago are deleted on the way."""
    conn.execute(delete(sessions).where(sessions.c.expires_at < now - 86400))
    secret = secrets.token_urlsafe(32)
    session = Session(_id(key, secret), tenant, user, expires_at)
    conn.execute(
        insert(sessions).values(
            id=session.id, tenant=tenant, user=user, created_at=now, expires_at=expires_at, ended_at=None
        )
    )
    return secret, session


def holder(conn: Connection, key: bytes, secret: str, now: float) -> Session | None:
    """The session `secret` opens under `key`: None when there is none (or it was started under another
    key), it expired or it was ended."""
    row = conn.execute(
        select(sessions.c.id, sessions.c.tenant, sessions.c.user, sessions.c.expires_at).where(
            sessions.c.id == _id(key, secret), sessions.c.ended_at.is_(None), sessions.c.expires_at > now
        )
    ).one_or_none()
    return None if row is None else Session(row.id, row.tenant, row.user, row.expires_at)


def end(conn: Connection, key: bytes, secret: str, now: float) -> bool:
    """End the session `secret` opens under `key`; False when it was not open."""
    ended = conn.execute(
        update(sessions)
        .where(sessions.c.id == _id(key, secret), sessions.c.ended_at.is_(None))
        .values(ended_at=now)
    )
    return ended.rowcount == 1
