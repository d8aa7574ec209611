"""The routes' dependencies: who is asking (from the verified bearer token only), and the app's settings,
engine, group committer and metrics. All are cheap and do no I/O, so they run on the event loop, not in the
threadpool."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from outbox_bridge.api.auth import Identity, InvalidToken, TokenPolicy, verify_token
from outbox_bridge.api.committer import GroupCommitter
from outbox_bridge.api.links import LinkSigner
from outbox_bridge.api.metrics import Metrics
from outbox_bridge.api.problems import (
    BEARER_CHALLENGE,
    INVALID_REQUEST,
    INVALID_TOKEN_CHALLENGE,
    UNAUTHORIZED,
)
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import workflows

bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="JWT",
    description="An HS256 token carrying `tenant` and `sub`: `outbox-bridge token --tenant T --user U`.",
)


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _engine(request: Request) -> Engine:
    return request.app.state.engine


async def _metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def _committer(request: Request) -> GroupCommitter:
    return request.app.state.committer


async def _links(request: Request) -> LinkSigner:
    return request.app.state.links


SettingsDep = Annotated[Settings, Depends(_settings)]
EngineDep = Annotated[Engine, Depends(_engine)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
CommitterDep = Annotated[GroupCommitter, Depends(_committer)]
LinksDep = Annotated[LinkSigner, Depends(_links)]


BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def token_identity(settings: Settings, token: str) -> Identity:
    """The tenant and user of `token` if the deployment's `TokenPolicy` accepts it, else `InvalidToken` saying
    why not. The routes' bearer tokens and the dashboard's (header or session cookie) are checked here."""
    return verify_token(TokenPolicy.of(settings), token)


async def _identity(settings: SettingsDep, credentials: BearerDep) -> Identity:
    return bearer_identity(settings, credentials)


def bearer_identity(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> Identity:
    """The caller's tenant and user, from a token the deployment's `TokenPolicy` accepts; 401 without one,
    saying why the token is not accepted."""
    if credentials is None:
        raise UNAUTHORIZED.error("Send Authorization: Bearer <token>.", headers=BEARER_CHALLENGE)
    try:
        return token_identity(settings, credentials.credentials)
    except InvalidToken as exc:
        raise UNAUTHORIZED.error(
            f"The bearer token is not accepted: {exc}.", headers=INVALID_TOKEN_CHALLENGE
        ) from None


IdentityDep = Annotated[Identity, Depends(_identity)]


async def _metrics_reader(settings: SettingsDep, credentials: BearerDep) -> None:
    metrics_reader(settings, credentials)


def metrics_reader(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> None:
    """Return when the bearer token may read `/metrics`: METRICS_TOKEN, or an operator token the deployment
    accepts. 401 otherwise, saying why: the figures name every tenant, kind and schedule."""
    if credentials is None:
        raise UNAUTHORIZED.error(
            "Send Authorization: Bearer <token> with METRICS_TOKEN or an operator token.",
            headers=BEARER_CHALLENGE,
        )
    token = credentials.credentials
    expected = settings.metrics_token
    if expected is not None and hmac.compare_digest(token.encode(), expected.encode()):
        return
    try:
        identity = token_identity(settings, token)
    except InvalidToken as exc:
        raise UNAUTHORIZED.error(
            f"The bearer token is not accepted: {exc}.", headers=INVALID_TOKEN_CHALLENGE
        ) from None
    if not identity.operator:
        raise UNAUTHORIZED.error(
            "/metrics needs METRICS_TOKEN or an operator token; this token is a tenant's.",
            headers=INVALID_TOKEN_CHALLENGE,
        )


MetricsReader = Depends(_metrics_reader)

MAX_KEY_CHARACTERS = 255


def decoded_key(raw: str) -> str | None:
    """The Idempotency-Key as sent: the header's bytes (which HTTP hands over as Latin-1) read as UTF-8, of 1
    to MAX_KEY_CHARACTERS characters, not beginning with `batch:`; None for any other."""
    try:
        key = raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return None
    if key.startswith(workflows.RESERVED_KEY_PREFIX):  # a batch's members and callback are keyed so
        return None
    return key if 0 < len(key) <= MAX_KEY_CHARACTERS else None


def _idempotency_key(
    raw: Annotated[
        str,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=4 * MAX_KEY_CHARACTERS,
            description="Names this request within your tenant: a retry with the same key returns the same "
            f"job. 1 to {MAX_KEY_CHARACTERS} characters of UTF-8, not beginning with `batch:`.",
        ),
    ],
) -> str:
    key = decoded_key(raw)
    if key is None:
        rule = (
            f"Idempotency-Key must be 1 to {MAX_KEY_CHARACTERS} characters of UTF-8, "
            "not beginning with `batch:`."
        )
        where = {"loc": ["header", "Idempotency-Key"], "msg": rule, "type": "value_error"}
        raise INVALID_REQUEST.error(rule, errors=[where])
    return key


IdempotencyKey = Annotated[str, Depends(_idempotency_key)]

Traceparent = Annotated[
    str | None,
    Header(
        description="A W3C trace context (`00-<trace id>-<span id>-<flags>`): the job's spans continue this "
        "trace. One that is not valid is ignored, and the job starts a trace of its own.",
    ),
]
