"""`outbox-bridge`: run the processes, operate the store, print tokens."""

from __future__ import annotations

import socket
import sys
from enum import StrEnum
from typing import Annotated

import typer
from sqlalchemy.exc import SQLAlchemyError

from outbox_bridge import console, views
from outbox_bridge.batches import batches_app
from outbox_bridge.broker import topology
from outbox_bridge.broker.connection import queue_probe
from outbox_bridge.console import out
from outbox_bridge.core import clock, version
from outbox_bridge.core.durations import format_duration, parse_duration
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobs import jobs_app
from outbox_bridge.jobstore import db, heartbeats, migrate
from outbox_bridge.jobstore.overview import Liveness, overview
from outbox_bridge.kinds import kinds_app
from outbox_bridge.schedules import schedules_app
from outbox_bridge.status_text import print_status
from outbox_bridge.webhooks import webhooks_app
from outbox_bridge.worker import queues
from outbox_bridge.worker.readiness import first_line

app = typer.Typer(help="A durable job system: HTTP API, outbox relay, RabbitMQ consumers, SQLite baseline.")
db_app = typer.Typer(help="Create and migrate the store.")
app.add_typer(db_app, name="db")
app.add_typer(jobs_app, name="jobs")
app.add_typer(batches_app, name="batches")
app.add_typer(kinds_app, name="kinds")
app.add_typer(schedules_app, name="schedules")
app.add_typer(webhooks_app, name="webhooks")


def _print_version(value: bool) -> None:
    if value:
        print(f"outbox-bridge {version.installed()}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the installed version and exit."
        ),
    ] = False,
) -> None:
    pass


@app.command()
def api(
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: Annotated[int, typer.Option(min=1)] = 1,
    access_log: Annotated[
        bool, typer.Option("--access-log", help="Log one line per request (default: ACCESS_LOG).")
    ] = False,
) -> None:
    """Serve the HTTP API."""
    from outbox_bridge.api.server import serve

    settings = console.load_settings()
    if access_log:
        settings = settings.model_copy(update={"access_log": True})
    console.require_safe_secret(settings)
    console.load_kinds(settings)
    console.require_current_store(settings)
    console.setup_logging("api")
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
    """Publish outbox rows to RabbitMQ under publisher confirms; sweep expired leases; prune the outbox; fire
    the schedules, those the kinds modules declare brought in first."""
    from outbox_bridge.relay.main import run

    settings = _with_metrics_port(console.load_settings(), metrics_port)
    console.load_kinds(settings)  # which declare the schedules in code
    console.require_current_store(settings)
    console.setup_logging("relay")
    raise typer.Exit(run(settings))


QueuesOption = Annotated[
    str | None,
    typer.Option(
        "--queues",
        metavar="QUEUES",
        help="Run only these named queues' jobs, comma-separated (fast,slow=2): a queue given =N gets N "
        "threads of its own, the others share --concurrency's. Default: every queue of the loaded kinds, on "
        "--concurrency threads.",
    ),
]
# What a command exits with when its options are wrong (as the option parser's own errors do).
USAGE = 2


def _pools(spec: str | None, concurrency: int, settings: Settings | None = None) -> list[queues.Pool]:
    """The pools of threads `--queues` asks for (after the kinds are loaded: by default their queues), or
    exit `USAGE` with one line saying what is wrong; with the broker's `settings`, also for a queue whose
    broker queue would be the dead-letter queue."""
    try:
        pools = queues.pools(spec, concurrency)
    except queues.QueuesError as exc:
        console.say(str(exc))
        raise typer.Exit(USAGE) from None
    clashes = [topology.clash(settings, q) for pool in pools for q in pool.queues] if settings else []
    for clash in filter(None, clashes):
        console.say(f"--queues: {clash}")
        raise typer.Exit(USAGE)
    return pools


