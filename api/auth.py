"""Bearer identity: HS256 JWTs signed with `AUTH_SECRET`, carrying `tenant`, `sub`, a numeric `exp` at most
TOKEN_MAX_TTL_SECONDS ahead, an optional role, and `iss` / `aud` where AUTH_ISSUER / AUTH_AUDIENCE are set.

`tenant` and `sub` are names the store keeps and compares, so a token is only valid when each is 1 to 128
characters of `A-Za-z0-9._:@-`: a name any store can hold, with nothing (NUL, a lone surrogate, 300
characters) that would fail a write shared with other tenants' requests."""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from typing import Any, TypeGuard

import jwt

from outbox_bridge.core.settings import DEV_AUTH_SECRET, Settings

ALGORITHM = "HS256"
MIN_SECRET_BYTES = 32
MAKE_A_SECRET = "python3 -c 'import secrets; print(secrets.token_urlsafe(48))'"
NAME_RULE = "1 to 128 characters of A-Za-z0-9._:@-"
DEFAULT_TTL_SECONDS = 86400
ACCEPTED_TOKENS_REMEMBERED = 1024
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


@dataclass(frozen=True)
class TokenPolicy:
    """What a token must be here: signed with `secret`, expiring at most `max_ttl_seconds` ahead, and
    naming `issuer` and `audience` when the deployment sets them (AUTH_ISSUER, AUTH_AUDIENCE)."""

    secret: str
    max_ttl_seconds: float
    issuer: str | None = None
    audience: str | None = None

    @classmethod
    def of(cls, settings: Settings) -> TokenPolicy:
        return cls(
            settings.auth_secret, settings.token_max_ttl_seconds, settings.auth_issuer, settings.auth_audience
        )

    def issue(self, *, tenant: str, user: str, operator: bool = False, ttl_seconds: int | None = None) -> str:
        """A token this policy accepts, valid `ttl_seconds` (by default a day, or the longest it allows, when
        shorter)."""
        ttl = min(DEFAULT_TTL_SECONDS, int(self.max_ttl_seconds)) if ttl_seconds is None else ttl_seconds
        return issue_token(
            self.secret,
            tenant=tenant,
            user=user,
            operator=operator,
            ttl_seconds=ttl,
            issuer=self.issuer,
            audience=self.audience,
        )


def issue_token(
    secret: str,
    *,
    tenant: str,
    user: str,
    operator: bool = False,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    issuer: str | None = None,
    audience: str | None = None,
) -> str:
    """A signed token for `user` of `tenant`, valid for `ttl_seconds`, with `iss` and `aud` when given;
    `InvalidName` for a tenant or user that no token may carry."""
    now = int(time.time())
    claims: dict[str, object] = {
        "tenant": check_name("tenant", tenant),
        "sub": check_name("user", user),
        "iat": now,
        "exp": now + ttl_seconds,
    }
    optional = {"role": "operator" if operator else None, "iss": issuer, "aud": audience}
    claims.update({name: value for name, value in optional.items() if value is not None})
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(policy: TokenPolicy, token: str) -> Identity:
    """The identity in a token `policy` accepts. `InvalidToken`, saying why, for a bad signature; a missing,
    non-numeric, past or too distant `exp`; a wrong or missing `iss` or `aud` where the policy names one;
    a `tenant` or `sub` outside `NAME_RULE`.

    A token accepted once is remembered with its `exp` (the same client sends the same token on every
    request, and checking its signature costs more than the rest of a small request): until then it
    is accepted again without decoding it; from then on it is refused as expired."""
    identity, exp = _accepted(policy, token)
    if exp <= time.time():
        raise InvalidToken("Signature has expired")
    return identity


def verify_token_until(policy: TokenPolicy, token: str) -> tuple[Identity, float]:
    """`verify_token`, and the token's `exp`: what a dashboard session made from it may not outlive."""
    identity, exp = _accepted(policy, token)
    if exp <= time.time():
        raise InvalidToken("Signature has expired")
    return identity, exp


@functools.lru_cache(maxsize=ACCEPTED_TOKENS_REMEMBERED)
def _accepted(policy: TokenPolicy, token: str) -> tuple[Identity, float]:
    """The identity in a token `policy` accepts and when the token expires; a refused one is not
    remembered."""
    claims = _decode(policy, token)
    _check_expiry(claims["exp"], policy.max_ttl_seconds)
    tenant, user = claims.get("tenant"), claims.get("sub")
    if not is_valid_name(tenant):
        raise InvalidToken(f"its tenant claim must be {NAME_RULE}")
    if not is_valid_name(user):
        raise InvalidToken(f"its sub claim must be {NAME_RULE}")
    return Identity(tenant=tenant, user=user, operator=claims.get("role") == "operator"), float(claims["exp"])


def _decode(policy: TokenPolicy, token: str) -> dict[str, Any]:
    # A JWT's parts are base64url without padding (RFC 7515, section 2); the decoder would take `=` too, so
    # one token would have several spellings.
    if "=" in token:
        raise InvalidToken("a JWT is base64url without padding: it has no '='")
    required = ["exp", "sub", *(["iss"] if policy.issuer else []), *(["aud"] if policy.audience else [])]
    try:
        return jwt.decode(
            token,
            policy.secret,
            algorithms=[ALGORITHM],
            issuer=policy.issuer,
            audience=policy.audience,
            options={"require": required},
        )
    except jwt.PyJWTError as exc:
        raise InvalidToken(str(exc)) from exc


def _check_expiry(exp: object, max_ttl_seconds: float) -> None:
    # PyJWT has checked that `exp` has not passed, but it takes anything int() takes: "4000000000" too.
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise InvalidToken("its exp claim must be a number (seconds since the epoch)")
    if exp - time.time() > max_ttl_seconds:
        raise InvalidToken(f"it expires more than {max_ttl_seconds:.0f} seconds from now")
