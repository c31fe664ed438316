"""Writers against the service as it runs in production (uvicorn, two worker processes): none is lost,
none sees "database is locked", and a kill -9 loses nothing that was acknowledged."""

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import AUTH, TOKEN

DEVICE = "nvidia-h100-sxm"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(database_url: str, port: int, log_path, workers: int = 2) -> subprocess.Popen:
    """The server's stderr goes to a file: a pipe nobody reads fills up and blocks the workers."""
    env = {**os.environ, "ROOFLINE_DATABASE_URL": database_url, "ROOFLINE_API_TOKENS": f"tester={TOKEN}",
           "ROOFLINE_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen(
        [sys.executable, "-m", "service.runtime.server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers), "--log-level", "warning"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=open(log_path, "ab"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.1)
    stop(server)
    raise AssertionError("the server did not start: " + log_tail(log_path))


def log_tail(log_path, size: int = 4000) -> str:
    return log_path.read_bytes()[-size:].decode(errors="replace")


def stop(server: subprocess.Popen, sig=signal.SIGTERM) -> None:
    try:
        os.killpg(server.pid, sig)
    except ProcessLookupError:
        pass
    server.wait(timeout=30)


def submission(writer: int, n: int) -> dict:
    return {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.0e12 + writer * 1e9 + n * 1e6,
            "tool": f"writer-{writer}", "notes": f"{writer}/{n}"}


def stored_ids(base: str) -> set[int]:
    ids, offset = set(), 0
    while True:
        page = httpx.get(f"{base}/v1/devices/{DEVICE}/benchmarks", params={"limit": 1000, "offset": offset}).json()
        ids |= {row["id"] for row in page}
        if len(page) < 1000:
            return ids
        offset += 1000


@pytest.fixture
def server_log(tmp_path):
    return tmp_path / "server.log"


@pytest.fixture(params=[1, 2], ids=["one-worker", "two-workers"])
def server_url(request, database_url, server_log):
    """One worker puts all sixteen writers in one process (its connection pool holds fifteen): that is
    where a request needing a second connection for the catalog once starved the pool."""
    port = free_port()
    server = start_server(database_url, port, server_log, workers=request.param)
    yield f"http://127.0.0.1:{port}"
    stop(server)


def test_sixteen_writers_nothing_lost(server_url, server_log):
    acknowledged, failures = [], []
    lock = threading.Lock()

    def writer(index):
        with httpx.Client(base_url=server_url, headers=AUTH, timeout=60) as client:
            for n in range(50):
                response = client.post(f"/v1/devices/{DEVICE}/benchmarks", json=submission(index, n))
                with lock:
                    if response.status_code == 201:
                        acknowledged.append(response.json()["id"])
                    else:
                        failures.append(f"{response.status_code} {response.text[:200]}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [], log_tail(server_log)
    assert len(acknowledged) == 16 * 50 == len(set(acknowledged))
    assert set(acknowledged) <= stored_ids(server_url)
    # Every worker answers from the same data: the effective roof is the median of all 800.
    roofs = httpx.get(f"{server_url}/v1/devices/{DEVICE}/roofs").json()
    assert next(m for m in roofs["memory"] if m["level"] == "hbm")["measured"]["count"] == 800


def test_kill_minus_nine_loses_no_acknowledged_submission(database_url, server_log):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(database_url, port, server_log)
    acknowledged: list[int] = []
    lock = threading.Lock()
    killed = threading.Event()

    def writer(index):
        with httpx.Client(base_url=base, headers=AUTH, timeout=10) as client:
            for n in range(10_000):
                if killed.is_set():
                    return
                try:
                    response = client.post(f"/v1/devices/{DEVICE}/benchmarks", json=submission(index, n))
                except httpx.TransportError:
                    return
                if response.status_code == 201:
                    with lock:
                        acknowledged.append(response.json()["id"])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    while len(acknowledged) < 100:
        time.sleep(0.05)
    stop(server, signal.SIGKILL)  # every process of the server, mid-write
    killed.set()
    for t in threads:
        t.join()

    server = start_server(database_url, port, server_log)
    try:
        assert set(acknowledged) <= stored_ids(base)
    finally:
        stop(server)
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        with sqlite3.connect(url.database) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
