"""Who may see the dashboard (operators only), signing in and out, and the plumbing every page and action
shares: the templates, the one-shot flash message, posted forms and where to go back to.

Signing in with an operator token starts a session of its own (`jobstore.sessions`): the cookie holds the
session's random secret, never the token, and sign-out ends it. A form posted under that session is taken
only from the dashboard's own pages: it must come from this origin (`Sec-Fetch-Site`, `Origin`), as an
urlencoded body, carrying the session's CSRF token. A request with the token in its `Authorization` header
(a script, not a browser's ambient cookie) needs none of that."""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from outbox_bridge.api.auth import Identity, InvalidToken
from outbox_bridge.api.dashboard.charts import DEFAULT_REFRESH_SECONDS
from outbox_bridge.api.deps import BearerDep, EngineDep, SettingsDep, token_identity
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, sessions
from outbox_bridge.jobstore.states import OPERATOR_REQUEUEABLE, RESOLVABLE_TO, State

log = logging.getLogger(__name__)

SESSION_COOKIE = "outbox_bridge_session"
FORM_TYPE = "application/x-www-form-urlencoded"
# Sec-Fetch-Site values of a request the dashboard's own page (or the operator typing the address) made.
OWN_FETCH_SITES = {"same-origin", "none"}
FLASH_COOKIE = "outbox_bridge_flash"
MAX_FORM_BYTES = 16 * 1024
MAX_NOTE_CHARS = 500

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
    session = await run_in_threadpool(db.read, engine, sessions.holder, secret, clock.now())
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
    response = templates.TemplateResponse(request, "login.html", {"error": error}, status_code=status_code)
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
    /ui (303). Anything else gets the form again with 401 and no cookie."""
    refused = foreign(request)
    if refused is not None:
        return refused
    token = (await read_form(request)).get("token", "").strip()
    identity = _identity(settings, token)
    if identity is None:
        return _login_page(request, status_code=401, error="That token is invalid or has expired.")
    if not identity.operator:
        return _login_page(request, status_code=401, error="That token does not carry the operator role.")
    now = clock.now()
    expires_at = now + settings.dashboard_session_seconds
    secret, _ = await run_in_threadpool(
        db.transact, engine, sessions.start, tenant=identity.tenant, user=identity.user, now=now,
        expires_at=expires_at,
    )  # fmt: skip
    response = RedirectResponse("/ui", status_code=303)
    _set_cookie(request, response, SESSION_COOKIE, secret)
    log.info("dashboard sign-in: %s/%s", identity.tenant, identity.user)
    return response


@router.post("/logout")
async def logout(request: Request, visitor: VisitorDep, engine: EngineDep) -> Response:
    """End the session and go back to the sign-in form."""
    posted = await operator_form(request, visitor)
    if isinstance(posted, Response):
        return posted
    secret = request.cookies.get(SESSION_COOKIE)
    if secret:
        await run_in_threadpool(db.transact, engine, sessions.end, secret, clock.now())
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/ui", httponly=True, samesite="strict")
    return response


# --- forms that change something -------------------------------------------------------------------------


async def operator_form(
    request: Request, visitor: Identity | None
) -> tuple[Identity, dict[str, str]] | Response:
    """The operator posting and the form posted, or the response they get instead: a non-operator's
    (`refusal`), or 403 for a form under the session cookie that did not come from the dashboard's own
    page (another origin, not urlencoded, or without the session's CSRF token)."""
    who = operator_of(request, visitor)
    if isinstance(who, Response):
        return who
    session_csrf = getattr(request.state, "csrf", None)
    if session_csrf is None:  # the token came in the Authorization header: no ambient credential to forge
        return who, await read_form(request)
    refused = foreign(request)
    if refused is not None:
        return refused
    form = await read_form(request)
    if not hmac.compare_digest(form.get("csrf", ""), session_csrf):
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
    level: str  # "ok" | "error"
    text: str

    def encode(self) -> str:
        return quote(f"{self.level}:{self.text}", safe="")

    @classmethod
    def decode(cls, raw: str) -> Flash | None:
        level, sep, text = unquote(raw).partition(":")
        if not sep or level not in {"ok", "error"}:
            return None
        return cls(level, text[:400])


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form fields (first value of each); an oversized or undecodable body reads as empty."""
    fields = await _form_fields(request)
    return {name: values[0] for name, values in fields.items()}


async def read_form_values(request: Request, name: str) -> list[str]:
    """Every value of the form field `name` (a field repeated, as ticked checkboxes are), in order."""
    return (await _form_fields(request)).get(name, [])


async def _form_fields(request: Request) -> dict[str, list[str]]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    return parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)


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
    _set_cookie(request, response, FLASH_COOKIE, message.encode())
    return response


def read_flash(request: Request) -> Flash | None:
    raw = request.cookies.get(FLASH_COOKIE)
    return Flash.decode(raw) if raw else None


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
