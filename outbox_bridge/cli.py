"""`outbox-bridge`: run the processes, operate the store, print tokens."""

from __future__ import annotations

import json
import logging
import socket
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from broker.connection import queue_depth
from core import clock
from core.durations import format_duration, parse_duration
from core.settings import Settings, load
from jobstore import db, heartbeats, migrate, operator, queries
from jobstore.errors import InvalidTransition, JobNotFound
from jobstore.overview import Liveness, overview
from jobstore.records import Job
from jobstore.states import State
from outbox_bridge import views
from outbox_bridge.status_text import print_status
from worker.readiness import first_line, store_not_ready

app = typer.Typer(help="A durable job system: HTTP API, outbox relay, RabbitMQ consumers, SQLite baseline.")
db_app = typer.Typer(help="Create and migrate the store.")
jobs_app = typer.Typer(help="Inspect and operate on jobs.")
app.add_typer(db_app, name="db")
app.add_typer(jobs_app, name="jobs")
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


def _table(**options: Any) -> Table:
    return Table(**options) if out.is_terminal else Table(box=None, **options)


def _print_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def _settings() -> Settings:
    """The settings, or exit 1 naming the environment variable that does not hold a valid value."""
    try:
        return load()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]).upper() if first["loc"] else "a setting"
        _refuse(f"{name} is not valid: {first['msg']}; fix it in the environment or in .env")


def _setup_logging(name: str) -> None:
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {name}[%(process)d] %(levelname)s %(name)s: %(message)s"
    )
    stats_dir = load().stats_dir
    if stats_dir is not None:
        db.start_stats_writer(stats_dir, name)


def _require_current_store(settings: Settings) -> None:
    """Exit 1 with a message saying what to do unless the store answers at the code's schema revision: a
    missing SQLite file is not created, an unmigrated database is not served, an unreachable one is named."""
    _ready_engine(settings).dispose()


def _ready_engine(settings: Settings) -> Engine:
    """An engine on a store that answers at the code's schema revision, else exit 1 with one line saying
    what is wrong and what to run. Creates nothing: only `db init` makes a store."""
    url = _redacted(settings.database_url)
    _require_sqlite_file(settings)
    engine = db.make_engine(settings)
    problem = store_not_ready(engine)
    if problem is None:
        return engine
    engine.dispose()
    if problem.reachable:
        _refuse(f"store at {url} is not migrated: {problem.reason}")
    _refuse(_unreachable(url, problem.reason))


def _unreachable(url: str, reason: str) -> str:
    return (
        f"cannot reach the store at {url}: {reason}; start the database server or point DATABASE_URL at one"
    )


def _require_sqlite_file(settings: Settings) -> None:
    """Exit 1 when the SQLite file the settings name is missing: only `db init` creates one."""
    path = db.sqlite_path(settings)
    if path is not None and not path.exists():
        _refuse(f"no store at {_redacted(settings.database_url)}: run `outbox-bridge db init` first")


def _require_safe_secret(settings: Settings) -> None:
    """Exit 1 saying how to make a secret when AUTH_SECRET is one anybody could sign tokens with (unless
    OUTBOX_BRIDGE_DEV=1)."""
    from api.auth import UnsafeSecret, check_secret

    try:
        check_secret(settings)
    except UnsafeSecret as exc:
        _refuse(str(exc))


def _refuse(message: str) -> NoReturn:
    _say(message)
    raise typer.Exit(1)


def _say(message: str) -> None:
    err.print(f"outbox-bridge: {message}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def api(
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: Annotated[int, typer.Option(min=1)] = 1,
) -> None:
    """Serve the HTTP API."""
    from api.server import serve

    settings = _settings()
    _require_safe_secret(settings)
    _require_current_store(settings)
    _setup_logging("api")
    serve(settings, host=host, port=port, workers=workers)


MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        min=1, max=65535, help="Serve Prometheus /metrics on this port (default: METRICS_PORT; unset: off)."
    ),
]


def _with_metrics_port(settings: Settings, port: int | None) -> Settings:
    return settings if port is None else settings.model_copy(update={"metrics_port": port})


