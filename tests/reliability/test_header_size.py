"""Headers are bounded: httptools would hold a request line and headers of any size in memory until they end."""

import socket

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
