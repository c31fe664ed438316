"""Serving the app: uvicorn with its fast (httptools) HTTP parser, bounded in what that parser does not bound.

httptools keeps a request's line and headers in memory until they end, however long they are: a client that sends
a 256 MB header was answered, and the worker grew by as much. `BoundedHeadersProtocol` counts what arrives before
the headers end and answers 431 once it passes MAX_HEADER_BYTES, closing the connection. Every way the project
starts the server (`make serve`, the container, `roofline serve`) goes through `serve()` so that none forgets it.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = 64 * 1024  # request line and headers; browsers and proxies send a few KiB (nginx: 8 KiB a line)


class BoundedHeadersProtocol(HttpToolsProtocol):
    """Also bounds in time what arrives: a request's line and headers, and then its body, must each be whole within
    `timeout_s` of their first byte (of the connection's start, for the first request), else 408 and the connection
    closes. uvicorn's keep-alive timer stops at the first byte, so half a header line, or headers announcing a body
    that never comes, held a connection forever (4,000 of them: 2,200 descriptors a worker)."""

    timeout_s = 10.0  # ROOFLINE_BODY_TIMEOUT_S, set by serve()
    _header_bytes = 0
    _in_headers = True  # from the connection's start, and again after each request, until its headers end
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm("the request line and headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self._in_headers = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
        self._disarm()
        super().on_headers_complete()
        # A body is announced (a length or chunks): it must follow within the timeout too.
        announced = {name: value for name, value in self.headers if name in (b"content-length", b"transfer-encoding")}
        if announced.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in announced:
            self._arm("the request body")

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            if self._deadline is None:  # the first byte of a request after a response
                self._arm("the request line and headers")
            # Counted before parsing: a whole header block in one read completes (and dispatches) in the parser.
            end = data.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else end + 4
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refuse(431, "Request Header Fields Too Large", "headers_too_large",
                             f"the request line and headers passed {MAX_HEADER_BYTES:,} bytes")
                return
        super().data_received(data)

    def _arm(self, what: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.timeout_s, self._expired, what)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str) -> None:
        self._deadline = None
        if self.transport.is_closing() or (self.cycle is not None and self.cycle.response_started):
            return
        self._refuse(408, "Request Timeout", "request_timeout",
                     f"{what} did not arrive within {self.timeout_s:g} s (ROOFLINE_BODY_TIMEOUT_S)")

    def _refuse(self, status: int, reason: str, error: str, detail: str) -> None:
        body = json.dumps({"error": error, "fields": [], "detail": detail}).encode()
        self.transport.write(f"HTTP/1.1 {status} {reason}\r\n".encode() + b"content-type: application/json\r\n"
                             b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()


def serve(host: str, port: int, workers: int = 1, log_level: str = "info") -> None:
    from service.runtime.config import get_settings

    settings = get_settings()
    BoundedHeadersProtocol.timeout_s = settings.body_timeout_s
    uvicorn.run("service.main:app", host=host, port=port, workers=workers, access_log=False, log_level=log_level,
                http=BoundedHeadersProtocol, timeout_graceful_shutdown=settings.graceful_shutdown_s)


def main() -> None:
    parser = argparse.ArgumentParser(description="serve the roofline API (migrate first: python -m "
                                                 "service.persistence.migrate)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args()
    serve(args.host, args.port, args.workers, args.log_level)


if __name__ == "__main__":
    main()