@app.command()
def relay(metrics_port: MetricsPortOption = None) -> None:
    """Publish outbox rows to RabbitMQ under publisher confirms; sweep expired leases; prune the outbox."""
    from relay.main import run

    settings = _with_metrics_port(_settings(), metrics_port)
    _require_current_store(settings)
    _setup_logging("relay")
    raise typer.Exit(run(settings))


@app.command()
def consumer(
    concurrency: Annotated[int, typer.Option(min=1)] = 4, metrics_port: MetricsPortOption = None
) -> None:
    """Consume deliveries from RabbitMQ: claim, run, commit, then ack."""
    from consumer.main import run

    settings = _with_metrics_port(_settings(), metrics_port)
    _require_current_store(settings)
    _setup_logging("consumer")
    raise typer.Exit(run(settings, concurrency=concurrency))


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1)] = 1, metrics_port: MetricsPortOption = None
) -> None:
    """The SQLite-only baseline: poll the jobs table with BEGIN IMMEDIATE and run what it claims."""
    from baseline.worker import run

    settings = _with_metrics_port(_settings(), metrics_port)
    _require_current_store(settings)
    _setup_logging("worker")
    raise typer.Exit(run(settings, concurrency=concurrency))


class Role(StrEnum):
    relay = "relay"
    consumer = "consumer"
    worker = "worker"


class Broker(StrEnum):
    rabbitmq = "rabbitmq"
    none = "none"


@app.command()
def demo(
    broker: Broker = Broker.rabbitmq,
    keep_running: bool = typer.Option(False, "--keep-running", help="Leave the stack up afterwards."),
    port: Annotated[int | None, typer.Option(help="The api's port (default: 8000 when free).")] = None,
) -> None:
    """Start a local stack and drive a realistic scenario through it."""
    from outbox_bridge.demo import run

    raise typer.Exit(run(_settings(), broker=broker.value, keep_running=keep_running, port=port))


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """Benchmark the broker path against the SQLite-only baseline (see `outbox-bridge bench --help`)."""
    # The benchmark is imported here only: no other command, and no runtime module, loads `bench` or the
    # numpy and matplotlib of its optional extra.
    from bench import INSTALL_HINT, missing_extras

    missing = missing_extras()
    if missing:
        _refuse(f"bench needs {' and '.join(missing)}, from the bench extra: {INSTALL_HINT}")
    from bench.runner import main

    raise typer.Exit(main(ctx.args))


def _token_name(value: str) -> str:
    """A tenant or user name a token may carry, else the option's usage error."""
    from api.auth import NAME_RULE, is_valid_name

    if not is_valid_name(value):
        raise typer.BadParameter(f"must be {NAME_RULE}")
    return value


@app.command()
def token(
    tenant: Annotated[str, typer.Option(callback=_token_name)],
    user: Annotated[str, typer.Option(callback=_token_name)],
    operator: bool = typer.Option(False, "--operator", help="Grant the operator role (dashboard)."),
) -> None:
    """Print a bearer token for TENANT/USER (each 1 to 128 characters of A-Za-z0-9._:@-), valid for a day
    (or TOKEN_MAX_TTL_SECONDS when shorter), with AUTH_ISSUER and AUTH_AUDIENCE when they are set."""
    from api.auth import TokenPolicy

    settings = _settings()
    _require_safe_secret(settings)
    print(TokenPolicy.of(settings).issue(tenant=tenant, user=user, operator=operator))


