"""The operator dashboard at `/ui`: server-rendered HTML over the same figures as `outbox-bridge status`, and
the same operator actions as `outbox-bridge jobs requeue|resolve`.

Only operators see it: a bearer token (HS256, `AUTH_SECRET`) whose claims carry `role: operator`, sent either
as `Authorization: Bearer ...` or, for a browser, as the HttpOnly, SameSite=Strict cookie that the sign-in
form at `/ui/login` sets. No valid token: 401 and the sign-in form. A valid token without the operator role:
404, as if there were no dashboard. Because the cookie is SameSite=Strict, another site cannot make a
signed-in browser post the action forms.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from api.auth import Identity, InvalidToken
from api.deps import BearerDep, EngineDep, SettingsDep, token_identity
from api.liveness import liveness_block
from broker.connection import queue_depth
from core import clock
from core.settings import Settings
from jobstore import db, operator, queries
from jobstore.errors import InvalidTransition, JobNotFound
from jobstore.overview import Liveness, Overview, overview
from jobstore.records import Attempt, Job
from jobstore.states import OPERATOR_REQUEUEABLE, RESOLVABLE_TO, State

log = logging.getLogger(__name__)

SESSION_COOKIE = "outbox_bridge_operator"
FLASH_COOKIE = "outbox_bridge_flash"
DEFAULT_REFRESH_SECONDS = 5
MAX_REFRESH_SECONDS = 300
MAX_FORM_BYTES = 16 * 1024
MAX_NOTE_CHARS = 500

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
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


def refusal(request: Request, identity: Identity | None) -> Response | None:
    """None for an operator. Otherwise what a non-operator gets: the sign-in form with 401 for a missing,
    invalid or expired token, a plain 404 for a valid token without the operator role."""
    if identity is None:
        return _login_page(request, status_code=401)
    if not identity.operator:
        return _not_found(request)
    return None


def _login_page(request: Request, *, status_code: int, error: str | None = None) -> Response:
    response = templates.TemplateResponse(request, "login.html", {"error": error}, status_code=status_code)
    if status_code == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _not_found(request: Request) -> Response:
    return templates.TemplateResponse(request, "not_found.html", {}, status_code=404)


def _dead_letters(settings: Settings) -> int | None:
    """How many messages wait in `jobs.dead`; None when the broker does not answer within a second."""
    return queue_depth(settings, settings.dead_letter_queue, timeout=1.0)


# --- sign in and out -------------------------------------------------------------------------------------


@router.get("/login")
def login_form(request: Request) -> Response:
    """The sign-in form: paste a token from `outbox-bridge token --operator`."""
    return _login_page(request, status_code=200)


@router.post("/login")
async def login(request: Request, settings: SettingsDep) -> Response:
    """Verify the posted token; an operator's becomes the session cookie and goes to /ui (303). Anything
    else gets the form again with 401 and no cookie."""
    token = (await _form(request)).get("token", "").strip()
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


# --- the pages -------------------------------------------------------------------------------------------


@router.get("")
@router.get("/")
def dashboard(request: Request, visitor: VisitorDep, settings: SettingsDep, engine: EngineDep) -> Response:
    """The overview: counts by state, outbox backlog, throughput, recent jobs, and the dead and unknown
    lists with their actions. Refreshes itself every few seconds (`?refresh=0` pauses it)."""
    refused = refusal(request, visitor)
    if refused is not None:
        return refused
    now = clock.now()
    try:
        view = db.read(engine, overview, now, Liveness.of(settings))
    except db.StoreUnavailable as exc:
        return _unavailable(request, exc)
    refresh = refresh_seconds(request.query_params.get("refresh"))
    context = {
        **_page_context(request, now, refresh),
        "view": view,
        "counts": [(state, view.counts.get(state.value, 0)) for state in State],
        "total": sum(view.counts.values()),
        "chart": throughput_chart(view, now),
        "dead_letters": _dead_letters(settings),
        "liveness": liveness_block(view),
    }
    return _with_flash(request, templates.TemplateResponse(request, "dashboard.html", context))


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """One job with every attempt (epoch, worker, outcome, external effect), and its actions."""
    refused = refusal(request, visitor)
    if refused is not None:
        return refused
    now = clock.now()
    try:
        found = db.read(engine, _job_and_attempts, job_id)
    except db.StoreUnavailable as exc:
        return _unavailable(request, exc)
    if found is None:
        return _not_found(request)
    job, attempts = found
    context = {**_page_context(request, now, 0), "job": job, "attempts": attempts}
    return _with_flash(request, templates.TemplateResponse(request, "job.html", context))


def _job_and_attempts(conn: Connection, job_id: str) -> tuple[Job, list[Attempt]] | None:
    job = queries.get_job(conn, job_id)
    return None if job is None else (job, queries.attempts_of(conn, job_id))


def _page_context(request: Request, now: float, refresh: int) -> dict[str, Any]:
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return {
        "now": now,
        "refresh": refresh,
        "back": path,
        "flash": _read_flash(request),
        "age": age,
        "iso": clock.isoformat,
        "requeueable": OPERATOR_REQUEUEABLE,
        "resolutions": sorted(s.value for s in RESOLVABLE_TO),
        "State": State,
    }


def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("dashboard: store unavailable: %s", exc)
    return templates.TemplateResponse(
        request, "unavailable.html", {"refresh": DEFAULT_REFRESH_SECONDS}, status_code=503
    )


# --- operator actions ------------------------------------------------------------------------------------


@router.post("/jobs/{job_id}/requeue")
async def requeue(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs requeue` from the page: a dead or unknown job goes back to the queue with a fresh
    budget. Redirects back (303) with a flash saying what happened, including a refusal."""
    refused = refusal(request, visitor)
    if refused is not None:
        return refused
    form = await _form(request)
    message = await run_in_threadpool(_apply, engine, "requeued", operator.requeue, job_id, clock.now())
    return _redirect_back(request, form.get("back"), message)


