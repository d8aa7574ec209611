"""`outbox-bridge token` prints a token the api accepts, and refuses to mint one it would not."""

from __future__ import annotations

import jwt
import pytest
from typer.testing import CliRunner

from outbox_bridge.api.auth import TokenPolicy, verify_token
from outbox_bridge.cli import app
from outbox_bridge.core.settings import DEV_AUTH_SECRET

SECRET = "cli-test-secret-that-is-long-enough-for-hs256"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("AUTH_SECRET", SECRET)
    return CliRunner()


def test_token_prints_a_token_for_the_tenant_and_user(runner: CliRunner) -> None:
    result = runner.invoke(app, ["token", "--tenant", "acme", "--user", "alice@example.com"])
    assert result.exit_code == 0, result.output
    identity = verify_token(TokenPolicy(SECRET, 86400), result.stdout.strip())
    assert (identity.tenant, identity.user, identity.operator) == ("acme", "alice@example.com", False)


@pytest.mark.parametrize("option", ["--tenant", "--user"])
@pytest.mark.parametrize("name", ["caf\xe9", "", "x" * 129, "acme corp", "a\x00b"])
def test_token_refuses_a_name_no_token_may_carry(runner: CliRunner, option: str, name: str) -> None:
    names = {"--tenant": "acme", "--user": "alice", option: name}
    result = runner.invoke(app, ["token", *(arg for pair in names.items() for arg in pair)])
    assert result.exit_code == 2
    assert "1 to 128 characters of A-Za-z0-9._:@-" in result.output
    assert "eyJ" not in result.stdout, "no token was printed"


def test_token_refuses_the_built_in_secret_outside_development(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTH_SECRET", raising=False)
    monkeypatch.delenv("OUTBOX_BRIDGE_DEV", raising=False)
    refused = CliRunner().invoke(app, ["token", "--tenant", "acme", "--user", "alice"])
    assert refused.exit_code == 1
    assert "built-in development value" in refused.output
    assert "eyJ" not in refused.stdout
    monkeypatch.setenv("OUTBOX_BRIDGE_DEV", "1")
    allowed = CliRunner().invoke(app, ["token", "--tenant", "acme", "--user", "alice"])
    assert allowed.exit_code == 0, allowed.output
    assert verify_token(TokenPolicy(DEV_AUTH_SECRET, 86400), allowed.stdout.strip()).tenant == "acme"


def test_token_mints_within_the_longest_lifetime_and_names_issuer_and_audience(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKEN_MAX_TTL_SECONDS", "3600")
    monkeypatch.setenv("AUTH_ISSUER", "https://idp.example")
    monkeypatch.setenv("AUTH_AUDIENCE", "outbox-bridge")
    result = runner.invoke(app, ["token", "--tenant", "acme", "--user", "alice"])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    claims = jwt.decode(token, SECRET, algorithms=["HS256"], audience="outbox-bridge")
    assert claims["exp"] - claims["iat"] == 3600
    assert (claims["iss"], claims["aud"]) == ("https://idp.example", "outbox-bridge")


@pytest.mark.parametrize(("ttl", "seconds"), [("90s", 90), ("15m", 900), ("12h", 43_200), ("30d", 2_592_000)])
def test_token_ttl_sets_how_long_the_token_is_valid(runner: CliRunner, ttl: str, seconds: int) -> None:
    result = runner.invoke(app, ["token", "--tenant", "acme", "--user", "alice", "--ttl", ttl])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == seconds
    assert verify_token(TokenPolicy(SECRET, 30 * 86_400), token).tenant == "acme"


def test_token_without_ttl_is_valid_for_a_day_as_before(runner: CliRunner) -> None:
    result = runner.invoke(app, ["token", "--tenant", "acme", "--user", "alice"])
    claims = jwt.decode(result.stdout.strip(), SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == 86_400


def test_token_ttl_past_the_longest_lifetime_is_refused_in_one_line(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKEN_MAX_TTL_SECONDS", "3600")
    refused = runner.invoke(app, ["token", "--tenant", "acme", "--user", "alice", "--ttl", "2h"])
    assert refused.exit_code == 1
    assert "eyJ" not in refused.stdout, "no token was printed"
    said = refused.stderr.strip().splitlines()
    assert len(said) == 1, refused.stderr
    assert "--ttl 2h is longer than TOKEN_MAX_TTL_SECONDS (1h)" in said[0]
    allowed = runner.invoke(app, ["token", "--tenant", "acme", "--user", "alice", "--ttl", "1h"])
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.parametrize("ttl", ["soon", "0s", "1m30h", "-5m"])
def test_token_ttl_that_is_not_a_duration_is_refused_in_one_line(runner: CliRunner, ttl: str) -> None:
    refused = runner.invoke(app, ["token", "--tenant", "acme", "--user", "alice", "--ttl", ttl])
    assert refused.exit_code == 1
    assert "eyJ" not in refused.stdout
    said = refused.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"outbox-bridge: --ttl {ttl!r}"), refused.stderr
