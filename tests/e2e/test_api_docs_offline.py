"""`/docs` and `/redoc` of a real `outbox-bridge api` process render in headless Chromium with every request
going to the api itself: any request to another host is refused, and the pages must still list every
operation, as they would on a machine with no network."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, sync_playwright
from sqlalchemy import Engine

from outbox_bridge.core.settings import Settings
from tests.conftest import IN_CI
from tests.e2e.test_dashboard import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from tests.support import procs

# The pages do not depend on the store: once, on SQLite.
pytestmark = [pytest.mark.databases("sqlite"), pytest.mark.slow]


@pytest.fixture
def api_url(settings: Settings, engine: Engine, tmp_path: Path) -> Iterator[str]:
    """A real `outbox-bridge api` process on the test's store (which `engine` made)."""
    port = procs.free_port()
    proc = procs.start(
        ["api", "--host", "127.0.0.1", "--port", str(port)], settings, tmp_path / "logs", "api"
    )
    base = f"http://127.0.0.1:{port}"
    try:
        procs.wait_http(f"{base}/healthz", proc, timeout=30)
        yield base
    finally:
        try:
            proc.terminate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@dataclass
class Offline:
    """A page that may only reach the api, the requests it was refused and the errors its scripts threw."""

    page: Page
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def offline(api_url: str) -> Iterator[Offline]:
    """A Chromium page on which any request to another host than the api's (but for inline data) fails
    as it would with no network."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)

    def only_the_api(route: Route) -> None:
        url = route.request.url
        if url.startswith((f"{api_url}/", "data:", "blob:")):
            route.continue_()
        else:
            seen.refused.append(url)
            route.abort("internetdisconnected")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(20_000)
            seen = Offline(page)
            page.route("**/*", only_the_api)
            page.on("pageerror", lambda error: seen.errors.append(str(error)))
            yield seen
        finally:
            browser.close()


def operations(api_url: str) -> list[tuple[str, str, str]]:
    """(method, path, operationId) of every operation the api documents."""
    document = httpx.get(f"{api_url}/openapi.json", timeout=10).json()
    return [
        (method.upper(), path, operation["operationId"])
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


def test_swagger_ui_lists_every_operation_with_no_request_to_another_host(
    api_url: str, offline: Offline
) -> None:
    page = offline.page
    documented = operations(api_url)
    page.goto(f"{api_url}/docs")
    blocks = page.locator(".opblock")
    blocks.nth(len(documented) - 1).wait_for()
    assert blocks.count() == len(documented)
    shown = {
        (
            blocks.nth(i).locator(".opblock-summary-method").inner_text().strip(),
            blocks.nth(i).locator(".opblock-summary-path").get_attribute("data-path"),
        )
        for i in range(blocks.count())
    }
    assert shown == {(method, path) for method, path, _ in documented}
    assert page.locator(".swagger-ui .errors-wrapper").count() == 0, "Swagger UI reported an error"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "docs-swagger-ui.png"))
    assert offline.refused == []
    assert offline.errors == []


def test_redoc_lists_every_operation_with_no_request_to_another_host(api_url: str, offline: Offline) -> None:
    page = offline.page
    documented = operations(api_url)
    page.goto(f"{api_url}/redoc")
    for _, _, operation_id in documented:
        page.locator(f'[data-section-id="operation/{operation_id}"]').wait_for(state="attached")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "docs-redoc.png"))
    assert offline.refused == []
    assert offline.errors == []
