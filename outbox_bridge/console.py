"""What every command shares: the two consoles, one-line refusals, the settings and a store that answers at
the code's schema revision."""

from __future__ import annotations

import getpass
import json
import os
import sys
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine

from outbox_bridge.core.settings import SecretFileError, Settings, load
from outbox_bridge.jobstore import db
from outbox_bridge.telemetry import logs
from outbox_bridge.worker.readiness import store_not_ready

# On a terminal, rich fits tables to its width; into a pipe or a file nothing is cut or wrapped (whole ids,
# whole messages) and tables are plain columns a script can split on whitespace.
out = Console()
if not out.is_terminal:
    out = Console(width=1_000_000)
err = Console(stderr=True)
IdArgument = Annotated[
    str, typer.Argument(metavar="ID", help="A job id, or enough of its start to name one job.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document instead (for scripts).")]


def table(**options: Any) -> Table:
    return Table(**options) if out.is_terminal else Table(box=None, **options)


def print_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def load_settings() -> Settings:
    """The settings, or exit 1 naming the environment variable that does not hold a valid value."""
    try:
        return load()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]).upper() if first["loc"] else "a setting"
        refuse(f"{name} is not valid: {first['msg']}; fix it in the environment or in .env")
    except SecretFileError as exc:
        refuse(str(exc))


def setup_logging(name: str) -> None:
    """Log to stderr in LOG_FORMAT (`telemetry.logs.configure`), as the process `name`."""
    settings = load()
    logs.configure(name, settings.log_format, job_events=settings.log_job_events)
    if settings.stats_dir is not None:
        db.start_stats_writer(settings.stats_dir, name)


def require_current_store(settings: Settings) -> None:
    """Exit 1 with a message saying what to do unless the store answers at the code's schema revision: a
    missing SQLite file is not created, an unmigrated database is not served, an unreachable one is named."""
    ready_engine(settings).dispose()


def ready_engine(settings: Settings) -> Engine:
    """An engine on a store that answers at the code's schema revision, else exit 1 with one line saying
    what is wrong and what to run. Creates nothing: only `db init` makes a store."""
    url = redacted(settings.database_url)
    require_sqlite_file(settings)
    engine = db.make_engine(settings, "cli")
    problem = store_not_ready(engine)
    if problem is None:
        return engine
    engine.dispose()
    if problem.reachable:
        refuse(f"store at {url} is not migrated: {problem.reason}")
    refuse(unreachable(url, problem.reason))


def unreachable(url: str, reason: str) -> str:
    return (
        f"cannot reach the store at {url}: {reason}; start the database server or point DATABASE_URL at one"
    )


def require_sqlite_file(settings: Settings) -> None:
    """Exit 1 when the SQLite file the settings name is missing: only `db init` creates one."""
    path = db.sqlite_path(settings)
    if path is not None and not path.exists():
        refuse(f"no store at {redacted(settings.database_url)}: run `outbox-bridge db init` first")


def require_safe_secret(settings: Settings) -> None:
    """Exit 1 saying how to make a secret when AUTH_SECRET is one anybody could sign tokens with (unless
    OUTBOX_BRIDGE_DEV=1)."""
    from outbox_bridge.api.auth import UnsafeSecret, check_secret

    try:
        check_secret(settings)
    except UnsafeSecret as exc:
        refuse(str(exc))


def load_kinds(settings: Settings) -> None:
    """Load the deployment's kinds (OUTBOX_BRIDGE_KINDS, the entry points), or exit 1 in one line naming what
    did not load."""
    from outbox_bridge.handlers.registry import KindError, load

    try:
        load(settings.outbox_bridge_kinds)
    except KindError as exc:
        refuse(str(exc))


def refuse(message: str) -> NoReturn:
    say(message)
    raise typer.Exit(1)


def say(message: str) -> None:
    err.print(f"outbox-bridge: {message}", markup=False, highlight=False, soft_wrap=True)


def redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def open_store() -> tuple[Settings, Engine]:
    """The settings and an engine on a current store (else exit 1 saying what to run)."""
    settings = load_settings()
    return settings, ready_engine(settings)


def os_user() -> str:
    """Who runs this command, as operator actions record it: the OS user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container), and no LOGNAME/USER either
        return f"uid:{os.getuid()}"
