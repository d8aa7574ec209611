"""Settings, read once from the environment (and an optional `.env`) and passed down explicitly."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from outbox_bridge.core import amqp_urls

# The built-in test kinds: accepted only in a development setup (OUTBOX_BRIDGE_DEV=1) or when ALLOWED_KINDS
# names them; they do nothing useful and can hold a worker for an hour (`sleep`).
TEST_KINDS = ("noop", "sleep", "flaky")
# The built-in example kinds, on the same terms: they show what a kind can do (an export to a file, a bounded
# agent, an external effect through a stub provider), and a deployment runs them only where it names them.
EXAMPLE_KINDS = ("document", "export", "notify")
# The built-in AUTH_SECRET: anyone can read it here, so only a development setup may sign with it.
DEV_AUTH_SECRET = "change-me-outbox-bridge-dev-secret-32b"
# A process is alive while its last heartbeat is at most this many HEARTBEAT_SECONDS old.
ALIVE_BEATS = 3
# How often a job may snooze (`outbox_bridge.Snooze`) unless MAX_SNOOZES says otherwise.
MAX_SNOOZES = 100


# The settings that hold a secret: each may be given as `<NAME>_FILE`, the path of a file that holds it (a
# Docker or Kubernetes secret), instead of in the environment.
SECRET_SETTINGS = ("auth_secret", "database_url", "rabbitmq_url", "metrics_token")


class SecretFileError(ValueError):
    """A `<NAME>_FILE` setting that cannot be used: unreadable, or given beside `<NAME>`."""


class SecretFiles(PydanticBaseSettingsSource):
    """`AUTH_SECRET_FILE=/run/secrets/auth_secret` and the like: the file's contents, without the line
    break that ends it, for each of `SECRET_SETTINGS`. Naming a setting both ways (`<NAME>` not empty) is
    refused."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = field_name.upper()
        path = os.environ.get(f"{name}_FILE")
        if field_name not in SECRET_SETTINGS or not path:
            return None, field_name, False
        if os.environ.get(name):  # set and not empty
            raise SecretFileError(f"{name} and {name}_FILE are both set: give the setting one way")
        try:
            return Path(path).read_text().rstrip("\r\n"), field_name, False
        except OSError as exc:
            raise SecretFileError(f"{name}_FILE={path} cannot be read: {exc.strerror or exc}") from exc

    def __call__(self) -> dict[str, Any]:
        found = {}
        for name, field in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(field, name)
            if value is not None:
                found[key] = value
        return found


# The validators of `Settings`' fields, each named in the class beside the fields it applies to.


def empty_is_unset(value: object) -> object:
    """`AUTH_ISSUER=` (set, but empty) means no issuer check, as when it is not set at all."""
    return None if value == "" else value


def split_kinds(value: object, info: ValidationInfo) -> object:
    """A comma-separated list; ALLOWED_KINDS set but empty means unset."""
    if isinstance(value, str):
        names = tuple(k.strip() for k in value.split(",") if k.strip())
        return names if names or info.field_name != "allowed_kinds" else None
    return value


def check_broker_addresses(value: str) -> str:
    """Every listed address is a URL pika can use (`core.amqp_urls.check`)."""
    amqp_urls.check(value)
    return value


# The stores' URL schemes: SQLite, and PostgreSQL through psycopg (its driver whether named or not).
DATABASE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")
DATABASE_URL_FORMS = (
    "sqlite:///path/to/jobs.db, postgresql://user:password@host:5432/db or postgresql+psycopg://..."
)


def check_database_url(value: str) -> str:
    """A URL of a store this code runs on (`DATABASE_SCHEMES`); `postgres://`, the scheme many providers hand
    out, is taken as `postgresql://`. Anything else is refused naming its scheme only (never the password)."""
    scheme, separator, rest = value.partition("://")
    if scheme == "postgres" or scheme.startswith("postgres+"):
        scheme = "postgresql" + scheme.removeprefix("postgres")
    if not separator or scheme not in DATABASE_SCHEMES:
        named = f"{scheme}://" if separator else "a URL without a scheme"
        raise ValueError(f"{named} is not a store this runs on: use {DATABASE_URL_FORMS}")
    return f"{scheme}://{rest}"


