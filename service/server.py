"""The HTTP/1.1 protocol `serve` runs under uvicorn: uvicorn's h11 protocol with a read
timeout on the request head.

Owns: `HeadTimeoutProtocol` and `protocol_factory(head_timeout_s)`. uvicorn has no timeout
on the request line and headers: its keep-alive timer stops at the first byte, so a client
that opens a connection and sends nothing, or sends its headers a byte at a time, holds the
connection for as long as it likes. Here the whole head must arrive within
`head_timeout_s` of the connection opening or of the previous response on it ending; a
client that sent part of a head then gets `408` and the connection is closed, one that sent
nothing is disconnected. (Bodies have their own timeout: `service/middleware.py`.) Must
not: know the app.
"""

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_TIMEOUT_BODY = b"the request head did not arrive in time (ATLAS_HEADER_READ_TIMEOUT_S)\n"
_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                     b"connection: close\r\ncontent-length: "
                     + str(len(_TIMEOUT_BODY)).encode("ascii") + b"\r\n\r\n" + _TIMEOUT_BODY)


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request head is late."""

    def __init__(self, *args: Any, head_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout_s = head_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in (or the request failed)
            self._disarm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # no pipelined request was already read: wait for one

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        partial_head, _closed = self.conn.trailing_data
        if partial_head:
            self.logger.info("closing a connection whose request head took over %g s",
                             self.head_timeout_s)
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def protocol_factory(head_timeout_s: float) -> Callable[..., HeadTimeoutProtocol]:
    """What uvicorn's `http` option takes: builds the protocol with this head timeout (a
    picklable partial, so `--workers N` can hand it to its worker processes)."""
    return functools.partial(HeadTimeoutProtocol, head_timeout_s=head_timeout_s)


__all__ = ["HeadTimeoutProtocol", "protocol_factory"]
