"""What a bearer token must be, checked at the door: a token the api does not accept is `401` with the reason,
and it never reaches the store, so it cannot fail anyone else's request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings
from tests.integration.test_api_errors import assert_problem, counts

# Each of these once reached the group commit and failed it: on SQLite (a lone surrogate cannot be encoded)
# or on PostgreSQL (NUL in text, more than the column's 255 characters).
ODD_NAMES = {"lone surrogate": "caf\udce9", "NUL": "acme\x00", "300 characters": "t" * 300, "accent": "café"}


@pytest.fixture
def client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def token_with(settings: Settings, **claims: Any) -> dict[str, str]:
    body = {"tenant": "acme", "sub": "alice", "exp": int(time.time()) + 600, **claims}
    return {"Authorization": f"Bearer {jwt.encode(body, settings.auth_secret, algorithm='HS256')}"}


def submit(client: TestClient, headers: dict[str, str], key: str) -> Any:
    return client.post(
        "/jobs", json={"kind": "noop", "payload": {}}, headers={**headers, "Idempotency-Key": key}
    )


@pytest.mark.parametrize("claim", ["tenant", "sub"])
@pytest.mark.parametrize("case", ODD_NAMES)
def test_a_token_with_an_odd_tenant_or_sub_is_401_with_the_reason(
    client: TestClient, settings: Settings, engine: Engine, claim: str, case: str
) -> None:
    response = submit(client, token_with(settings, **{claim: ODD_NAMES[case]}), "k-1")
    problem = assert_problem(response, 401, "unauthorized")
    assert f"{claim} claim must be 1 to 128 characters of A-Za-z0-9._:@-" in problem["detail"]
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert counts(engine) == (0, 0)


def test_odd_identities_never_fail_other_tenants_concurrent_requests(
    client: TestClient, settings: Settings, engine: Engine
) -> None:
    good = {"Authorization": f"Bearer {issue_token(settings.auth_secret, tenant='globex', user='bob')}"}
    odd = [token_with(settings, tenant=name) for name in ODD_NAMES.values()]

    def send(n: int) -> tuple[bool, int]:
        is_good = n % 3 != 0
        return is_good, submit(client, good if is_good else odd[n % len(odd)], f"k-{n}").status_code

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(send, range(60)))
    assert sorted({status for is_good, status in answers if is_good}) == [202]
    assert sorted({status for is_good, status in answers if not is_good}) == [401]
    assert counts(engine) == (40, 40)


DAY = 86400
BAD_EXPIRY = {
    "exp a numeric string": (str(int(time.time()) + 600), "its exp claim must be a number"),
    "exp missing": (None, 'missing the "exp" claim'),
    "exp 31 days ahead": (int(time.time()) + 31 * DAY, f"expires more than {30 * DAY} seconds from now"),
    "exp far ahead": (4_000_000_000, "expires more than"),
}


@pytest.mark.parametrize("case", BAD_EXPIRY)
def test_a_token_whose_exp_is_not_a_number_or_too_far_ahead_is_401(
    client: TestClient, settings: Settings, engine: Engine, case: str
) -> None:
    exp, why = BAD_EXPIRY[case]
    headers = token_with(settings, exp=exp) if exp is not None else no_exp(settings)
    problem = assert_problem(submit(client, headers, "k-1"), 401, "unauthorized")
    assert why in problem["detail"]
    assert counts(engine) == (0, 0)


def no_exp(settings: Settings) -> dict[str, str]:
    token = jwt.encode({"tenant": "acme", "sub": "alice"}, settings.auth_secret, algorithm="HS256")
    return {"Authorization": f"Bearer {token}"}


def test_where_an_issuer_and_audience_are_set_a_token_must_name_both(
    settings_factory: Any, engine: Engine
) -> None:
    settings = settings_factory(auth_issuer="https://idp.example", auth_audience="outbox-bridge")
    both = {"iss": "https://idp.example", "aud": "outbox-bridge"}
    with TestClient(create_app(settings)) as client:
        refused = {
            "no iss": submit(client, token_with(settings, aud="outbox-bridge"), "k-1"),
            "no aud": submit(client, token_with(settings, iss="https://idp.example"), "k-2"),
            "other iss": submit(
                client, token_with(settings, **{**both, "iss": "https://evil.example"}), "k-3"
            ),
            "other aud": submit(client, token_with(settings, **{**both, "aud": "billing"}), "k-4"),
        }
        accepted = submit(client, token_with(settings, **both), "k-5")
    for name, response in refused.items():
        assert response.status_code == 401, name
    assert accepted.status_code == 202
    assert counts(engine) == (1, 1)


@pytest.mark.parametrize("padding", ["=", "=="])
def test_a_token_with_base64_padding_is_401_though_its_signature_verifies(
    client: TestClient, settings: Settings, engine: Engine, padding: str
) -> None:
    headers = token_with(settings)
    assert submit(client, headers, "k-good").status_code == 202
    padded = {"Authorization": headers["Authorization"] + padding}
    problem = assert_problem(submit(client, padded, "k-padded"), 401, "unauthorized")
    assert "without padding" in problem["detail"]
    assert counts(engine) == (1, 1)
