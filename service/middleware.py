"""ASGI middleware: request ids and the request-body size limit.

Owns: giving every request an id (`X-Request-ID`, taken from the client when it is a sane
token, otherwise generated) and refusing bodies over the configured size, both when the
`Content-Length` header announces it and when a streamed body grows past it. Must not: parse
bodies or know about routes.
"""

import re
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from service.problems import problem_response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class RequestContextMiddleware:
    """Assigns request ids and enforces `max_body_bytes` (413 payload-too-large)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        request_id = given if given and _SANE_REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message["headers"] = headers
            await send(message)

        if scope.get("method") not in _BODY_METHODS:
            await self.app(scope, receive, send_with_id)
            return
        announced = _header(scope, b"content-length")
        if announced is not None and announced.isdigit() and int(announced) > self.max_body_bytes:
            await self._too_large(scope, receive, send_with_id, f"{int(announced)} bytes")
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            if len(body) > self.max_body_bytes:
                await self._too_large(scope, receive, send_with_id, "more than that")
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send_with_id)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        detail = (f"the request body is {size}, over the limit of {self.max_body_bytes} bytes; "
                  "send a smaller body (e.g. fewer token-count rows) or raise "
                  "ATLAS_MAX_BODY_BYTES on the server")
        response = problem_response("payload-too-large", detail=detail,
                                    instance=str(scope.get("path", "")),
                                    headers={"Connection": "close"})
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields the buffered body once, then defers to the real channel."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


__all__ = ["RequestContextMiddleware"]
