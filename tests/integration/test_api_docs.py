"""`/docs` and `/redoc` load every file from the api itself: no CDN, no web fonts, so they work offline."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from outbox_bridge.api.app import create_app
from outbox_bridge.core.settings import Settings

# The pages are the same on any store: once, on SQLite.
pytestmark = pytest.mark.databases("sqlite")

REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*:\s*["']([^"']+)["']""")
ASSET_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture
def client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def references(html: str) -> list[str]:
    """Every URL the page loads: script and stylesheet sources, links, and the spec's `url:`."""
    return [a or b for a, b in REFERENCE.findall(html)] + re.findall(
        r"<redoc[^>]*spec-url=\"([^\"]+)\"", html
    )


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_only_files_the_api_serves(client: TestClient, page: str) -> None:
    answer = client.get(page)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/html")
    found = references(answer.text)
    assert "/openapi.json" in found
    assert any(url.endswith(".js") for url in found), found
    assert "://" not in answer.text, "the page names a URL on another host"
    # And the browser is told to load from nowhere else, whatever the scripts ask for.
    policy = answer.headers["content-security-policy"]
    assert policy.startswith("default-src 'self' ") and "://" not in policy and "*" not in policy
    for url in found:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
        asset = client.get(url)
        assert asset.status_code == 200, url
        suffix = url[url.rfind(".") :]
        if suffix in ASSET_TYPES:
            assert ASSET_TYPES[suffix] in asset.headers["content-type"], (url, asset.headers)
            assert len(asset.content) > 500, url


def test_swagger_ui_sends_the_document_to_no_online_validator(client: TestClient) -> None:
    assert '"validatorUrl": null' in client.get("/docs").text


def test_the_framework_pages_and_the_assets_stay_out_of_the_api_description(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p in {"/docs", "/redoc"} or p.startswith("/static")]
    assert client.get("/docs/oauth2-redirect").status_code == 404
    assert client.get("/static/redoc/no-such-file.js").status_code == 404