@db_app.command("init")
def db_init() -> None:
    """Create the database (file and directory for SQLite), the results directory, and migrate the schema."""
    settings = _settings()
    url = _redacted(settings.database_url)
    engine = db.make_engine(settings)
    try:
        migrate.init_schema(settings, engine)
    except OSError as exc:
        where = exc.filename or url
        _refuse(
            f"cannot create the store: {exc.strerror or exc} ({where}); point DATABASE_URL (and RESULTS_DIR) "
            "at a directory you can write, e.g. DATABASE_URL=sqlite:///./data/jobs.db"
        )
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        _refuse(_unreachable(url, first_line(exc)))
    out.print(f"store ready at schema {migrate.current_revision(engine)}: {url}")


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply schema migrations up to REVISION (default: the latest) to an existing store."""
    settings = _settings()
    _require_sqlite_file(settings)
    engine = db.make_engine(settings)
    try:
        before = migrate.current_revision(engine)
        migrate.upgrade(engine, revision)
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        _refuse(_unreachable(_redacted(settings.database_url), first_line(exc)))
    out.print(f"schema {before or 'empty'} -> {migrate.current_revision(engine)}")


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _engine() -> tuple[Settings, Engine]:
    """The settings and an engine on a current store (else exit 1 saying what to run)."""
    settings = _settings()
    return settings, _ready_engine(settings)


@app.command()
def status(as_json: JsonOption = False) -> None:
    """The dashboard's figures in the terminal: warnings first (in red), who is alive, then the jobs."""
    settings, engine = _engine()
    now = clock.now()
    view = db.read(engine, overview, now, Liveness.of(settings))
    dead_letters = queue_depth(settings, settings.dead_letter_queue)
    if as_json:
        _print_json(views.status_document(view, settings.dead_letter_queue, dead_letters))
        return
    print_status(out, _table, view, now, (settings.dead_letter_queue, dead_letters))


@app.command()
def healthcheck(role: Annotated[Role, typer.Argument(help="The role of the process to look for.")]) -> None:
    """Exit 0 when a process of ROLE on this host has recorded a heartbeat lately, else 1 (for container
    healthchecks: a relay, consumer or worker that is up but no longer beating is unhealthy)."""
    settings = _settings()
    engine = db.make_engine(settings)
    try:
        live = db.read(engine, heartbeats.alive, clock.now(), settings.alive_within_seconds)
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        _refuse(f"the store did not answer: {first_line(exc)}")
    finally:
        engine.dispose()
    host = socket.gethostname()
    if not any(p.role == role.value and p.host == host for p in live):
        _refuse(f"no {role.value} on {host} has recorded a heartbeat in {settings.alive_within_seconds:.0f}s")


