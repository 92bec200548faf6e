"""The documented limit on a request's head, enforced on every request.

Owns: refusing a request whose request line and headers together pass `max_header_bytes`
(ATLAS_MAX_HEADER_BYTES) with 431 invalid-request naming the limit. The HTTP parser's own
bound (uvicorn's `h11_max_incomplete_event_size`) applies only while a head is still
incomplete, so a large head that arrives in one read passed it. Must not: read bodies or
know the routes.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

from service.problems import problem_response

HEAD_LINE_OVERHEAD_BYTES = 4
"""': ' and CRLF around each header line, as sent on the wire."""


def head_bytes(scope: Scope) -> int:
    """The size of the request's head as it was sent: request line plus header lines."""
    target = len(scope.get("raw_path") or scope.get("path", "").encode()) + len(
        scope.get("query_string", b"")) + 1
    line = len(scope.get("method", "")) + target + len("HTTP/1.1") + 4
    return line + sum(len(name) + len(value) + HEAD_LINE_OVERHEAD_BYTES
                      for name, value in scope.get("headers", ()))


class HeaderLimitMiddleware:
    """431 for a request head over `max_header_bytes`."""

    def __init__(self, app: ASGIApp, *, max_header_bytes: int) -> None:
        self.app = app
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = head_bytes(scope)
            if size > self.max_header_bytes:
                response = problem_response(
                    "invalid-request", status=431, instance=str(scope.get("path", "")),
                    detail=f"the request line and headers take {size} bytes, over the limit "
                    f"of {self.max_header_bytes} bytes (ATLAS_MAX_HEADER_BYTES); send "
                    "fewer or shorter headers", headers={"Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


__all__ = ["HEAD_LINE_OVERHEAD_BYTES", "HeaderLimitMiddleware", "head_bytes"]
