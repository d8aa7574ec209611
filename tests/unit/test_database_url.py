"""DATABASE_URL: the schemes of the stores the code runs on, `postgres://` taken as PostgreSQL, and anything
else refused by its scheme alone."""

from __future__ import annotations

import pytest

from outbox_bridge.core.settings import check_database_url


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///./data/jobs.db",
        "sqlite:////var/lib/outbox-bridge/jobs.db",
        "postgresql://outbox:pw@db:5432/outbox",
        "postgresql+psycopg://outbox:pw@db:5432/outbox?sslmode=verify-full",
    ],
)
def test_a_url_of_a_store_it_runs_on_is_kept_as_written(url: str) -> None:
    assert check_database_url(url) == url


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("postgres://outbox:pw@db:5432/outbox", "postgresql://outbox:pw@db:5432/outbox"),
        ("postgres+psycopg://outbox:pw@db/outbox", "postgresql+psycopg://outbox:pw@db/outbox"),
    ],
)
def test_postgres_is_taken_as_postgresql(given: str, taken: str) -> None:
    assert check_database_url(given) == taken


@pytest.mark.parametrize(
    "url", ["mysql://outbox:s3cret@db/outbox", "postgresql+psycopg2://outbox:s3cret@db/outbox", "jobs.db"]
)
def test_another_scheme_is_refused_naming_the_accepted_ones_and_never_the_password(url: str) -> None:
    with pytest.raises(ValueError, match="sqlite:///") as refused:
        check_database_url(url)
    assert "s3cret" not in str(refused.value)
    assert "postgresql+psycopg://" in str(refused.value)
