"""The ReDoc page of the API reference, served so that it makes no request off this host.

Owns: GET /redoc: ReDoc's standalone bundle from the files fastapi-offline ships (mounted at
`/static-offline-docs` by the app factory) with a Content-Security-Policy that keeps images
and requests on this origin (the bundle's sidebar links a logo on a CDN; the browser does
not fetch it). Must not: change the OpenAPI document.
"""

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse

STATIC_URL = "/static-offline-docs"
"""Where fastapi-offline mounts Swagger UI's and ReDoc's files."""

REDOC_POLICY = ("default-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
                "script-src 'self' 'unsafe-inline' blob:; style-src 'self' 'unsafe-inline'; "
                "worker-src 'self' blob:; font-src 'self' data:; frame-ancestors 'none'")
"""ReDoc's bundle needs inline styles and a blob worker; nothing leaves the origin."""


def install_redoc(app: FastAPI) -> None:
    """Serve /redoc (the app is built with `redoc_url=None`)."""

    @app.get("/redoc", include_in_schema=False)
    def redoc_page() -> HTMLResponse:
        page = get_redoc_html(openapi_url=app.openapi_url or "/openapi.json",
                              title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{STATIC_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{STATIC_URL}/favicon.png",
                              with_google_fonts=False)
        page.headers["Content-Security-Policy"] = REDOC_POLICY
        return page


__all__ = ["install_redoc"]
