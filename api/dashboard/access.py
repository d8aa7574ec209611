"""Who may see the dashboard (operators only), signing in and out, and the plumbing every page and action
shares: the templates, the one-shot flash message, posted forms and where to go back to."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from outbox_bridge.api.auth import Identity, InvalidToken
from outbox_bridge.api.dashboard.charts import DEFAULT_REFRESH_SECONDS
from outbox_bridge.api.deps import BearerDep, SettingsDep, token_identity
from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore.states import OPERATOR_REQUEUEABLE, RESOLVABLE_TO, State

log = logging.getLogger(__name__)

SESSION_COOKIE = "outbox_bridge_operator"
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


async def _visitor(request: Request, settings: SettingsDep, credentials: BearerDep) -> Identity | None:
    """Who is asking: the bearer token from the Authorization header (read as the api's routes read it), else
    the one in the dashboard's session cookie; None when neither is a token the deployment accepts."""
    token = credentials.credentials if credentials is not None else request.cookies.get(SESSION_COOKIE)
    return _identity(settings, token)


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
async def login(request: Request, settings: SettingsDep) -> Response:
    """Verify the posted token; an operator's becomes the session cookie and goes to /ui (303). Anything
    else gets the form again with 401 and no cookie."""
    token = (await read_form(request)).get("token", "").strip()
    identity = _identity(settings, token)
    if identity is None:
        return _login_page(request, status_code=401, error="That token is invalid or has expired.")
    if not identity.operator:
        return _login_page(request, status_code=401, error="That token does not carry the operator role.")
    response = RedirectResponse("/ui", status_code=303)
    _set_cookie(request, response, SESSION_COOKIE, token)
    log.info("dashboard sign-in: %s/%s", identity.tenant, identity.user)
    return response


@router.post("/logout")
def logout() -> Response:
    """Forget the session cookie and go back to the sign-in form."""
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/ui", httponly=True, samesite="strict")
    return response


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
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


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
