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

from api.app import create_app
from api.auth import issue_token
from jobstore.settings import Settings
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
