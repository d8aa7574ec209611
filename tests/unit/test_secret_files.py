"""`<NAME>_FILE` for the settings that hold a secret (`AUTH_SECRET`, `DATABASE_URL`, `RABBITMQ_URL`): the
file's contents without its final line break; both ways at once, or a file that cannot be read, refused
with the setting's name; other settings are not read from files; a child process started with the
settings' environment loads the same settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from outbox_bridge.core.settings import SecretFileError, Settings, environment_of


def test_a_secret_is_read_from_the_file_named_by_its_file_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "auth").write_text("a-secret-from-a-file-that-is-long-enough\n")
    (tmp_path / "db").write_text("postgresql+psycopg://app:pw@db/jobs")
    monkeypatch.setenv("AUTH_SECRET", "")  # as a compose override leaves it: empty gives way to the file
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("AUTH_SECRET_FILE", str(tmp_path / "auth"))
    monkeypatch.setenv("DATABASE_URL_FILE", str(tmp_path / "db"))
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.auth_secret == "a-secret-from-a-file-that-is-long-enough"
    assert settings.database_url == "postgresql+psycopg://app:pw@db/jobs"


def test_both_ways_at_once_or_an_unreadable_file_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RABBITMQ_URL", "amqp://a")
    monkeypatch.setenv("RABBITMQ_URL_FILE", str(tmp_path / "amqp"))
    with pytest.raises(SecretFileError, match="RABBITMQ_URL and RABBITMQ_URL_FILE are both set"):
        Settings(_env_file=None)  # type: ignore[call-arg]
    monkeypatch.delenv("RABBITMQ_URL")
    with pytest.raises(SecretFileError, match=r"RABBITMQ_URL_FILE=.* cannot be read"):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_a_setting_that_holds_no_secret_is_not_read_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lease").write_text("99")
    monkeypatch.delenv("LEASE_SECONDS", raising=False)
    monkeypatch.setenv("LEASE_SECONDS_FILE", str(tmp_path / "lease"))
    assert Settings(_env_file=None).lease_seconds == 30.0  # type: ignore[call-arg]


def test_a_child_started_with_the_settings_environment_loads_a_secret_read_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "auth").write_text("a-secret-from-a-file-that-is-long-enough\n")
    monkeypatch.delenv("AUTH_SECRET", raising=False)
    monkeypatch.setenv("AUTH_SECRET_FILE", str(tmp_path / "auth"))
    parent = Settings(_env_file=None)  # type: ignore[call-arg]

    env = environment_of(parent, os.environ)

    assert "AUTH_SECRET_FILE" not in env and env["AUTH_SECRET"] == parent.auth_secret
    with monkeypatch.context() as child:
        for name in list(os.environ):
            child.delenv(name)
        for name, value in env.items():
            child.setenv(name, value)
        assert Settings(_env_file=None) == parent  # type: ignore[call-arg]
