"""ASGI middleware: request ids, the request-body size limit and the body read timeout.

Owns: giving every request an id (`X-Request-ID`, taken from the client when it is a sane
token, otherwise generated), refusing bodies over the configured size, both when the
`Content-Length` header announces it and when a streamed body grows past it, and answering
408 (closing the connection) when the next chunk of a body does not arrive within the read
timeout, so a client that announces a body and never sends it cannot hold a connection,
and cancelling the handling of a request whose client disconnected before its answer (a
search it waits for then stops; see `service/pool.py`). Must not: parse bodies or know about routes.
"""

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.middleware.cors import CORSMiddleware

from service.logging_json import REQUEST_ID
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
    """Assigns request ids, enforces `max_body_bytes` (413 payload-too-large) and
    `body_read_timeout_s` (408)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int,
                 body_read_timeout_s: float = 10.0) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_read_timeout_s = body_read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        request_id = given if given and _SANE_REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        REQUEST_ID.set(request_id)  # on every log line written for this request

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
            try:
                message = await asyncio.wait_for(receive(), timeout=self.body_read_timeout_s)
            except TimeoutError:
                await self._too_slow(scope, receive, send_with_id, len(body), announced)
                return
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            if len(body) > self.max_body_bytes:
                await self._too_large(scope, receive, send_with_id, "more than that")
                return
            if not message.get("more_body", False):
                break
        await _run_until_gone(self.app, scope, bytes(body), receive, send_with_id)

    async def _too_slow(self, scope: Scope, receive: Receive, send: Send, received: int,
                        announced: str | None) -> None:
        expected = f" of the {announced} announced" if announced is not None else ""
        detail = (f"the request body stalled: {received} bytes{expected} arrived, then "
                  f"nothing for {self.body_read_timeout_s:g} s (ATLAS_BODY_READ_TIMEOUT_S); "
                  "send the whole body promptly")
        response = problem_response("invalid-request", detail=detail, status=408,
                                    instance=str(scope.get("path", "")),
                                    headers={"Connection": "close"})
        await response(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        detail = (f"the request body is {size}, over the limit of {self.max_body_bytes} bytes; "
                  "send a smaller body (e.g. fewer token-count rows) or raise "
                  "ATLAS_MAX_BODY_BYTES on the server")
        response = problem_response("payload-too-large", detail=detail,
                                    instance=str(scope.get("path", "")),
                                    headers={"Connection": "close"})
        await response(scope, receive, send)


async def _run_until_gone(app: ASGIApp, scope: Scope, body: bytes, receive: Receive,
                          send: Send) -> None:
    """Run `app` on the buffered `body` and cancel it if the client disconnects first.

    Only this function reads `receive` once the body is in; the app gets the body once and
    then waits for the disconnect, as it would on the real channel. Cancelling the app
    cancels what it awaits: a search in the solver pool with no other waiter is stopped.
    """
    gone = asyncio.Event()
    sent = False

    async def app_receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    handler = asyncio.ensure_future(app(scope, app_receive, send))
    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not handler.done():
            # The client went away: nobody will read the answer.
            handler.cancel()
            await asyncio.wait({handler})
            if not handler.cancelled():
                handler.exception()  # retrieved: whatever it was, nobody can be told
            return
        handler.result()  # re-raise what the app raised
    finally:
        watcher.cancel()
        if not handler.done():
            handler.cancel()


def install_cors(app: Any, origins: list[str]) -> None:
    """Let browsers on `origins` call the API (CORS); with none, no CORS headers are sent,
    so browsers refuse cross-origin calls and preflights get 405 like any OPTIONS."""
    if not origins:
        return
    app.add_middleware(CORSMiddleware, allow_origins=origins, allow_credentials=False,
                       allow_methods=["GET", "POST"],
                       allow_headers=["Content-Type", "Accept", "X-Request-ID"],
                       expose_headers=["Location", "Retry-After", "X-Request-ID",
                                       "X-Plan-Stored"],
                       max_age=600)


__all__ = ["RequestContextMiddleware", "install_cors"]
