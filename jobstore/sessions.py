"""Dashboard sessions: `start` one for an operator who signed in, find who a cookie's secret names
(`holder`), `end` it at sign-out. The secret is random and only the browser holds it; the store keeps its
SHA-256, so reading the database does not let anyone act as a signed-in operator."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import Connection, delete, insert, select, update

from outbox_bridge.jobstore.schema import dashboard_sessions as sessions


@dataclass(frozen=True)
class Session:
    id: str  # the secret's SHA-256, hex: what the store keys the session by
    tenant: str
    user: str
    expires_at: float


def _key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def start(conn: Connection, *, tenant: str, user: str, now: float, expires_at: float) -> tuple[str, Session]:
    """A new session until `expires_at`: the secret for the cookie, and the session. Sessions that ended or
    expired more than a day ago are deleted on the way."""
    conn.execute(delete(sessions).where(sessions.c.expires_at < now - 86400))
    secret = secrets.token_urlsafe(32)
    session = Session(_key(secret), tenant, user, expires_at)
    conn.execute(
        insert(sessions).values(
            id=session.id, tenant=tenant, user=user, created_at=now, expires_at=expires_at, ended_at=None
        )
    )
    return secret, session


def holder(conn: Connection, secret: str, now: float) -> Session | None:
    """The session `secret` opens: None when there is none, it expired or it was ended."""
    row = conn.execute(
        select(sessions.c.id, sessions.c.tenant, sessions.c.user, sessions.c.expires_at).where(
            sessions.c.id == _key(secret), sessions.c.ended_at.is_(None), sessions.c.expires_at > now
        )
    ).one_or_none()
    return None if row is None else Session(row.id, row.tenant, row.user, row.expires_at)


def end(conn: Connection, secret: str, now: float) -> bool:
    """End the session `secret` opens; False when it was not open."""
    ended = conn.execute(
        update(sessions)
        .where(sessions.c.id == _key(secret), sessions.c.ended_at.is_(None))
        .values(ended_at=now)
    )
    return ended.rowcount == 1