@router.post("/jobs/{job_id}/resolve")
async def resolve(request: Request, job_id: str, visitor: VisitorDep, engine: EngineDep) -> Response:
    """`outbox-bridge jobs resolve` from the page: settle an unknown job as succeeded or failed, with a note
    saying how the operator knows. Redirects back (303) with a flash."""
    refused = refusal(request, visitor)
    if refused is not None:
        return refused
    form = await _form(request)
    outcome, note = form.get("outcome", ""), form.get("note", "").strip()
    if outcome not in {s.value for s in RESOLVABLE_TO}:
        message = Flash("error", "Choose what really happened: succeeded or failed.")
    elif not note or len(note) > MAX_NOTE_CHARS:
        message = Flash("error", f"Say how you know, in 1 to {MAX_NOTE_CHARS} characters.")
    else:
        message = await run_in_threadpool(
            _apply, engine, "resolved", operator.resolve, job_id, State(outcome), note, clock.now()
        )
    return _redirect_back(request, form.get("back"), message)


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


def _apply(engine: Engine, action: str, fn: Any, job_id: str, *args: Any) -> Flash:
    """Run one store action in its own transaction, as the CLI does, and say how it went."""
    try:
        job = db.transact(engine, fn, job_id, *args)
    except (JobNotFound, InvalidTransition) as exc:
        return Flash("error", f"Not {action}: {exc}.")
    except db.StoreUnavailable as exc:
        return Flash("error", f"Not {action}: the store is unavailable ({exc}); try again.")
    log.info("dashboard: %s job %s, now %s", action, job.id, job.state.value)
    return Flash("ok", f"Job {job.id} {action}: now {job.state.value}.")


async def _form(request: Request) -> dict[str, str]:
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


def _redirect_back(request: Request, target: str | None, message: Flash) -> Response:
    response = RedirectResponse(safe_back(target), status_code=303)
    _set_cookie(request, response, FLASH_COOKIE, message.encode())
    return response


def _read_flash(request: Request) -> Flash | None:
    raw = request.cookies.get(FLASH_COOKIE)
    return Flash.decode(raw) if raw else None


def _with_flash(request: Request, response: Response) -> Response:
    """A flash is shown once: the page that shows it also deletes it."""
    if FLASH_COOKIE in request.cookies:
        response.delete_cookie(FLASH_COOKIE, path="/ui", httponly=True, samesite="strict")
    return response


# --- presentation ----------------------------------------------------------------------------------------


def refresh_seconds(raw: str | None) -> int:
    """The auto-refresh period asked for in `?refresh=`: 0 turns it off; bad values give the default."""
    try:
        value = int(raw) if raw is not None else DEFAULT_REFRESH_SECONDS
    except ValueError:
        return DEFAULT_REFRESH_SECONDS
    return min(max(value, 0), MAX_REFRESH_SECONDS)


def age(now: float, then: float | None) -> str:
    """How long ago `then` was, in the largest sensible unit: `42s`, `7m`, `3h`, `2d`."""
    if then is None:
        return "-"
    seconds = max(0.0, now - then)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    count: int
    title: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    baseline: float
    bars: list[Bar]
    total: int
    peak: int


def throughput_chart(view: Overview, now: float, *, width: int = 600, height: int = 140) -> Chart:
    """Bars for jobs finished per minute, oldest on the left, scaled to the busiest minute."""
    baseline = height - 20.0
    slots = max(1, len(view.throughput))
    slot = width / slots
    peak = max((n for _, n in view.throughput), default=0)
    bars = []
    for i, (start, count) in enumerate(view.throughput):
        bar_height = 0.0 if peak == 0 else (baseline - 16) * count / peak
        ago = max(0, round((now - start) / 60))
        title = f"{count} finished in the minute starting {ago} min ago ({clock.isoformat(start)})"
        bars.append(Bar(i * slot + 4, baseline - bar_height, slot - 8, bar_height, count, title))
    return Chart(width, height, baseline, bars, sum(b.count for b in bars), peak)
