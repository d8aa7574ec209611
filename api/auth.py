"""Bearer identity: HS256 JWTs signed with `AUTH_SECRET`, carrying `tenant`, `sub` and an optional role.

`tenant` and `sub` are names the store keeps and compares, so a token is only valid when each is 1 to 128
characters of `A-Za-z0-9._:@-`: a name any store can hold, with nothing (NUL, a lone surrogate, 300
characters) that would fail a write shared with other tenants' requests."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TypeGuard

import jwt

from jobstore.settings import DEV_AUTH_SECRET, Settings

ALGORITHM = "HS256"
MIN_SECRET_BYTES = 32
MAKE_A_SECRET = "python3 -c 'import secrets; print(secrets.token_urlsafe(48))'"
NAME_RULE = "1 to 128 characters of A-Za-z0-9._:@-"
_NAME = re.compile(r"[A-Za-z0-9._:@-]{1,128}", re.ASCII)


@dataclass(frozen=True)
class Identity:
    tenant: str
    user: str
    operator: bool = False


class InvalidToken(Exception):
    """The token is not accepted; the message says why, in words fit for the client."""


class InvalidName(ValueError):
    """A tenant or user name outside `NAME_RULE`."""


class UnsafeSecret(ValueError):
    """AUTH_SECRET is one that anybody could sign tokens with; the message says how to make a real one."""


def secret_weakness(secret: str) -> str | None:
    """Why `secret` must not sign tokens outside development (the built-in value, or under
    `MIN_SECRET_BYTES` bytes), or None."""
    if secret == DEV_AUTH_SECRET:
        return "AUTH_SECRET is the built-in development value, which anyone can read"
    if len(secret.encode()) < MIN_SECRET_BYTES:
        return f"AUTH_SECRET is shorter than {MIN_SECRET_BYTES} bytes"
    return None


def check_secret(settings: Settings) -> None:
    """Return when `settings.auth_secret` may sign and verify tokens; `UnsafeSecret` for a weak one unless
    OUTBOX_BRIDGE_DEV=1 (development: the demo, the tests, the benchmark)."""
    weakness = secret_weakness(settings.auth_secret)
    if weakness is not None and not settings.outbox_bridge_dev:
        raise UnsafeSecret(
            f"{weakness}: set AUTH_SECRET to a random value of at least {MIN_SECRET_BYTES} bytes, for "
            f"example the output of {MAKE_A_SECRET} (or set OUTBOX_BRIDGE_DEV=1 for a local trial)"
        )


def is_valid_name(value: object) -> TypeGuard[str]:
    """True for a string of `NAME_RULE`."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_name(what: str, value: str) -> str:
    """`value`, or `InvalidName` saying which name breaks `NAME_RULE`."""
    if not is_valid_name(value):
        raise InvalidName(f"the {what} must be {NAME_RULE}")
    return value


def issue_token(
    secret: str, *, tenant: str, user: str, operator: bool = False, ttl_seconds: int = 86400
) -> str:
    """A signed token for `user` of `tenant`, valid for `ttl_seconds`; `InvalidName` for a tenant or user
    that no token may carry."""
    now = int(time.time())
    claims: dict[str, object] = {
        "tenant": check_name("tenant", tenant),
        "sub": check_name("user", user),
        "iat": now,
        "exp": now + ttl_seconds,
    }
    if operator:
        claims["role"] = "operator"
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str) -> Identity:
    """The identity in a valid token; `InvalidToken` for a bad signature, expiry, a missing claim, or a
    `tenant` or `sub` outside `NAME_RULE`."""
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], options={"require": ["exp", "sub"]})
    except jwt.PyJWTError as exc:
        raise InvalidToken(str(exc)) from exc
    tenant, user = claims.get("tenant"), claims.get("sub")
    if not is_valid_name(tenant):
        raise InvalidToken(f"its tenant claim must be {NAME_RULE}")
    if not is_valid_name(user):
        raise InvalidToken(f"its sub claim must be {NAME_RULE}")
    return Identity(tenant=tenant, user=user, operator=claims.get("role") == "operator")
