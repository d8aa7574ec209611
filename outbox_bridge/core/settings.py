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

# The built-in test kinds: accepted only in a development setup (OUTBOX_BRIDGE_DEV=1) or when ALLOWED_KINDS
# names them; they do nothing useful and can hold a worker for an hour (`sleep`).
TEST_KINDS = ("noop", "sleep", "flaky")
# The built-in AUTH_SECRET: anyone can read it here, so only a development setup may sign with it.
DEV_AUTH_SECRET = "change-me-outbox-bridge-dev-secret-32b"
# A process is alive while its last heartbeat is at most this many HEARTBEAT_SECONDS old.
ALIVE_BEATS = 3


# The settings that hold a secret: each may be given as `<NAME>_FILE`, the path of a file that holds it (a
# Docker or Kubernetes secret), instead of in the environment.
SECRET_SETTINGS = ("auth_secret", "database_url", "rabbitmq_url")


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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

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
    rabbitmq_url: str = "amqp://guest:guest@localhost:5672/%2F"
    auth_secret: str = DEV_AUTH_SECRET
    # Development only (the demo, the tests, the benchmark): the api and `token` accept a weak AUTH_SECRET.
    outbox_bridge_dev: bool = False
    # Bearer tokens: `exp` at most this far ahead; `iss` and `aud` required and checked when these are set.
    token_max_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    auth_issuer: str | None = Field(default=None, min_length=1)
    auth_audience: str | None = Field(default=None, min_length=1)
    # A job view's `result_url` is a signed link that serves the result without a token for this long (at
    # most 30 days, like a token).
    # A dashboard sign-in lasts this long (sign-out ends it sooner).
    dashboard_session_seconds: float = Field(default=8 * 3600.0, gt=0)
    result_link_seconds: int = Field(default=900, gt=0, le=30 * 24 * 3600)
    results_dir: Path = Path("./data/results")
    lease_seconds: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    max_body_bytes: int = Field(default=65536, ge=256)
    # Slow clients: a request's head must arrive within this long (from the connection or the previous
    # response), its body within this long of its head; an api process holds at most this many connections.
    http_header_timeout_seconds: float = Field(default=10.0, gt=0)
    http_body_timeout_seconds: float = Field(default=30.0, gt=0)
    http_max_connections: int = Field(default=512, ge=1)
    # A request's line and headers together; a larger head is refused (400) and its connection closed.
    http_max_head_bytes: int = Field(default=16384, ge=1024)
    # Unset: every kind the process loaded but the test kinds (which a development setup accepts too).
    allowed_kinds: Annotated[tuple[str, ...] | None, NoDecode] = None
    # Importable modules whose kinds the api, consumers and workers load at start (comma-separated).
    outbox_bridge_kinds: Annotated[tuple[str, ...], NoDecode] = ()

    # Durability: FULL survives power loss; NORMAL (opt-in) survives process crashes only.
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    # How long a writer keeps retrying to get SQLite's write lock before the store counts as unavailable.
    store_lock_timeout_seconds: float = Field(default=5.0, gt=0)

    backoff_base_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=60.0, ge=0)

    # Broker names (tests give each run its own).
    exchange: str = "jobs"
    queue: str = "jobs"
    dead_letter_exchange: str = "jobs.dead"
    dead_letter_queue: str = "jobs.dead"
    delivery_limit: int = Field(default=20, ge=1)

    relay_batch_size: int = Field(default=500, ge=1)
    relay_window: int = Field(default=1000, ge=1)
    relay_poll_seconds: float = Field(default=0.05, gt=0)
    relay_lease_seconds: float = Field(default=30.0, gt=0)
    # Messages a relay keeps waiting in the queue at most (0: no bound); what is due beyond it waits in the
    # outbox, which the relay leases by priority, then fairly across tenants, then age (`relay.ahead`).
    publish_ahead: int = Field(default=500, ge=0)
    # At most this many jobs of one tenant run at once, deployment-wide (0: no cap; `jobstore.tenantcap`).
    tenant_max_running: int = Field(default=0, ge=0)
    # While its jobs run long and the store holds several tenants' jobs, a consumer or worker holds at most
    # this share of its threads' worth of one tenant's jobs (at least one; 1: no bound; `worker.share`).
    tenant_share: float = Field(default=0.75, gt=0, le=1)
    sweep_interval_seconds: float = Field(default=1.0, gt=0)
    outbox_retention_seconds: float = Field(default=24 * 3600.0, ge=0)
    # Finished jobs (not `unknown`: those wait for an operator) are deleted with their attempts, outbox rows
    # and files once finished this long; 0 keeps them forever.
    job_retention_seconds: float = Field(default=7 * 24 * 3600.0, ge=0)
    # How often a relay applies the job retention and removes attempt outputs that never became a result.
    retention_check_seconds: float = Field(default=60.0, gt=0)
    # A queued job due this long with no delivery waiting is announced again (its message was lost).
    reannounce_after_seconds: float = Field(default=300.0, gt=0)
    # How often a relay settles dead-lettered messages from the store (a queued job is announced again).
    dead_letter_check_seconds: float = Field(default=2.0, gt=0)

    # Unacked deliveries a consumer holds (0: its threads plus a bounded number ahead; see worker.budget).
    consumer_prefetch: int = Field(default=0, ge=0)
    # Consumers fall back to claiming from the table after the broker is gone this long (0 disables).
    degraded_after_seconds: float = Field(default=30.0, ge=0)
    shutdown_grace_seconds: float = Field(default=20.0, ge=0)

    # Every relay, consumer and worker records that it is alive this often (one small write, never one per
    # job); one not seen for ALIVE_BEATS beats counts as gone. Readers judge with their own value, so every
    # process of a deployment should share it.
    heartbeat_seconds: float = Field(default=5.0, gt=0)
    # `status` and the dashboard warn when the oldest due job has waited longer than this (0: never).
    queued_age_warning_seconds: float = Field(default=60.0, ge=0)

    # Relays, consumers and workers serve Prometheus `/metrics` on this port when it is set (the api serves
    # its own on its HTTP port), bound to METRICS_HOST.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"

    # Logs on stderr: `text` for a terminal, `json` (one object per line) for a log pipeline. ACCESS_LOG=1
    # makes the api log a line per request (method, path without its query, status, duration).
    log_format: Literal["text", "json"] = "text"
    access_log: bool = False
    # LOG_JOB_EVENTS=0 keeps only the job events at WARNING (failed, dead, unknown): a line per job per
    # transition costs CPU a throughput-bound deployment may want back.
    log_job_events: bool = True

    # Where the notify kind's local stub provider records deliveries, and where executions are logged.
    notify_log: Path = Path("./data/notify-provider.jsonl")
    execution_log: Path | None = None
    # When set, long-running processes write their store counters and CPU time here (for the benchmark).
    stats_dir: Path | None = None

    @field_validator("auth_issuer", "auth_audience", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`AUTH_ISSUER=` (set, but empty) means no issuer check, as when it is not set at all."""
        return None if value == "" else value

    @field_validator("allowed_kinds", "outbox_bridge_kinds", mode="before")
    @classmethod
    def _split_kinds(cls, value: object, info: ValidationInfo) -> object:
        """A comma-separated list; ALLOWED_KINDS set but empty means unset."""
        if isinstance(value, str):
            names = tuple(k.strip() for k in value.split(",") if k.strip())
            return names if names or info.field_name != "allowed_kinds" else None
        return value

    @property
    def alive_within_seconds(self) -> float:
        """A process whose heartbeat is older than this is not alive."""
        return ALIVE_BEATS * self.heartbeat_seconds

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def is_postgresql(self) -> bool:
        return self.database_url.startswith("postgresql")


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
        env[name.upper()] = str(value)
    return env
