"""The interactive API docs, `/docs` (Swagger UI) and `/redoc` (ReDoc), served with every file they load
from this process, so they work where no CDN is reachable: Swagger UI's files come from the
`swagger-ui-bundle-v2` package, ReDoc's single standalone script ships in `api/static/redoc` with its
licence. Neither page names fonts, favicons or scripts anywhere else, and each answer's
Content-Security-Policy has the browser refuse any other host, such as the logo ReDoc's sidebar asks for
from its vendor's CDN (it hides itself when that fails)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

SWAGGER_UI_ASSETS = "/static/swagger-ui"
REDOC_ASSETS = "/static/redoc"
REDOC_DIR = Path(__file__).resolve().parent / "static" / "redoc"
FAVICON = f"{SWAGGER_UI_ASSETS}/favicon-32x32.png"
# Only this origin, inline code (both pages start from an inline script; both inject styles) and the
# data: and blob: URLs they make themselves (ReDoc's search runs in a blob: worker).
ONLY_THIS_HOST = {"Content-Security-Policy": "default-src 'self' 'unsafe-inline' data: blob:"}


def install(app: FastAPI) -> None:
    """Serve `/docs` and `/redoc` and the files they load under `/static/`. The app must have been made
    with `docs_url=None, redoc_url=None`, so FastAPI's own pages (which load from a CDN) are not there."""
    title = f"{app.title} API"
    openapi_url = app.openapi_url or "/openapi.json"
    app.mount(SWAGGER_UI_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")
    app.mount(REDOC_ASSETS, StaticFiles(directory=REDOC_DIR), name="redoc")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{SWAGGER_UI_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER_UI_ASSETS}/swagger-ui.css",
            swagger_favicon_url=FAVICON,
            # Without this, Swagger UI sends the document to an online validator for a badge.
            swagger_ui_parameters={"validatorUrl": None},
        )
        page.headers.update(ONLY_THIS_HOST)
        return page

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        page = get_redoc_html(
            openapi_url=openapi_url,
            title=title,
            redoc_js_url=f"{REDOC_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=FAVICON,
            with_google_fonts=False,
        )
        page.headers.update(ONLY_THIS_HOST)
        return page
