"""Admission of large request bodies, before they are parsed.

Owns: at most `slots` requests whose announced body exceeds `threshold_bytes` in the
service at once (from the first byte read to the last byte answered); the next one is
refused at once with 503 large-bodies-busy and Retry-After, without reading its body. Parsing and
validating a body are single calls that hold the interpreter lock (json.loads, then
pydantic): for a 58-layer MoE placement (4.75 MB) about 0.45 s each on the event loop, so
four such bodies at once held /healthz for seconds wherever the work ran after. Must not:
read bodies, or admit by anything but the announced size.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

from service.problems import problem_response


class LargeBodyGate:
    """503 large-bodies-busy for a large body while `slots` others are in the service."""

    def __init__(self, app: ASGIApp, *, threshold_bytes: int, slots: int,
                 retry_after_s: int) -> None:
        self.app = app
        self.threshold_bytes = threshold_bytes
        self.slots = slots
        self.retry_after_s = retry_after_s
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        size = _announced(scope) if scope["type"] == "http" else None
        if size is None or size <= self.threshold_bytes:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.slots:
            response = problem_response(
                "large-bodies-busy", instance=str(scope.get("path", "")),
                detail=f"{self.in_flight} request(s) with bodies over {self.threshold_bytes} "
                f"bytes are already being served (ATLAS_LARGE_BODY_SLOTS={self.slots}); "
                f"retry after {self.retry_after_s} s",
                headers={"Retry-After": str(self.retry_after_s), "Connection": "close"})
            await response(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def _announced(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1")
            return int(text) if text.isdigit() else None
    return None


__all__ = ["LargeBodyGate"]
