"""Bearer tokens: what `issue_token` mints, what `verify_token` accepts, and which secrets may sign them."""

from __future__ import annotations

import time
from collections.abc import Callable

import jwt
import pytest

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import (
    Identity,
    InvalidName,
    InvalidToken,
    TokenPolicy,
    UnsafeSecret,
    check_secret,
    issue_token,
    verify_token,
)
from outbox_bridge.core.settings import DEV_AUTH_SECRET, Settings

SECRET = "unit-test-secret-that-is-long-enough-for-hs256"
DAYS = 86400
ABSENT = object()
POLICY = TokenPolicy(SECRET, max_ttl_seconds=30 * DAYS)
ODD_NAMES = {
    "empty": "",
    "too long": "t" * 129,
    "NUL": "acme\x00",
    "lone surrogate": "caf\udce9",
    "non-ASCII": "café",
    "space": "acme corp",
    "slash": "acme/ops",
    "newline": "acme\n",
}


def signed(**claims: object) -> str:
    body = {"tenant": "acme", "sub": "alice", "exp": int(time.time()) + 600, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not ABSENT}, SECRET, algorithm="HS256")


@pytest.mark.parametrize("name", ["a", "t" * 128, "acme.eu-1_team:ops@example.com", "0"])
def test_names_of_the_allowed_characters_and_length_round_trip(name: str) -> None:
    identity = verify_token(POLICY, issue_token(SECRET, tenant=name, user=name))
    assert (identity.tenant, identity.user) == (name, name)


@pytest.mark.parametrize("case", ODD_NAMES)
def test_a_token_with_an_odd_tenant_or_sub_is_refused_saying_which(case: str) -> None:
    with pytest.raises(InvalidToken, match="tenant claim must be 1 to 128 characters"):
        verify_token(POLICY, signed(tenant=ODD_NAMES[case], sub="alice"))
    with pytest.raises(InvalidToken, match="sub claim must be 1 to 128 characters"):
        verify_token(POLICY, signed(tenant="acme", sub=ODD_NAMES[case]))


@pytest.mark.parametrize("value", [None, 7, ["acme"], {"name": "acme"}, True])
def test_a_tenant_that_is_not_a_string_is_refused(value: object) -> None:
    with pytest.raises(InvalidToken, match="tenant claim"):
        verify_token(POLICY, signed(tenant=value))


@pytest.mark.parametrize(
    "exp,why",
    [
        (lambda now: ABSENT, 'missing the "exp" claim'),
        (lambda now: "4000000000", "exp claim must be a number"),
        (lambda now: str(int(now) + 600), "exp claim must be a number"),
        (lambda now: [4_000_000_000], "exp"),
        (lambda now: None, "exp"),
        (lambda now: float("inf"), "exp"),
        (lambda now: float("nan"), "exp"),
        (lambda now: int(now) - 60, "expired"),
        (lambda now: int(now) + 31 * DAYS, f"expires more than {30 * DAYS} seconds from now"),
        (lambda now: 4_000_000_000, "expires more than"),
    ],
    # Ids that do not depend on the clock: every test process must collect the same tests. The values are
    # made when the test runs, not when it is collected: a long suite would see a near `exp` pass.
    ids=["absent", "string", "string-soon", "list", "null", "inf", "nan", "past", "31-days", "year-2096"],
)
def test_exp_must_be_a_number_not_past_and_at_most_the_longest_lifetime_ahead(
    exp: Callable[[float], object], why: str
) -> None:
    with pytest.raises(InvalidToken, match=why):
        verify_token(POLICY, signed(exp=exp(time.time())))


@pytest.mark.parametrize(
    "exp", [lambda now: int(now) + 29 * DAYS, lambda now: now + 600.5], ids=["29-days", "fractional"]
)
def test_a_numeric_exp_within_the_longest_lifetime_is_accepted(exp: Callable[[float], float]) -> None:
    assert verify_token(POLICY, signed(exp=exp(time.time()))).tenant == "acme"


