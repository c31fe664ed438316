"""Headers are bounded: httptools would hold a request line and headers of any size in memory until they end."""

import socket

import pytest

from service.runtime.server import MAX_HEADER_BYTES


def raw_request(base: str, headers: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        try:
            connection.sendall(b"GET /healthz HTTP/1.1\r\nhost: test\r\n" + headers + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the last of a huge header went out
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and (b"connection: close" in answer.lower() or len(answer) > 4096):
                break
        return answer


def test_a_header_past_the_bound_is_431_and_the_connection_closes(live_server):
    # 1 MB of one header value: refused once the first 64 KiB have arrived, never read to its end.
    huge = b"x-padding: " + b"a" * (1 << 20) + b"\r\n"
    answer = raw_request(live_server, huge)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"error": "headers_too_large"' in answer and b"connection: close" in answer.lower()


def test_headers_under_the_bound_are_served(live_server):
    # Many headers adding up to just under the bound: served as usual.
    size = MAX_HEADER_BYTES // 2
    answer = raw_request(live_server, b"x-padding: " + b"a" * size + b"\r\nconnection: close\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_a_header_block_arriving_in_one_read_is_counted_too(live_server):
    # 100 KiB of headers sent at once: the parser completes them in one read, which used to skip the count (200).
    block = b"".join(b"x-padding-%d: %s\r\n" % (i, b"a" * 1000) for i in range(100))
    answer = raw_request(live_server, block)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def held(base: str, sent: bytes, wait_s: float) -> tuple[bytes, float]:
    """What the server answers a connection that sends `sent` and then nothing, and after how long it closes."""
    import time

    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as connection:
        started = time.monotonic()
        if sent:
            connection.sendall(sent)
        answer = b""
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except TimeoutError:
            return answer, float("inf")
        return answer, time.monotonic() - started


@pytest.mark.parametrize("sent, what", [
    (b"", "the request line and headers"),  # a connection that never sends a byte
    (b"GET /healthz HTTP/1.1\r\nhost: te", "the request line and headers"),  # half a header line
    # Whole headers announcing a body that never comes.
    (b"POST /v1/analyze/operator HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n",
     "the request body"),
], ids=["silent", "half-a-header", "no-body"])
def test_a_request_that_stops_arriving_is_408_and_closed(live_server, monkeypatch, sent, what):
    from service.runtime.server import BoundedHeadersProtocol

    monkeypatch.setattr(BoundedHeadersProtocol, "timeout_s", 0.5)
    answer, after = held(live_server, sent, wait_s=10)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert what.encode() in answer and after < 5  # held forever before
