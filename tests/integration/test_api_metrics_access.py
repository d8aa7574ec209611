"""`/metrics` names every tenant, kind and schedule, so it answers only a scraper's METRICS_TOKEN or an
operator's token; anybody else gets 401, and the document says so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.settings import Settings

METRICS_TOKEN = "a-scrapers-token-of-at-least-thirty-two-characters"


@pytest.fixture
def client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    scraped = settings.model_copy(update={"metrics_token": METRICS_TOKEN})
    with TestClient(create_app(scraped)) as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submit_as_a_tenant(client: TestClient, settings: Settings) -> None:
    token = issue_token(settings.auth_secret, tenant="acme-secret-customer", user="alice")
    response = client.post(
        "/jobs", json={"kind": "noop", "payload": {}}, headers={**bearer(token), "Idempotency-Key": "k"}
    )
    assert response.status_code == 202


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Basic dXNlcjpwYXNz", "Bearer not-a-token", "Bearer a-scrapers-token-but-not-that-one"],
    ids=["none", "empty bearer", "basic", "not a token", "another static token"],
)
def test_metrics_without_an_accepted_token_is_401_and_names_nobody(
    client: TestClient, settings: Settings, authorization: str | None
) -> None:
    submit_as_a_tenant(client, settings)
    response = client.get("/metrics", headers={"Authorization": authorization} if authorization else {})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["type"] == "urn:outbox-bridge:problem:unauthorized"
    assert "acme-secret-customer" not in response.text and "noop" not in response.text


def test_a_tenants_token_does_not_open_metrics(client: TestClient, settings: Settings) -> None:
    token = issue_token(settings.auth_secret, tenant="acme", user="alice")
    response = client.get("/metrics", headers=bearer(token))
    assert response.status_code == 401
    assert "operator" in response.json()["detail"]


def test_metrics_token_and_an_operator_token_open_metrics(client: TestClient, settings: Settings) -> None:
    submit_as_a_tenant(client, settings)
    operator = issue_token(settings.auth_secret, tenant="ops", user="bob", operator=True)
    for token in (METRICS_TOKEN, operator):
        response = client.get("/metrics", headers=bearer(token))
        assert response.status_code == 200
        assert 'outbox_bridge_jobs_accepted_total{kind="noop"} 1.0' in response.text


def test_the_document_says_metrics_needs_a_bearer_token(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/metrics"]["get"]
    assert operation["security"] == [{"HTTPBearer": []}]
    assert "401" in operation["responses"]