def split_pairs(value: object) -> object:
    """A comma-separated list of `kind=value`; each rate is checked (`limits.parse_rate`)."""
    if not isinstance(value, str):
        return value
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        kind, equals, limit = (part.strip() for part in item.partition("="))
        if not kind or not equals or not limit:
            raise ValueError(f"{item!r} is not kind=value")
        pairs[kind] = limit
    return pairs


def check_kind_caps(value: dict[str, int]) -> dict[str, int]:
    """Every kind's cap (`KIND_MAX_RUNNING`) is 1 or more."""
    for kind, cap in value.items():
        if cap < 1:
            raise ValueError(f"{kind}={cap}: a kind's cap is 1 or more")
    return value


def check_kind_rates(value: dict[str, str]) -> dict[str, str]:
    """Every kind's rate (`KIND_RATE_LIMITS`) is one `parse_rate` reads."""
    for kind, rate in value.items():
        parse_rate(f"{kind}={rate}", rate)
    return value


class Settings(BaseSettings):
    # Each field's docstring is its description, which docs/settings.md shows (`core/reference.py`). A
    # refused value is never repeated in the error: it may hold a password (`SECRET_SETTINGS`).
    model_config = SettingsConfigDict(
        env_file=".env", extra="ignore", frozen=True, use_attribute_docstrings=True, hide_input_in_errors=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """`<NAME>_FILE` secrets (`SecretFiles`: a `<NAME>` set and empty gives way to its file), then the
        environment, then `.env`."""
        return init_settings, SecretFiles(settings_cls), env_settings, dotenv_settings, file_secret_settings

    database_url: str = "sqlite:///./data/jobs.db"
    """The store. `sqlite:///./data/jobs.db` is a SQLite file (every process on one host, on a local disk);
    `postgresql+psycopg://user:password@host:5432/db` (or `postgresql://`, or `postgres://` as many providers
    write it) is a PostgreSQL server (add `?sslmode=verify-full` for TLS); any other scheme stops the process
    with one line that names the accepted ones. Every process of a deployment names the same store. On
    PostgreSQL a process's connections are named `outbox-bridge:<role>:<process id>`
    (`pg_stat_activity.application_name`); add `application_name=` to the URL to name them yourself."""
    rabbitmq_url: str = "amqp://guest:guest@localhost:5672/%2F"
    """The broker: `amqp://user:password@host:5672/vhost` (`%2F` is the vhost `/`), or `amqps://...:5671/...`
    for TLS. Options such as `heartbeat=` go in the query string. For a cluster, list every node's URL,
    comma-separated (a comma in a password is written `%2C`): a process connects to the first that answers
    and, when its connection is lost, tries the next one first. Relays and consumers use it; the api,
    `status` and relays read the dead-letter queue's depth through it; baseline workers do not use it."""
    auth_secret: str = DEV_AUTH_SECRET
    """The HS256 key that signs and checks bearer tokens, and from which the result links' key is derived.
    Set your own, at least 32 bytes: the built-in value is public, and `api` and `token` refuse it unless
    `OUTBOX_BRIDGE_DEV=1`. Changing it invalidates every token and every result link at once."""
    outbox_bridge_dev: bool = False
    """A development setup (the demo, the tests, the benchmark): the api and `token` accept a weak
    `AUTH_SECRET`, and the built-in test kinds (`noop`, `sleep`, `flaky`) and example kinds (`document`,
    `export`, `notify`) are accepted unless `ALLOWED_KINDS` says otherwise. Never in production."""
    token_max_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    """Bearer tokens whose `exp` is further ahead than this are refused (401), so a leaked token is useful
    for a bounded time. `token` mints tokens for a day, or for this long when it is shorter."""
    auth_issuer: str | None = Field(default=None, min_length=1)
    """When set, a token must carry this `iss` (`token` adds it). Set but empty means unset."""
    auth_audience: str | None = Field(default=None, min_length=1)
    """When set, a token must carry this `aud` (`token` adds it). Set but empty means unset."""
    dashboard_session_seconds: float = Field(default=8 * 3600.0, gt=0)
    """How long a dashboard sign-in lasts at most; it ends sooner when its token expires, at sign-out, or when
    AUTH_SECRET changes."""
    result_link_seconds: int = Field(default=900, gt=0, le=30 * 24 * 3600)
    """How long a job view's signed `result_url` serves the result without a token. Whoever holds a link
    can read the result until then, and no single link can be revoked: keep it short."""
    results_dir: Path = Path("./data/results")
    """Where attempts write their files (an export's CSV), one directory per job. The api serves results
    from it, consumers and workers write to it, and relays remove what the job retention deletes, so every
    one of them needs it mounted. It belongs to one store only."""
    lease_seconds: float = Field(default=30.0, gt=0)
    """A claim's lease: a running job's worker renews it every `min(1, LEASE_SECONDS / 3)` seconds, and a
    job whose lease ran out is settled by the sweeper (retried, or `unknown` after an external effect
    started). Longer tolerates longer stalls of a worker; shorter recovers a killed worker's jobs sooner.
    A consumer's AMQP heartbeat follows it (within 5 to 60 seconds)."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts a job gets before it is `dead`. Stored with each job when it is accepted: a change applies
    to jobs accepted afterwards."""
    max_body_bytes: int = Field(default=65536, ge=256)
    """Request bodies larger than this are refused with `413`. A reverse proxy in front should allow at
    least this much."""
    http_header_timeout_seconds: float = Field(default=10.0, gt=0)
    """A request's line and headers must arrive within this long of the connection opening (or of the
    previous answer on a kept-alive connection), else the connection is closed."""
    http_body_timeout_seconds: float = Field(default=30.0, gt=0)
    """A request's body must arrive within this long of its headers, else `400 body-timeout` and the
    connection is closed."""
    http_max_connections: int = Field(default=512, ge=1)
    """Connections one api process holds; one more is closed at once. Per process: `api --workers N` holds
    up to N times this, which must stay under the open-file limit (`ulimit -n`)."""
    http_max_connections_per_client: int = Field(default=64, ge=1)
    """Connections one api process holds from one client (one IPv4 address, or one IPv6 /64); one more from
    it is closed at once, so a single client never holds the whole `HTTP_MAX_CONNECTIONS`. Behind a reverse
    proxy every connection comes from the proxy: raise this to `HTTP_MAX_CONNECTIONS` there and bound each
    client at the proxy."""
    http_max_head_bytes: int = Field(default=16384, ge=1024)
    """A request's line and headers together; a larger head is answered `400 request-head-too-large` and
    its connection closed."""
    allowed_kinds: Annotated[tuple[str, ...] | None, NoDecode] = None
    """The kinds this deployment accepts, comma-separated (`export,notify`). Unset (or empty): every kind
    the process loaded but the built-in test kinds (`noop`, `sleep`, `flaky`) and example kinds (`document`,
    `export`, `notify`), which a development setup accepts too: name them here to run them in production."""
    outbox_bridge_kinds: Annotated[tuple[str, ...], NoDecode] = ()
    """Importable modules whose kinds the api, consumers and workers load at start, comma-separated
    (`teamapp.kinds`). A module that does not import stops the process at start."""

    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    """SQLite's durability: `FULL` survives power loss; `NORMAL` (opt-in, faster) survives process crashes
    only. Ignored on PostgreSQL."""
    store_lock_timeout_seconds: float = Field(default=5.0, gt=0)
    """How long one store transaction keeps waiting and retrying (for SQLite's write lock; on PostgreSQL
    after serialization failures, deadlocks and lost connections) before the store counts as unavailable:
    the api then answers `503`."""

    backoff_base_seconds: float = Field(default=1.0, ge=0)
    """The pause before a failed attempt's retry: about this long after the first failure, doubling with
    each further one up to `BACKOFF_MAX_SECONDS`, jittered between half and all of it. It also applies to a
    job retried after its lease expired. 0: retry at once."""
    backoff_max_seconds: float = Field(default=60.0, ge=0)
    """The longest pause before a retry (see `BACKOFF_BASE_SECONDS`). A kind's own `backoff=(base, cap)`
    replaces both for its jobs' retries."""
    max_snoozes: int = Field(default=MAX_SNOOZES, ge=0)
    """How often a job may snooze (`raise outbox_bridge.Snooze(seconds)`: due again later, no attempt
    spent); a snooze past that is a failed attempt with code `snoozed_too_often`. 0: every snooze is."""

    # Broker names (tests give each run its own).
    exchange: str = "jobs"
    """The durable direct exchange relays publish to. Every process of a deployment uses the same names."""
    queue: str = "jobs"
    """The durable quorum queue consumers take deliveries from, bound to `EXCHANGE`."""
    dead_letter_exchange: str = "jobs.dead"
    """Where RabbitMQ sends a message of `QUEUE` that was rejected or returned more than `DELIVERY_LIMIT`
    times."""
    dead_letter_queue: str = "jobs.dead"
    """The queue bound to `DEAD_LETTER_EXCHANGE`. Relays settle what arrives there from the store; `status`
    and the dashboard show its depth."""
    delivery_limit: int = Field(default=20, ge=1)
    """The queue's `x-delivery-limit`: how often RabbitMQ may hand a message back to the queue (a consumer
    that died or stopped holding it) before it dead-letters it. An argument of the queue, fixed when the
    queue is first declared."""

    relay_batch_size: int = Field(default=500, ge=1)
    """The most outbox rows a relay reads in one go, and the most confirms it gathers before it writes
    them back."""
    relay_window: int = Field(default=1000, ge=1)
    """The most messages a relay has published and the broker has not confirmed yet; it reads more rows
    once the room for half a batch (`RELAY_BATCH_SIZE`) is free."""
    relay_poll_seconds: float = Field(default=0.05, gt=0)
    """How often a relay looks for due outbox rows when nothing tells it of them. Where a commit tells
    the relay (a SQLite file in a directory it can write, PostgreSQL's LISTEN), it looks every second
    instead (or this, if longer), for rows no notification announced."""
    relay_lease_seconds: float = Field(default=30.0, gt=0)
    """A relay that has waited this long for a broker confirm hands the relay role back, so a standby
    relay publishes instead. A connection the broker keeps blocked for half of it is dropped."""
    publish_ahead: int = Field(default=500, ge=0)
    """Messages a relay keeps waiting in the queue at most (0: no bound); fewer once it has measured the
    consumers' rate: about 0.25 s of their work. What is due beyond it waits in the outbox, which the relay
    publishes by priority, then fairly across tenants, then age."""
    tenant_max_running: int = Field(default=0, ge=0)
    """At most this many jobs of one tenant run at once, deployment-wide (0: no cap). Jobs held back wait
    `queued` and spend no attempt."""
    kind_max_running: Annotated[dict[str, int], NoDecode] = {}
    """At most this many jobs of a kind run at once, deployment-wide, per kind (`export=2,notify=5`; a kind
    not named has no cap). Jobs held back wait `queued`, spend no attempt, and start in their order once a
    running one of their kind ends."""
    kind_rate_limits: Annotated[dict[str, str], NoDecode] = {}
    """How often jobs of a kind may start, deployment-wide, per kind (`notify=10/s,export=100/m`; per `s`,
    `m` or `h`): starts are spaced evenly (10/s: one each 0.1 s). Jobs held back wait `queued`, spend no
    attempt, and are delivered again when their turn comes."""
    concurrency_key_max_running: int = Field(default=1, ge=1)
    """At most this many running jobs of one tenant share a `concurrency_key` (a job's optional field at
    `POST /jobs`), deployment-wide. Jobs held back wait `queued` and spend no attempt."""
    tenant_share: float = Field(default=0.75, gt=0, le=1)
    """While another tenant has work, a consumer or worker holds at most this share of its threads' worth
    of one tenant's claimed jobs, those claimed ahead of a thread included (at least one; 1: no bound)."""
    sweep_interval_seconds: float = Field(default=1.0, gt=0)
    """How often a relay (and each baseline worker) sweeps: settles running jobs whose lease expired or
    whose deadline passed, and queued jobs past their deadline. The relay prunes the outbox and announces
    lost deliveries again on the same beat."""
    outbox_retention_seconds: float = Field(default=24 * 3600.0, ge=0)
    """Published outbox rows older than this are deleted by the relay, at most 5,000 per sweep. Unpublished
    rows are never deleted."""
    job_retention_seconds: float = Field(default=7 * 24 * 3600.0, ge=0)
    """Finished jobs (not `unknown`: those wait for an operator) are deleted with their attempts, outbox
    rows and files once finished this long; 0 keeps them forever."""
    retention_check_seconds: float = Field(default=60.0, gt=0)
    """How often a relay (or a baseline worker) applies the job retention and removes attempt outputs that
    never became a result."""
    reannounce_after_seconds: float = Field(default=300.0, gt=0)
    """A queued job due this long with no delivery waiting is announced again (its message was lost)."""
    dead_letter_check_seconds: float = Field(default=2.0, gt=0)
    """How often a relay settles dead-lettered messages from the store (a queued job is announced again)."""

    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    """A completion webhook's request gets this long as a whole, from connecting to the end of the answer
    it reads, however slowly the receiver sends it; no whole answer in time counts as a failed attempt,
    retried."""
    webhook_retry_seconds: float = Field(default=24 * 3600.0, gt=0)
    """A delivery that has not been answered with a 2xx this long after it was written (or replayed) is
    marked failed: listed by `webhooks deliveries`, sent again only by `webhooks replay`."""
    webhook_max_in_flight_per_endpoint: int = Field(default=4, ge=1)
    """The most requests the relay has open to one endpoint at a time: a slow endpoint holds at most this
    many sender threads."""
    webhook_tenant_share: float = Field(default=0.75, gt=0, le=1)
    """One tenant's requests hold at most this share of `WEBHOOK_SENDERS` (at least one), so a tenant whose
    endpoints hang always leaves threads for the others; due deliveries are handed out by turns across
    tenants, and within a tenant across its endpoints."""
    webhook_allow_private: bool = False
    """Allow webhook endpoints whose host is or resolves to a loopback, link-local, private, unspecified or
    otherwise non-public address (for a private network, and for tests). Off: `webhooks add` refuses them
    and the relay checks each connection's resolved address again before it connects."""
    webhook_senders: int = Field(default=16, ge=1)
    """Threads the relay role's holder sends webhooks on. One endpoint's requests hold at most
    `WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT` of them, one tenant's at most `WEBHOOK_TENANT_SHARE`."""
    webhook_backoff_base_seconds: float = Field(default=1.0, gt=0)
    """The pause before a failed delivery is tried again: up to this long after the first failure, doubling
    with each further one up to `WEBHOOK_BACKOFF_MAX_SECONDS`, with full jitter (anywhere from 0 to it)."""
    webhook_backoff_max_seconds: float = Field(default=3600.0, gt=0)
    """The longest pause between two attempts at one delivery (see `WEBHOOK_BACKOFF_BASE_SECONDS`)."""
    webhook_poll_seconds: float = Field(default=1.0, gt=0)
    """How often the relay role's holder looks for deliveries that came due (written by finished jobs, or
    due again after a failed attempt)."""

    consumer_prefetch: int = Field(default=0, ge=0)
    """Unacknowledged deliveries a consumer holds, never fewer than its concurrency. 0: its concurrency plus
    `min(60, 16 x concurrency)`. With jobs that run for seconds or minutes, set it to the concurrency."""
    consumer_delivery_hold_seconds: float = Field(default=300.0, gt=0)
    """How long a consumer keeps a delivery unacknowledged at most (up to an eighth longer), so that
    RabbitMQ's `consumer_timeout` (30 minutes by default) never closes its channel under a long job. A
    delivery held this long is acked early: a claimed job stays safe in the store (its lease, then the
    sweeper); a job still waiting for a thread is handed back to the store, which publishes it again. Keep
    it well under the broker's `consumer_timeout` less a minute (RabbitMQ looks at that timeout once a
    minute)."""
    degraded_after_seconds: float = Field(default=30.0, ge=0)
    """A consumer cut off from the broker this long claims jobs straight from the store until the broker
    is back (0: never)."""
    shutdown_grace_seconds: float = Field(default=20.0, ge=0)
    """On SIGTERM, how long a process lets running jobs finish (the api: requests in flight; a relay:
    confirms) before it gives back what it still holds. A supervisor should wait longer than this before
    it kills."""

    heartbeat_seconds: float = Field(default=5.0, gt=0)
    """How often every api process, relay, consumer and worker records that it is alive (one small write,
    never one per job); one not seen for 3 beats counts as gone. Readers judge with their own value, so
    every process of a deployment should share it."""
    queued_age_warning_seconds: float = Field(default=60.0, ge=0)
    """`status` and the dashboard warn when the oldest due job has waited longer than this (0: never)."""

    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """Relays, consumers and workers serve Prometheus `/metrics` on this port when it is set (`--metrics-port`
    overrides it); the api serves its own on its HTTP port."""
    metrics_host: str = "127.0.0.1"
    """The address the `METRICS_PORT` listener binds to; `0.0.0.0` lets a scraper on another host in."""
    metrics_token: str | None = Field(default=None, min_length=32)
    """A bearer token for the api's `/metrics`, for a scraper (`authorization` in Prometheus's scrape
    config), beside operator tokens, which are accepted there too. Any other request is `401`: the figures
    name every tenant, kind and schedule. At least 32 characters; unset: operator tokens only."""

    log_format: Literal["text", "json"] = "text"
    """Logs on stderr: `text` for a terminal, `json` (one object per line) for a log pipeline."""
    access_log: bool = False
    """`1`: the api logs a line per request (method, path without its query, status, duration); also
    `api --access-log`."""
    log_job_events: bool = True
    """`0`: of the job events, log only those at WARNING (failed, dead, unknown). A line per job per
    transition costs CPU a throughput-bound deployment may want back."""

    notify_log: Path = Path("./data/notify-provider.jsonl")
    """Where the `notify` kind's local stub provider records each call (tenant, operation key, job id,
    epoch): the place to check what an `unknown` notify job did."""
    execution_log: Path | None = None
    """When set, every process that runs jobs appends one JSON line per attempt start (and per `document`
    step) to this file: job id, epoch, attempt, worker, pid, kind, time. The tests use it to check that no
    job ran twice."""
    stats_dir: Path | None = None
    """When set, long-running processes write their store counters and CPU time here (for the benchmark)."""

    # The validators are functions of this module (above), applied here to the fields they check.
    _empty_is_unset = field_validator("auth_issuer", "auth_audience", mode="before")(empty_is_unset)
    _split_kinds = field_validator("allowed_kinds", "outbox_bridge_kinds", mode="before")(split_kinds)
    _broker_addresses = field_validator("rabbitmq_url")(check_broker_addresses)
    _database_url = field_validator("database_url")(check_database_url)
    _split_pairs = field_validator("kind_max_running", "kind_rate_limits", mode="before")(split_pairs)
    _positive_caps = field_validator("kind_max_running")(check_kind_caps)
    _rates = field_validator("kind_rate_limits")(check_kind_rates)

    @property
    def alive_within_seconds(self) -> float:
        """A process whose heartbeat is older than this is not alive."""
        return ALIVE_BEATS * self.heartbeat_seconds

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(name: str, rate: str) -> float:
    """The seconds between two starts of a rate written `N/s`, `N/m` or `N/h` (`KIND_RATE_LIMITS`)."""
    count, slash, unit = rate.strip().partition("/")
    if not slash or unit.strip() not in _PER or not count.strip().isdigit() or int(count) < 1:
        raise ValueError(f"{name}: a rate is N/s, N/m or N/h with N 1 or more")
    return _PER[unit.strip()] / int(count)


def load() -> Settings:
    """Read the settings once; callers pass the result down."""
    return Settings()


def environment_of(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (an environment; none by default) with every setting of `settings` in it, so that `Settings()`
    in a process started with it equals `settings`. The `<NAME>_FILE` variables of the secrets are left
    out: the values themselves are in it, and a setting given both ways is refused (`SecretFiles`)."""
    files = {f"{name.upper()}_FILE" for name in SECRET_SETTINGS}
    env = {name: value for name, value in (base or {}).items() if name not in files}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if isinstance(value, tuple | list):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in value.items())
        env[name.upper()] = str(value)
    return env
