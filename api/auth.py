"""Bearer identity: HS256 JWTs signed with `AUTH_SECRET`, carrying `tenant`, `sub` and an optional role."""

from __future__ import annotations

import time
from dataclasses import dataclass

import jwt

ALGORITHM = "HS256"


@dataclass(frozen=True)
class Identity:
    tenant: str
    user: str
    operator: bool = False


class InvalidToken(Exception):
    pass


def issue_token(
    secret: str, *, tenant: str, user: str, operator: bool = False, ttl_seconds: int = 86400
) -> str:
    """A signed token for `user` of `tenant`, valid for `ttl_seconds`."""
    now = int(time.time())
    claims: dict[str, object] = {"tenant": tenant, "sub": user, "iat": now, "exp": now + ttl_seconds}
    if operator:
        claims["role"] = "operator"
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str) -> Identity:
    """The identity in a valid token; `InvalidToken` for a bad signature, expiry or missing claims."""
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], options={"require": ["exp", "sub"]})
    except jwt.PyJWTError as exc:
        raise InvalidToken(str(exc)) from exc
    tenant, user = claims.get("tenant"), claims.get("sub")
    if not isinstance(tenant, str) or not tenant or not isinstance(user, str) or not user:
        raise InvalidToken("token lacks tenant or sub")
    return Identity(tenant=tenant, user=user, operator=claims.get("role") == "operator")
