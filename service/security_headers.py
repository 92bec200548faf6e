"""Security headers on every answer.

Owns: `SecurityHeadersMiddleware` and `install_security_headers(app)`: every response gets
`X-Content-Type-Options: nosniff` (browsers keep the declared media type: an SVG or a JSON
answer is never run as a script or page), `X-Frame-Options: DENY` and a CSP
`frame-ancestors 'none'` (no page of the service is framed by another site),
`Referrer-Policy: no-referrer`, and a `Content-Security-Policy`: the one a route sets
itself (the lab page, `service/routes/lab.py`; ReDoc, `service/routes/reference.py`) is
kept; another HTML page (the offline Swagger UI, which starts with an inline script) gets
`HTML_POLICY`, which keeps everything it loads on this origin; every other answer (JSON,
problems, SVG, trace files) gets `API_POLICY`, under which an answer opened in a browser
loads and runs nothing. Must not: change bodies or status codes, or know about routes.
"""

from typing import Any

from starlette.datastructures import MutableHeaders

from service.middleware import ASGIApp, Message, Receive, Scope, Send

API_POLICY = ("default-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
              "form-action 'none'")
"""The CSP of every non-HTML answer."""

HTML_POLICY = ("default-src 'self'; img-src 'self' data:; script-src 'self' 'unsafe-inline'; "
               "style-src 'self' 'unsafe-inline'; connect-src 'self'; object-src 'none'; "
               "base-uri 'none'; frame-ancestors 'none'")
"""The CSP of an HTML page that sets none of its own (Swagger UI: its start-up script and
styles are inline, its files and the OpenAPI document on this origin)."""

ALWAYS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
          "Referrer-Policy": "no-referrer"}
"""Headers every response carries (a value the route set is kept)."""


class SecurityHeadersMiddleware:
    """Adds `ALWAYS` and a Content-Security-Policy to each response that lacks them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in ALWAYS.items():
                    if name not in headers:
                        headers[name] = value
                if "content-security-policy" not in headers:
                    html = headers.get("content-type", "").startswith("text/html")
                    headers["Content-Security-Policy"] = HTML_POLICY if html else API_POLICY
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install_security_headers(app: Any) -> None:
    """Wrap `app` (call after the other middleware: the headers then reach every answer
    they build, the 413 and 408 refusals and the CORS preflights included)."""
    app.add_middleware(SecurityHeadersMiddleware)


__all__ = ["API_POLICY", "HTML_POLICY", "SecurityHeadersMiddleware",
           "install_security_headers"]