@app.command()
def consumer(
    concurrency: Annotated[int, typer.Option(min=1)] = 4,
    queue_spec: QueuesOption = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Consume deliveries from RabbitMQ: claim, run, commit, then ack."""
    from outbox_bridge.consumer.main import run

    settings = _with_metrics_port(console.load_settings(), metrics_port)
    console.load_kinds(settings)
    pools = _pools(queue_spec, concurrency, settings)
    console.require_current_store(settings)
    console.setup_logging("consumer")
    raise typer.Exit(run(settings, pools))


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1)] = 1,
    queue_spec: QueuesOption = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Run jobs without a broker: poll the store's jobs table and run what it claims."""
    from outbox_bridge.baseline.worker import run

    settings = _with_metrics_port(console.load_settings(), metrics_port)
    console.load_kinds(settings)
    pools = _pools(queue_spec, concurrency)
    console.require_current_store(settings)
    console.setup_logging("worker")
    raise typer.Exit(run(settings, pools))


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

    raise typer.Exit(run(console.load_settings(), broker=broker.value, keep_running=keep_running, port=port))


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """Benchmark the broker path against the broker-less workers (see `outbox-bridge bench --help`)."""
    # The benchmark is imported here only: no other command, and no runtime module, loads `bench` or the
    # numpy and matplotlib of its optional extra.
    from outbox_bridge.bench import INSTALL_HINT, missing_extras

    missing = missing_extras()
    if missing:
        console.refuse(f"bench needs {' and '.join(missing)}, from the bench extra: {INSTALL_HINT}")
    from outbox_bridge.bench.runner import main

    raise typer.Exit(main(ctx.args))


def _token_name(value: str) -> str:
    """A tenant or user name a token may carry, else the option's usage error."""
    from outbox_bridge.api.auth import NAME_RULE, is_valid_name

    if not is_valid_name(value):
        raise typer.BadParameter(f"must be {NAME_RULE}")
    return value


@app.command()
def token(
    tenant: Annotated[str, typer.Option(callback=_token_name)],
    user: Annotated[str, typer.Option(callback=_token_name)],
    operator: bool = typer.Option(False, "--operator", help="Grant the operator role (dashboard)."),
    ttl: Annotated[
        str | None,
        typer.Option(
            "--ttl",
            metavar="DURATION",
            help="How long the token is valid (90s, 15m, 12h, 30d), at most TOKEN_MAX_TTL_SECONDS; "
            "default a day, or TOKEN_MAX_TTL_SECONDS when shorter.",
        ),
    ] = None,
) -> None:
    """Print a bearer token for TENANT/USER (each 1 to 128 characters of A-Za-z0-9._:@-), valid for --ttl
    (default a day, or TOKEN_MAX_TTL_SECONDS when shorter), with AUTH_ISSUER and AUTH_AUDIENCE when they
    are set."""
    from outbox_bridge.api.auth import TokenPolicy

    settings = console.load_settings()
    console.require_safe_secret(settings)
    ttl_seconds = None if ttl is None else _token_ttl(ttl, settings.token_max_ttl_seconds)
    policy = TokenPolicy.of(settings)
    print(policy.issue(tenant=tenant, user=user, operator=operator, ttl_seconds=ttl_seconds))


def _token_ttl(text: str, max_ttl_seconds: int) -> int:
    """The seconds `--ttl` names, else the one line that says why no token is printed: not a duration,
    or longer than the api accepts (TOKEN_MAX_TTL_SECONDS)."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        console.refuse(f"--ttl {exc}")
    if seconds > max_ttl_seconds:
        longest = format_duration(max_ttl_seconds)
        console.refuse(
            f"--ttl {text} is longer than TOKEN_MAX_TTL_SECONDS ({longest}): the api would refuse the token; "
            f"give at most {longest}, or raise TOKEN_MAX_TTL_SECONDS where the api runs"
        )
    return seconds


@db_app.command("init")
def db_init() -> None:
    """Create the database (file and directory for SQLite), the results directory, and migrate the schema."""
    settings = console.load_settings()
    url = console.redacted(settings.database_url)
    engine = db.make_engine(settings, "cli")
    try:
        migrate.init_schema(settings, engine)
    except OSError as exc:
        where = exc.filename or url
        console.refuse(
            f"cannot create the store: {exc.strerror or exc} ({where}); point DATABASE_URL (and RESULTS_DIR) "
            "at a directory you can write, e.g. DATABASE_URL=sqlite:///./data/jobs.db"
        )
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        console.refuse(console.unreachable(url, first_line(exc)))
    out.print(f"store ready at schema {migrate.current_revision(engine)}: {url}")


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply schema migrations up to REVISION (default: the latest) to an existing store."""
    settings = console.load_settings()
    console.require_sqlite_file(settings)
    engine = db.make_engine(settings, "cli")
    try:
        before = migrate.current_revision(engine)
        migrate.upgrade(engine, revision)
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        console.refuse(console.unreachable(console.redacted(settings.database_url), first_line(exc)))
    out.print(f"schema {before or 'empty'} -> {migrate.current_revision(engine)}")


# `status` exits with this when it printed a warning (1: the store did not answer; 2: a usage error).
WARNED = 3


@app.command()
def status(as_json: console.JsonOption = False) -> None:
    """The dashboard's figures in the terminal: warnings first (in red), who is alive and who is lost (with
    the jobs each holds), then the jobs. Exits 0 when there is nothing to warn about, 3 when it printed a
    warning (`--json` too: its `warnings`), 1 when the store did not answer: a script or a cron job can act
    on it."""
    settings, engine = console.open_store()
    now = clock.now()
    view = db.read(engine, overview, now, Liveness.of(settings))
    dead_letters = queue_probe(settings, settings.dead_letter_queue)
    if as_json:
        console.print_json(views.status_document(view, settings.dead_letter_queue, dead_letters))
    else:
        print_status(out, console.table, view, now, (settings.dead_letter_queue, dead_letters))
    if view.alerts:
        raise typer.Exit(WARNED)


@app.command()
def healthcheck(role: Annotated[Role, typer.Argument(help="The role of the process to look for.")]) -> None:
    """Exit 0 when a process of ROLE on this host has recorded a heartbeat lately, else 1 (for container
    healthchecks: a relay, consumer or worker that is up but no longer beating is unhealthy)."""
    settings = console.load_settings()
    engine = db.make_engine(settings, "cli")
    try:
        live = db.read(engine, heartbeats.alive, clock.now(), settings.alive_within_seconds)
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        console.refuse(f"the store did not answer: {first_line(exc)}")
    finally:
        engine.dispose()
    host = socket.gethostname()
    if not any(p.role == role.value and p.host == host for p in live):
        console.refuse(
            f"no {role.value} on {host} has recorded a heartbeat in {settings.alive_within_seconds:.0f}s"
        )


def main() -> None:
    """The console script. A store that stops answering part-way through a command ends it with one line,
    as the checks before it do, not a traceback."""
    try:
        app()
    except (db.StoreUnavailable, SQLAlchemyError) as exc:
        console.say(
            f"the store stopped answering: {first_line(exc)}; nothing more was done, run the command again "
            "once the database answers"
        )
        sys.exit(1)
