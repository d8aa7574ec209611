"""Who may see the dashboard (operators only), signing in and out, and the plumbing every page and action
shares: the templates, the one-shot flash message, posted forms and where to go back to.

Signing in with an operator token starts a session of its own (`jobstore.sessions`): the cookie holds the
session's random secret, never the token, and sign-out ends it. The session lasts no longer than the token
it was made from (its `exp`) and at most DASHBOARD_SESSION_SECONDS, and the store keys it under a key derived
from what verified that token (AUTH_SECRET, AUTH_ISSUER, AUTH_AUDIENCE): change any of them and no cookie
opens a session made before. A form posted under that session is taken only from the dashboard's own pages:
it must come from this origin (`Sec-Fetch-Site`, `Origin`), as an urlencoded body, carrying the session's
CSRF token. A request with the token in its `Authorization` header (a script, not a browser's ambient cookie)
needs none of that.

The flash cookie (the one-shot message an action leaves for the next page) is signed under a key derived
from AUTH_SECRET: a cookie planted from another port of the same host, or altered, is not shown. A posted
form over MAX_FORM_BYTES is answered 413 and never read as a smaller or empty one."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from outbox_bridge.api.auth import Identity, InvalidToken, TokenPolicy, verify_token_until
from outbox_bridge.api.dashboard.charts import DEFAULT_REFRESH_SECONDS
from outbox_bridge.api.deps import BearerDep, EngineDep, SettingsDep, token_identity
from outbox_bridge.core import clock
from outbox_bridge.core.durations import format_duration
from outbox_bridge.core.sealing import hkdf_sha256
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, sessions
from outbox_bridge.jobstore.states import OPERATOR_REQUEUEABLE, RESOLVABLE_TO, State

log = logging.getLogger(__name__)

SESSION_COOKIE = "outbox_bridge_session"
FORM_TYPE = "application/x-www-form-urlencoded"
# Sec-Fetch-Site values of a request the dashboard's own page (or the operator typing the address) made.
OWN_FETCH_SITES = {"same-origin", "none"}
FLASH_COOKIE = "outbox_bridge_flash"
# The largest form body the dashboard reads; a larger one is answered 413 (`FormTooLarge`). Its biggest forms
# (a bulk requeue of a page of ticked jobs, a webhook or schedule with its note) take a few kilobytes.
MAX_FORM_BYTES = 16 * 1024
MAX_NOTE_CHARS = 500
# The purpose labels the dashboard's keys are derived from AUTH_SECRET under; a new label (or version) ends
# every session, or drops every flash, made under the old one.
SESSION_PURPOSE = b"outbox-bridge/dashboard-session/v1"
FLASH_PURPOSE = b"outbox-bridge/dashboard-flash/v1"

templates = Jinja2Templates(directory=str(Path(__file__).parents[1] / "templates"))
router = APIRouter(prefix="/ui", include_in_schema=False)


# --- who is asking ---------------------------------------------------------------------------------------


def _identity(settings: Settings, token: str | None) -> Identity | None:
    """Who `token` names if the deployment accepts it (the api's own check); None for none or a bad one."""
    if not token:
        return None
    try:
        return token_identity(settings, token)
    except InvalidToken:
        return None


async def _visitor(
    request: Request, settings: SettingsDep, credentials: BearerDep, engine: EngineDep
) -> Identity | None:
    """Who is asking: the bearer token from the Authorization header (read as the api's routes read it), else
    the operator whose open session the cookie names (noted on `request.state` for the forms' checks); None
    when neither names anyone."""
    if credentials is not None:
        return _identity(settings, credentials.credentials)
    secret = request.cookies.get(SESSION_COOKIE)
    if not secret:
        return None
    key = session_key(settings)
    session = await run_in_threadpool(db.read, engine, sessions.holder, key, secret, clock.now())
    if session is None:
        return None
    request.state.session = session
    request.state.csrf = csrf_token(settings, session)
    return Identity(tenant=session.tenant, user=session.user, operator=True)


def csrf_token(settings: Settings, session: sessions.Session) -> str:
    """The token every form of `session` carries: derived from the session, so nothing stores it."""
    message = f"dashboard-csrf:{session.id}".encode()
    return hmac.new(settings.auth_secret.encode(), message, hashlib.sha256).hexdigest()


VisitorDep = Annotated[Identity | None, Depends(_visitor)]


def session_key(settings: Settings) -> bytes:
    """The key the store keeps sessions under: derived from what verifies an operator's token (AUTH_SECRET,
    and AUTH_ISSUER and AUTH_AUDIENCE where set), so that a change to any of them ends every session."""
    return _derived(SESSION_PURPOSE, settings.auth_secret, settings.auth_issuer, settings.auth_audience)


def flash_key(settings: Settings) -> bytes:
    """The key that signs the flash cookie, derived from AUTH_SECRET for that use only."""
    return _derived(FLASH_PURPOSE, settings.auth_secret, None, None)


@functools.lru_cache(maxsize=16)
def _derived(purpose: bytes, secret: str, issuer: str | None, audience: str | None) -> bytes:
    """HKDF-SHA256 (RFC 5869) of `secret`, with `purpose` and the issuer and audience as its info."""
    verifier = json.dumps([issuer, audience]).encode()
    return hkdf_sha256(secret.encode(), salt=b"", info=purpose + b"\0" + verifier)


def operator_of(request: Request, identity: Identity | None) -> Identity | Response:
    """The operator asking, or the response a non-operator gets instead (see `refusal`)."""
    refused = refusal(request, identity)
    if refused is not None:
        return refused
    assert identity is not None  # refusal() lets only an operator through
    return identity


def refusal(request: Request, identity: Identity | None) -> Response | None:
    """None for an operator. Otherwise what a non-operator gets: the sign-in form with 401 for a missing,
    invalid or expired token, a plain 404 for a valid token without the operator role."""
    if identity is None:
        return _login_page(request, status_code=401)
    if not identity.operator:
        return not_found(request)
    return None


def _login_page(request: Request, *, status_code: int, error: str | None = None) -> Response:
    settings: Settings = request.app.state.settings
    context = {"error": error, "session_length": format_duration(settings.dashboard_session_seconds)}
    response = templates.TemplateResponse(request, "login.html", context, status_code=status_code)
    if status_code == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def not_found(request: Request) -> Response:
    return templates.TemplateResponse(request, "not_found.html", {}, status_code=404)


# --- sign in and out -------------------------------------------------------------------------------------


@router.get("/login")
def login_form(request: Request) -> Response:
    """The sign-in form: paste a token from `outbox-bridge token --operator`."""
    return _login_page(request, status_code=200)


@router.post("/login")
async def login(request: Request, settings: SettingsDep, engine: EngineDep) -> Response:
    """Verify the posted token; an operator's starts a session, whose secret becomes the cookie, and goes to
    /ui (303). The session ends when the token expires, or DASHBOARD_SESSION_SECONDS from now if that is
    sooner. Anything else gets the form again with 401 and no cookie."""
    refused = foreign(request)
    if refused is not None:
        return refused
    try:
        token = (await read_form(request)).get("token", "").strip()
    except FormTooLarge:
        return too_large(request)
    try:
        identity, token_expires_at = verify_token_until(TokenPolicy.of(settings), token)
    except InvalidToken:
        return _login_page(request, status_code=401, error="That token is invalid or has expired.")
    if not identity.operator:
        return _login_page(request, status_code=401, error="That token does not carry the operator role.")
    now = clock.now()
    expires_at = min(now + settings.dashboard_session_seconds, token_expires_at)
    secret, _ = await run_in_threadpool(
        db.transact, engine, sessions.start, session_key(settings), tenant=identity.tenant,
        user=identity.user, now=now, expires_at=expires_at,
    )  # fmt: skip
    response = RedirectResponse("/ui", status_code=303)
    _set_cookie(request, response, SESSION_COOKIE, secret)
    log.info("dashboard sign-in: %s/%s", identity.tenant, identity.user)
    return response


@router.post("/logout")
async def logout(request: Request, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep) -> Response:
    """End the session and go back to the sign-in form."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    secret = request.cookies.get(SESSION_COOKIE)
    if secret:
        key = session_key(settings)
        await run_in_threadpool(db.transact, engine, sessions.end, key, secret, clock.now())
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/ui", httponly=True, samesite="strict")
    return response


# --- forms that change something -------------------------------------------------------------------------


async def operator_form(
    request: Request, visitor: Identity | None
) -> tuple[Identity, dict[str, str]] | Response:
    """The operator posting and the form posted, or the response they get instead: a non-operator's
    (`refusal`), 403 for a form under the session cookie that did not come from the dashboard's own
    page (another origin, not urlencoded, or without the session's CSRF token), 413 for a form over
    MAX_FORM_BYTES."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    session_csrf = getattr(request.state, "csrf", None)
    if session_csrf is not None:
        refused = foreign(request)
        if refused is not None:
            return refused
    try:
        form = await read_form(request)
    except FormTooLarge:
        return too_large(request)
    if session_csrf is None:  # the token came in the Authorization header: no ambient credential to forge
        return who, form
    if not hmac.compare_digest(form.get("csrf", "").encode(), session_csrf.encode()):
        return forbidden(
            request, "The form did not carry this session's token; reload the page and try again."
        )
    return who, form


def foreign(request: Request) -> Response | None:
    """403 for a posted form the browser says came from another origin, or that is not urlencoded."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in OWN_FETCH_SITES:
        return forbidden(request, f"A form from another site ({site}) cannot act here.")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        return forbidden(request, "A form from another origin cannot act here.")
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != FORM_TYPE:
        return forbidden(request, f"Forms are taken only as {FORM_TYPE}.")
    return None


def forbidden(request: Request, reason: str) -> Response:
    log.warning("dashboard: refused a form posted to %s: %s", request.url.path, reason)
    return templates.TemplateResponse(request, "refused.html", {"reason": reason}, status_code=403)


def too_large(request: Request) -> Response:
    """413 for a form over MAX_FORM_BYTES: a page saying so; nothing of the form was acted on."""
    reason = (
        f"The form is larger than {MAX_FORM_BYTES // 1024} KB ({MAX_FORM_BYTES} bytes), the most the "
        "dashboard reads. Nothing was changed: shorten what you typed, or tick fewer jobs, and send it again."
    )
    log.warning("dashboard: refused a form posted to %s: over %d bytes", request.url.path, MAX_FORM_BYTES)
    return templates.TemplateResponse(
        request, "refused.html", {"reason": reason}, status_code=413, headers={"Connection": "close"}
    )


def _set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@dataclass(frozen=True)
class Flash:
    """The one-shot message an action leaves for the next page. Its cookie is `level:text`, percent-encoded,
    then `.` and the HMAC-SHA256 of that under `flash_key`."""

    level: str  # "ok" | "error"
    text: str

    def encode(self, key: bytes) -> str:
        payload = quote(f"{self.level}:{self.text}", safe="")
        return f"{payload}.{_flash_mac(key, payload)}"

    @classmethod
    def decode(cls, key: bytes, raw: str) -> Flash | None:
        """The flash `raw` holds; None for one not signed under `key` (planted, altered or unsigned)."""
        payload, sep, mac = raw.rpartition(".")
        if not sep or not hmac.compare_digest(mac.encode(), _flash_mac(key, payload).encode()):
            return None
        level, sep, text = unquote(payload).partition(":")
        if not sep or level not in {"ok", "error"}:
            return None
        return cls(level, text[:400])


def _flash_mac(key: bytes, payload: str) -> str:
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()


def open_flash(settings: Settings, raw: str) -> Flash | None:
    """The flash a cookie's value `raw` holds if this deployment signed it, else None."""
    return Flash.decode(flash_key(settings), raw)


class FormTooLarge(HTTPException):
    """A posted form over MAX_FORM_BYTES. The dashboard's forms answer it with `too_large`'s page; it is
    an HTTPException (413) so that no form is ever read as a smaller or empty one."""

    def __init__(self) -> None:
        super().__init__(413, f"The form is larger than {MAX_FORM_BYTES} bytes.")


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form fields (first value of each; bytes that are not UTF-8 read as U+FFFD);
    `FormTooLarge` for a body over MAX_FORM_BYTES."""
    fields = await _form_fields(request)
    return {name: values[0] for name, values in fields.items()}


async def read_form_values(request: Request, name: str) -> list[str]:
    """Every value of the form field `name` (a field repeated, as ticked checkboxes are), in order;
    `FormTooLarge` for a body over MAX_FORM_BYTES."""
    return (await _form_fields(request)).get(name, [])


async def _form_fields(request: Request) -> dict[str, list[str]]:
    """The form's fields, read once per request: a body declared or found to be over MAX_FORM_BYTES is
    refused as soon as that is known, without reading the rest of it."""
    read: dict[str, list[str]] | None = getattr(request.state, "form_fields", None)
    if read is not None:
        return read
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise FormTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormTooLarge
    read = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    request.state.form_fields = read
    return read


def safe_back(target: str | None) -> str:
    """Where to go after an action: a path inside the dashboard, never another site."""
    if not target or "\\" in target or any(ord(c) < 32 for c in target):
        return "/ui"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not (parts.path == "/ui" or parts.path.startswith("/ui/")):
        return "/ui"
    return target


def redirect_back(request: Request, target: str | None, message: Flash) -> Response:
    response = RedirectResponse(safe_back(target), status_code=303)
    _set_cookie(request, response, FLASH_COOKIE, message.encode(flash_key(request.app.state.settings)))
    return response


def read_flash(request: Request) -> Flash | None:
    """The flash the cookie holds, when this deployment signed it: a planted or altered one is not shown."""
    raw = request.cookies.get(FLASH_COOKIE)
    return open_flash(request.app.state.settings, raw) if raw else None


def with_flash(request: Request, response: Response) -> Response:
    """A flash is shown once: the page that shows it also deletes it."""
    if FLASH_COOKIE in request.cookies:
        response.delete_cookie(FLASH_COOKIE, path="/ui", httponly=True, samesite="strict")
    return response


def page_context(request: Request, now: float, refresh: int) -> dict[str, Any]:
    """What every page's template reads: the time, its refresh, where an action returns to, the flash."""
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return {
        "now": now,
        "refresh": refresh,
        "csrf": getattr(request.state, "csrf", ""),
        "back": path,
        "flash": read_flash(request),
        "iso": clock.isoformat,
        "requeueable": OPERATOR_REQUEUEABLE,
        "resolutions": sorted(s.value for s in RESOLVABLE_TO),
        "State": State,
    }


def unavailable(request: Request, exc: Exception) -> Response:
    log.warning("dashboard: store unavailable: %s", exc)
    return templates.TemplateResponse(
        request, "unavailable.html", {"refresh": DEFAULT_REFRESH_SECONDS}, status_code=503
    )
