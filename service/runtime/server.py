"""Serving the app: uvicorn with its fast (httptools) HTTP parser, bounded in what that parser does not bound.

httptools keeps a request's line and headers in memory until they end, however long they are: a client that sends
a 256 MB header was answered, and the worker grew by as much. `BoundedHeadersProtocol` counts what arrives before
the headers end and answers 431 once it passes MAX_HEADER_BYTES, closing the connection. Every way the project
starts the server (`make serve`, the container, `roofline serve`) goes through `serve()` so that none forgets it.
"""

from __future__ import annotations

import argparse
import json

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = 64 * 1024  # request line and headers; browsers and proxies send a few KiB (nginx: 8 KiB a line)
GRACEFUL_SHUTDOWN_S = 10


class BoundedHeadersProtocol(HttpToolsProtocol):
    _header_bytes = 0
    _in_headers = True  # from the connection's start, and again after each request, until its headers end

    def on_message_begin(self) -> None:
        self._in_headers = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A chunk that ends with the headers still open was all header (or a body before them, already answered);
        # one that completes them may carry body bytes, which are not counted.
        if self._in_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refuse_headers()

    def _refuse_headers(self) -> None:
        body = json.dumps({"error": "headers_too_large", "fields": [],
                           "detail": f"the request line and headers passed {MAX_HEADER_BYTES:,} bytes"}).encode()
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                             b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()


def serve(host: str, port: int, workers: int = 1, log_level: str = "info") -> None:
    uvicorn.run("service.main:app", host=host, port=port, workers=workers, access_log=False, log_level=log_level,
                http=BoundedHeadersProtocol, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)


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