def test_a_shorter_longest_lifetime_refuses_what_a_longer_one_accepts() -> None:
    token = signed(exp=int(time.time()) + 2 * 3600)
    assert verify_token(POLICY, token).user == "alice"
    with pytest.raises(InvalidToken, match="expires more than 3600 seconds"):
        verify_token(TokenPolicy(SECRET, max_ttl_seconds=3600), token)


@pytest.mark.parametrize("claim,setting", [("iss", "issuer"), ("aud", "audience")])
def test_iss_and_aud_are_required_and_checked_only_where_the_deployment_names_them(
    claim: str, setting: str
) -> None:
    strict = TokenPolicy(SECRET, max_ttl_seconds=30 * DAYS, **{setting: "outbox-bridge"})
    assert verify_token(strict, signed(**{claim: "outbox-bridge"})).tenant == "acme"
    with pytest.raises(InvalidToken, match=f'missing the "{claim}" claim'):
        verify_token(strict, signed())
    with pytest.raises(InvalidToken, match=f"(?i){setting}"):
        verify_token(strict, signed(**{claim: "someone-else"}))
    if claim == "iss":  # an audience nobody asked for is refused (PyJWT), an issuer is only read when asked
        assert verify_token(POLICY, signed(iss="anyone")).tenant == "acme"


def test_the_policy_issues_tokens_it_accepts_within_its_longest_lifetime() -> None:
    policy = TokenPolicy(SECRET, max_ttl_seconds=3600, issuer="https://idp.example", audience="jobs")
    token = policy.issue(tenant="acme", user="ops", operator=True)
    assert verify_token(policy, token) == Identity("acme", "ops", operator=True)
    claims = jwt.decode(token, SECRET, algorithms=["HS256"], audience="jobs")
    assert claims["exp"] - claims["iat"] == 3600
    assert (claims["iss"], claims["aud"]) == ("https://idp.example", "jobs")
    assert TokenPolicy.of(Settings(auth_secret=SECRET)).max_ttl_seconds == 30 * DAYS


@pytest.mark.parametrize("case", ODD_NAMES)
def test_no_token_is_minted_for_an_odd_tenant_or_user(case: str) -> None:
    with pytest.raises(InvalidName, match="tenant must be"):
        issue_token(SECRET, tenant=ODD_NAMES[case], user="alice")
    with pytest.raises(InvalidName, match="user must be"):
        issue_token(SECRET, tenant="acme", user=ODD_NAMES[case])


@pytest.mark.parametrize(
    "secret,why",
    [(DEV_AUTH_SECRET, "built-in development value"), ("s" * 31, "shorter than 32 bytes"), ("", "shorter")],
)
def test_a_weak_secret_is_refused_outside_development(secret: str, why: str) -> None:
    with pytest.raises(UnsafeSecret, match=why) as refused:
        check_secret(Settings(auth_secret=secret, outbox_bridge_dev=False))
    assert "secrets.token_urlsafe(48)" in str(refused.value)
    assert "OUTBOX_BRIDGE_DEV=1" in str(refused.value)
    check_secret(Settings(auth_secret=secret, outbox_bridge_dev=True))


@pytest.mark.parametrize("secret", ["s" * 32, "é" * 16, SECRET])
def test_a_secret_of_32_bytes_or_more_is_accepted(secret: str) -> None:
    check_secret(Settings(auth_secret=secret, outbox_bridge_dev=False))


def test_the_app_is_not_built_with_the_built_in_secret() -> None:
    with pytest.raises(UnsafeSecret):
        create_app(
            Settings(auth_secret=DEV_AUTH_SECRET, outbox_bridge_dev=False, database_url="sqlite:///x.db")
        )


def test_an_empty_issuer_or_audience_setting_means_no_check() -> None:
    settings = Settings(auth_issuer="", auth_audience="")
    assert (settings.auth_issuer, settings.auth_audience) == (None, None)
