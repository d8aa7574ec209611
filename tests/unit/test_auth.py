"""Bearer tokens: what `issue_token` mints and what `verify_token` accepts."""

from __future__ import annotations

import time

import jwt
import pytest

from api.auth import InvalidName, InvalidToken, issue_token, verify_token

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
