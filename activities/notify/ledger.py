"""What each notifier has already taken, by notification key: the ledger that keeps a retried
``notify.send`` from sending twice. SQLite in the data dir (one host); a fleet on the PostgreSQL
state backend shares one table (``activities.stores.postgres``)."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol


class NotificationLedger(Protocol):
    """Records that ``channel`` took the notification ``key``."""

    def taken(self, key: str, channel: str) -> bool:
        """Whether ``channel`` took ``key`` before."""
        ...

    def record(self, key: str, channel: str) -> None:
        """Record that ``channel`` took ``key`` (idempotent)."""
        ...


class SqliteNotificationLedger:
    """The ledger in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS notifications ("
            " key TEXT NOT NULL, channel TEXT NOT NULL, taken_at TEXT NOT NULL, PRIMARY KEY (key, channel))"
        )
        return conn

    def taken(self, key: str, channel: str) -> bool:
        with contextlib.closing(self._connect()) as conn:
            row = conn.execute(
                "SELECT 1 FROM notifications WHERE key = ? AND channel = ?", (key, channel)
            ).fetchone()
        return row is not None

    def record(self, key: str, channel: str) -> None:
        with contextlib.closing(self._connect()) as conn, conn:
            conn.execute(
                "INSERT OR IGNORE INTO notifications (key, channel, taken_at) VALUES (?, ?, ?)",
                (key, channel, datetime.now(UTC).isoformat()),
            )
