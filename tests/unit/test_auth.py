"""Bearer tokens: what `issue_token` mints, what `verify_token` accepts, and which secrets may sign them."""

from __future__ import annotations

import time

import jwt
import pytest

from api.app import create_app
from api.auth import InvalidName, InvalidToken, UnsafeSecret, check_secret, issue_token, verify_token
from jobstore.settings import DEV_AUTH_SECRET, Settings

SECRET = "unit-test-secret-that-is-long-enough-for-hs256"
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
    return jwt.encode({"exp": int(time.time()) + 600, **claims}, SECRET, algorithm="HS256")


@pytest.mark.parametrize("name", ["a", "t" * 128, "acme.eu-1_team:ops@example.com", "0"])
def test_names_of_the_allowed_characters_and_length_round_trip(name: str) -> None:
    identity = verify_token(SECRET, issue_token(SECRET, tenant=name, user=name))
    assert (identity.tenant, identity.user) == (name, name)


@pytest.mark.parametrize("case", ODD_NAMES)
def test_a_token_with_an_odd_tenant_or_sub_is_refused_saying_which(case: str) -> None:
    with pytest.raises(InvalidToken, match="tenant claim must be 1 to 128 characters"):
        verify_token(SECRET, signed(tenant=ODD_NAMES[case], sub="alice"))
    with pytest.raises(InvalidToken, match="sub claim must be 1 to 128 characters"):
        verify_token(SECRET, signed(tenant="acme", sub=ODD_NAMES[case]))


@pytest.mark.parametrize("value", [None, 7, ["acme"], {"name": "acme"}, True])
def test_a_tenant_that_is_not_a_string_is_refused(value: object) -> None:
    with pytest.raises(InvalidToken, match="tenant claim"):
        verify_token(SECRET, signed(tenant=value, sub="alice"))


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
