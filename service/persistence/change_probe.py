"""Tells a process, in microseconds, whether anything was committed to its SQLite database since it last looked.

`PRAGMA data_version` on a connection changes whenever another connection (of this process or any
other) commits. The probe's connection never writes, so every commit counts. It is exact, unlike file
modification times, which a quick pair of commits of the same size can leave unchanged.
"""

from __future__ import annotations

import sqlite3
import threading

from sqlalchemy.engine import Engine

from service.persistence.db import sqlite_file


class SqliteCommitProbe:
    def __init__(self, database_path: str):
        self._connection = sqlite3.connect(database_path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()

    @classmethod
    def for_engine(cls, engine: Engine) -> SqliteCommitProbe | None:
        """A probe for a file-backed SQLite engine; None for other databases, which are asked by query."""
        database = sqlite_file(engine.url)
        return cls(database) if database else None

    def commit_counter(self) -> int:
        with self._lock:
            return self._connection.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._connection.close()