@jobs_app.command("list")
def jobs_list(
    state: State | None = None,
    tenant: str | None = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="Where the previous page ended (its next_cursor).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List jobs, newest first."""
    _, engine = _engine()
    try:
        page = db.read(engine, queries.list_jobs, tenant=tenant, state=state, limit=limit, cursor=cursor)
    except queries.BadCursor:
        _refuse("--cursor is not a next_cursor that `jobs list --json` printed")
    if as_json:
        _print_json(views.list_document(page.items, page.next_cursor))
        return
    table = _table()
    for column in ("id", "tenant", "kind", "state", "attempts", "epoch", "created", "error"):
        table.add_column(column)
    for job in page.items:
        table.add_row(
            job.id,
            job.tenant,
            job.kind,
            job.state.value,
            str(job.attempts),
            str(job.epoch),
            clock.isoformat(job.created_at),
            job.error_code or "",
        )
    out.print(table)


@jobs_app.command("show")
def jobs_show(job_id: IdArgument, as_json: JsonOption = False) -> None:
    """Show one job and its attempts."""
    _, engine = _engine()
    job = _job_by_prefix(engine, job_id)
    attempts = db.read(engine, queries.attempts_of, job.id)
    if as_json:
        _print_json(views.show_document(job, attempts))
        return
    for name in ("id", "tenant", "owner", "kind", "state", "epoch", "attempts", "cancel_requested"):
        out.print(f"{name:>17}: {getattr(job, name)}")
    out.print(f"{'error':>17}: {job.error_code or '-'} {job.error_message or ''}")
    out.print(f"{'result attempt':>17}: {job.result_attempt_id or '-'}")
    table = _table(title="attempts")
    for column in ("epoch", "attempt", "worker", "outcome", "started", "ended", "external", "error"):
        table.add_column(column)
    for a in attempts:
        table.add_row(
            str(a.epoch),
            a.id,
            a.worker,
            a.outcome,
            clock.isoformat(a.started_at),
            clock.isoformat(a.ended_at) or "",
            "yes" if a.external_started_at else "",
            a.error_code or "",
        )
    out.print(table)


def _job_by_prefix(engine: Engine, prefix: str) -> Job:
    """The one job whose id starts with `prefix` (a whole id, or enough of one), else exit 1 saying how
    many matched."""
    match = db.read(engine, queries.match_id_prefix, prefix)
    if match.job is not None:
        return match.job
    if match.count == 0:
        _refuse(f"no job id starts with {prefix!r}: `outbox-bridge jobs list` shows the ids there are")
    _refuse(f"{match.count} jobs have ids starting with {prefix!r}: give more of the id")


def _operate(action: str, fn: Callable[..., Job], prefix: str, *args: object) -> None:
    """Run the operator action `fn(conn, job_id, *args)` on the job `prefix` names; exit 1 with one line when
    there is no such job or its state does not allow the action."""
    _, engine = _engine()
    job_id = _job_by_prefix(engine, prefix).id
    try:
        job: Job = db.transact(engine, fn, job_id, *args)
    except (JobNotFound, InvalidTransition) as exc:
        _refuse(str(exc))
    out.print(f"{action}: job {job.id} is now {job.state.value}")


@jobs_app.command("requeue")
def jobs_requeue(job_id: IdArgument) -> None:
    """Put a dead or unknown job back in the queue with a fresh attempt budget."""
    _operate("requeued", operator.requeue, job_id, clock.now())


class Resolution(StrEnum):
    succeeded = "succeeded"
    failed = "failed"


@jobs_app.command("resolve")
def jobs_resolve(
    job_id: IdArgument,
    outcome: Annotated[Resolution, typer.Option(help="What really happened.")],
    note: Annotated[str, typer.Option(help="How you know.")] = "checked by operator",
) -> None:
    """Settle an unknown job as succeeded or failed."""
    _operate("resolved", operator.resolve, job_id, State(outcome.value), note, clock.now())


@jobs_app.command("prune")
def jobs_prune(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Finished longer ago than this (7d, 12h, 30m, 90s); default JOB_RETENTION_SECONDS.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; remove nothing.")] = False,
) -> None:
    """Delete jobs finished longer ago than the retention, with their attempts, outbox rows and files, and
    remove attempt outputs that never became a result. `unknown` jobs stay until resolved."""
    from worker.retention import OutputSweep, preview_prune, prune_finished

    settings = _settings()
    age = _prune_age(older_than, settings)
    engine = _ready_engine(settings)
    now = clock.now()
    verb = "would remove" if dry_run else "removed"
    if age is None:
        out.print("finished jobs are kept: JOB_RETENTION_SECONDS is 0 (give --older-than to delete some)")
    else:
        cutoff = now - age
        pruned = (preview_prune if dry_run else prune_finished)(engine, settings, cutoff)
        out.print(
            f"{verb} {pruned.jobs} jobs finished more than {format_duration(age)} ago (before "
            f"{clock.isoformat(cutoff)}) and {pruned.files} of their files"
        )
    swept = OutputSweep().run(engine, settings, now, dry_run=dry_run)
    out.print(
        f"{verb} {swept.files} files of attempts that never became a result or of jobs no longer in the "
        f"store, and {swept.directories} directories of such jobs"
    )
    if dry_run:
        out.print("dry run: nothing was removed")


def _prune_age(older_than: str | None, settings: Settings) -> float | None:
    """The age `jobs prune` deletes finished jobs at: `--older-than`, else JOB_RETENTION_SECONDS, None when
    that is 0 (kept forever); exit 1 saying what a duration looks like when `--older-than` is not one."""
    if older_than is None:
        return settings.job_retention_seconds or None
    try:
        return parse_duration(older_than)
    except ValueError as exc:
        _refuse(f"--older-than: {exc}")


def main() -> None:
    """The console script. A store that stops answering part-way through a command ends it with one line,
    as the checks before it do, not a traceback."""
    try:
        app()
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        _say(
            f"the store stopped answering: {first_line(exc)}; nothing more was done, run the command again "
            "once the database answers"
        )
        sys.exit(1)
