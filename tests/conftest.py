"""Shared fixtures: a fresh store per test, a movable clock, and a real RabbitMQ."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
from sqlalchemy import Engine

from outbox_bridge.core import clock as clock_module
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from tests.support.templates import Templates

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
RABBITMQ_IMAGE = "rabbitmq:3.13-management"


# The store of the running integration or end-to-end test, set by the autouse `_store_of_this_test` fixture
# (tests/integration/conftest.py, tests/e2e/conftest.py) from the parametrized `database_url`.
_current_store: ContextVar[str | None] = ContextVar("current_store", default=None)


def make_settings(tmp: Path, **overrides: object) -> Settings:
    """Settings for one test: its own store (the test's parametrized database, else a SQLite file under
    `tmp`), results directory and broker names."""
    suffix = uuid.uuid4().hex[:8]
    values: dict[str, object] = {
        "database_url": _current_store.get() or f"sqlite:///{tmp / 'jobs.db'}",
        "results_dir": tmp / "results",
        "notify_log": tmp / "notify-provider.jsonl",
        "execution_log": tmp / "executions.jsonl",
        "auth_secret": "test-secret-that-is-long-enough-for-hs256",
        "allowed_kinds": ("export", "document", "notify", "noop", "sleep", "flaky"),
        "exchange": f"jobs-{suffix}",
        "queue": f"jobs-{suffix}",
        "dead_letter_exchange": f"jobs.dead-{suffix}",
        "dead_letter_queue": f"jobs.dead-{suffix}",
        "backoff_base_seconds": 0.05,
        "backoff_max_seconds": 0.5,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def sqlite_settings(directory: Path, **overrides: object) -> Settings:
    """`make_settings` for a SQLite file of the test's own in `directory`, whatever store it runs on."""
    return make_settings(directory, database_url=f"sqlite:///{directory / 'jobs.db'}", **overrides)


DATABASES = [d.strip() for d in os.environ.get("TEST_DATABASES", "sqlite").split(",") if d.strip()]
POSTGRES_ADMIN_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session (dropped afterwards); fails in CI when the server
    does not answer, skips locally."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"outbox_bridge_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        reason = f"PostgreSQL at {POSTGRES_ADMIN_URL} does not answer: {exc}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "databases(*names): run this test only on these stores (sqlite, postgresql)"
    )


# A test that measures something worth reading in every run (the scale test's jobs/s) records it with
# `record_property(FIGURE, "...")`; the figures are printed at the end of the run, passed tests only.
FIGURE = "figure"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    figures = [
        (report.nodeid, value)
        for report in terminalreporter.stats.get("passed", [])
        for name, value in report.user_properties
        if name == FIGURE
    ]
    if figures:
        terminalreporter.section("figures measured by the tests")
        for nodeid, value in figures:
            terminalreporter.write_line(f"{value}  ({nodeid.split('::')[-1]})")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that uses a store once per database in TEST_DATABASES, or on the databases its
    `databases` marker names (a test of SQLite-only behaviour says `databases("sqlite")`)."""
    if "database_url" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("databases")
    names = list(marker.args) if marker else DATABASES
    metafunc.parametrize("database_url", names, indirect=True)


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store for one test: a SQLite file of its own, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return new_postgres_schema(request.getfixturevalue("postgres_database"))


def new_postgres_schema(database: str) -> str:
    """The URL of a new, empty schema of its own in the PostgreSQL `database`."""
    from sqlalchemy import create_engine, text

    schema = f"t_{uuid.uuid4().hex[:12]}"
    setup = create_engine(database, isolation_level="AUTOCOMMIT")
    with setup.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    setup.dispose()
    return f"{database}?options=-csearch_path%3D{schema}"


@pytest.fixture
def store_of_this_test(database_url: str) -> Iterator[str]:
    """Make `make_settings` use this test's parametrized database."""
    token = _current_store.set(database_url)
    yield database_url
    _current_store.reset(token)


@pytest.fixture
def settings_factory(tmp_path: Path, database_url: str) -> object:
    """`settings_factory(**overrides)`: settings for this test on its parametrized database."""

    def factory(**overrides: object) -> Settings:
        overrides.setdefault("database_url", database_url)
        return make_settings(tmp_path, **overrides)

    return factory


@pytest.fixture
def settings(settings_factory: object) -> Settings:
    return settings_factory()  # type: ignore[operator]


@pytest.fixture(scope="session")
def store_templates() -> Iterator[Templates]:
    made = Templates()
    yield made
    made.close()


@pytest.fixture
def engine(settings: Settings, store_templates: Templates) -> Iterator[Engine]:
    """This test's store, migrated (a copy of a store migrated once per test process: `Templates`)."""
    engine = db.make_engine(settings)
    store_templates.init_schema(settings, engine)
    yield engine
    engine.dispose()


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    with clock_module.use(FakeClock()) as fake:
        assert isinstance(fake, FakeClock)
        yield fake


def _answers(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "localhost", parsed.port or 5672), timeout=2):
            return True
    except OSError:
        return False


def _docker_answers() -> bool:
    """True when a Docker engine answers `GET /_ping` on its socket (DOCKER_HOST or the default path)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return _answers(host.replace("tcp://", "http://"))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(host.removeprefix("unix://"))
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(64)
        return reply.startswith(b"HTTP/1.") and b" 200 " in reply
    except OSError:
        return False


@dataclass(frozen=True)
class SharedBroker:
    """The broker the tests use, and `rabbitmqctl` for it (None when this run cannot reach its node)."""

    url: str
    rabbitmqctl: Callable[[str], None] | None


def _local_rabbitmqctl(command: str) -> None:
    subprocess.run(["rabbitmqctl", command], check=True, capture_output=True, timeout=120)


def _is_local(url: str) -> bool:
    return urlparse(url).hostname in {"localhost", "127.0.0.1", "::1"}


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[SharedBroker]:
    """A real broker: RABBITMQ_URL if set; else a testcontainers RabbitMQ when Docker answers; else fail
    in CI and skip locally, saying why. A local RABBITMQ_URL is controlled with this host's `rabbitmqctl`,
    a container with the one inside it."""
    url = os.environ.get("RABBITMQ_URL")
    if url:
        if not _answers(url):
            pytest.fail(f"RABBITMQ_URL={url} does not answer")
        local = _is_local(url) and shutil.which("rabbitmqctl") is not None
        yield SharedBroker(url, _local_rabbitmqctl if local else None)
        return
    if _docker_answers():
        from testcontainers.rabbitmq import RabbitMqContainer  # type: ignore[import-untyped]

        with RabbitMqContainer(RABBITMQ_IMAGE) as container:

            def in_container(command: str) -> None:
                result = container.exec(["rabbitmqctl", command])
                if result.exit_code != 0:
                    raise RuntimeError(f"rabbitmqctl {command} in the container: {result.output!r}")

            params = container.get_connection_params()
            yield SharedBroker(f"amqp://guest:guest@{params.host}:{params.port}/%2F", in_container)
        return
    reason = "no broker: set RABBITMQ_URL or start a Docker engine for testcontainers"
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def rabbitmq_url(rabbitmq: SharedBroker) -> str:
    return rabbitmq.url


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """A PostgreSQL schema of this test's own, whatever TEST_DATABASES says (for tests that exist to show
    PostgreSQL behaviour)."""
    return new_postgres_schema(postgres_database)
