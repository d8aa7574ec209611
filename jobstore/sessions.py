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

from sqlalchemy import Connection

from outbox_bridge.jobstore import db


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
    db.execute(conn, "session_prune", {"before": now - 86400})
    secret = secrets.token_urlsafe(32)
    session = Session(_id(key, secret), tenant, user, expires_at)
    values = {"id": session.id, "tenant": tenant, "user": user, "now": now, "expires_at": expires_at}
    db.execute(conn, "session_start", values)
    return secret, session


def holder(conn: Connection, key: bytes, secret: str, now: float) -> Session | None:
    """The session `secret` opens under `key`: None when there is none (or it was started under another
    key), it expired or it was ended."""
    rows = db.execute(conn, "session_holder", {"id": _id(key, secret), "now": now})
    return Session(*rows[0]) if rows else None


def end(conn: Connection, key: bytes, secret: str, now: float) -> bool:
    """End the session `secret` opens under `key`; False when it was not open."""
    return bool(db.execute(conn, "session_end", {"id": _id(key, secret), "now": now}))
