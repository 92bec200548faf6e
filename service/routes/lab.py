"""The Training Systems Lab page: GET /lab and its packaged assets under /lab/assets.

Owns: serving `service/static/lab/` (HTML, CSS and JavaScript shipped with the package, no
build step, no request outside the service) and `install_lab(app)`. Must not: compute
anything; the page draws what the public API returns.
"""

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

LAB_DIR = Path(__file__).resolve().parent.parent / "static" / "lab"
"""The page's files, installed as package data."""

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; "
                               "style-src 'self'; script-src 'self'; connect-src 'self'; "
                               "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
"""The page may load and call only its own origin."""


def install_lab(app: FastAPI) -> None:
    """Mount the assets and the page (both left out of the OpenAPI document)."""
    app.mount("/lab/assets", StaticFiles(directory=LAB_DIR), name="lab-assets")

    @app.get("/lab", include_in_schema=False)
    def lab_page() -> FileResponse:
        return FileResponse(LAB_DIR / "index.html", media_type="text/html",
                            headers=SECURITY_HEADERS)


__all__ = ["LAB_DIR", "install_lab"]
