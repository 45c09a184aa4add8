"""Bounded on-disk spool of encoded block results waiting for Kafka (SQLite, stdlib only).

The publisher writes a result here when Kafka cannot take it, and later reads the spool back in
order (by the sequence number it assigned when the result was published) until it is empty. The
file lives in the controller's state directory, so undelivered results survive a restart.

- Order: rows are read by ``seq``; the publisher assigns seq values in publish order and starts
  after :meth:`Spool.max_seq` when it re-opens a spool, so old rows stay ahead of new ones.
- No duplicates: (measurement_id, block_number) is UNIQUE; adding a block that is already spooled
  is ignored and counted.
- Bound: at most ``max_rows`` rows and ``max_bytes`` bytes of key+value. Adding beyond the bound
  drops the OLDEST rows: when an outage outlasts the spool, the newest blocks are the ones a
  dashboard needs. Drops are counted and logged (once when the spool fills, then at most every
  ``log_interval`` seconds while it keeps dropping).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from srv6pm_controller.publish.schema import EncodedResult

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
    seq            INTEGER PRIMARY KEY,
    measurement_id TEXT    NOT NULL,
    block_number   INTEGER NOT NULL,
    key            BLOB    NOT NULL,
    value          BLOB    NOT NULL,
    UNIQUE (measurement_id, block_number)
)
"""


@dataclass(frozen=True, slots=True)
class SpooledRecord:
    """One spooled result: its publish sequence number and the encoded message."""

    seq: int
    record: EncodedResult


class Spool:
    """A bounded, ordered, de-duplicating on-disk queue of :class:`EncodedResult`. Thread-safe."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_rows: int = 1_000_000,
        max_bytes: int = 512 * 2**20,
        log_interval: float = 10.0,
    ) -> None:
        """Open (or create) the spool file at ``path``; its directory must exist."""
        if max_rows < 1 or max_bytes < 1:
            raise ValueError("spool bounds must be positive")
        self.path = Path(path)
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._log_interval = log_interval
        self._lock = threading.Lock()
        # One connection shared by the publisher's threads, serialised by self._lock.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # WAL + NORMAL: a commit survives a crash of the controller without an fsync per row.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        rows, size = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(key) + LENGTH(value)), 0) FROM spool"
        ).fetchone()
        self._rows: int = rows
        self._bytes: int = size
        self.spooled_total = 0  # rows accepted since this object was created
        self.dropped_total = 0  # rows dropped to respect the bound
        self.duplicates_total = 0  # adds ignored because the block was already spooled
        self._full = False
        self._last_drop_log = 0.0
        self._dropped_since_log = 0
        if rows:
            log.info("spool %s: %d results (%d bytes) waiting from a previous run", self.path, rows, size)

    # --- state ---------------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Rows currently spooled."""
        return self._rows

    @property
    def size_bytes(self) -> int:
        """Bytes (key + value) currently spooled."""
        return self._bytes

    def max_seq(self) -> int:
        """The highest sequence number spooled, 0 when empty."""
        with self._lock:
            (seq,) = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM spool").fetchone()
        return int(seq)

    # --- writing -------------------------------------------------------------------------------------

    def add(self, seq: int, record: EncodedResult) -> bool:
        """Spool ``record`` under ``seq``. False if that block was already spooled (ignored)."""
        size = len(record.key) + len(record.value)
        if size > self.max_bytes:
            # Cannot fit even in an empty spool: count it as dropped rather than flush everything.
            with self._lock:
                self._note_drop(1)
            return False
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO spool (seq, measurement_id, block_number, key, value)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (seq, record.measurement_id, record.block_number, record.key, record.value),
                )
                if cur.rowcount == 0:
                    self._db.execute("COMMIT")
                    self.duplicates_total += 1
                    return False
                self._rows += 1
                self._bytes += size
                dropped = self._enforce_bound()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                self._recount()
                raise
            self.spooled_total += 1
            if dropped:
                self._note_drop(dropped)
            return True

    def _enforce_bound(self) -> int:
        """Delete the oldest rows until the bound holds; returns how many (inside a transaction)."""
        dropped = 0
        while self._rows > self.max_rows or self._bytes > self.max_bytes:
            excess = max(self._rows - self.max_rows, 1)
            victims = self._db.execute(
                "SELECT seq, LENGTH(key) + LENGTH(value) FROM spool ORDER BY seq LIMIT ?", (excess,)
            ).fetchall()
            if not victims:
                break
            self._db.execute("DELETE FROM spool WHERE seq <= ?", (victims[-1][0],))
            self._rows -= len(victims)
            self._bytes -= sum(size for _, size in victims)
            dropped += len(victims)
        return dropped

    def _note_drop(self, count: int) -> None:
        self.dropped_total += count
        self._dropped_since_log += count
        now = time.monotonic()
        if not self._full or now - self._last_drop_log >= self._log_interval:
            log.warning(
                "spool %s full (%d rows, %d bytes; bound %d rows, %d bytes): dropped %d oldest "
                "results (%d in total)",
                self.path,
                self._rows,
                self._bytes,
                self.max_rows,
                self.max_bytes,
                self._dropped_since_log,
                self.dropped_total,
            )
            self._full = True
            self._last_drop_log = now
            self._dropped_since_log = 0

    # --- reading -------------------------------------------------------------------------------------

    def peek(self, limit: int) -> list[SpooledRecord]:
        """The oldest ``limit`` rows, in publish order (they stay until :meth:`remove`)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, measurement_id, block_number, key, value FROM spool ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            SpooledRecord(seq, EncodedResult(mid, block, bytes(key), bytes(value)))
            for seq, mid, block, key, value in rows
        ]

    def remove(self, seqs: list[int]) -> None:
        """Delete delivered rows by sequence number (unknown ones are ignored)."""
        if not seqs:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                removed_rows = removed_bytes = 0
                for start in range(0, len(seqs), 500):  # stay under SQLite's bound-parameter limit
                    chunk = seqs[start : start + 500]
                    sizes = self._db.execute(
                        f"DELETE FROM spool WHERE seq IN ({','.join('?' * len(chunk))})"
                        " RETURNING LENGTH(key) + LENGTH(value)",
                        chunk,
                    ).fetchall()
                    removed_rows += len(sizes)
                    removed_bytes += sum(size for (size,) in sizes)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                self._recount()
                raise
            self._rows -= removed_rows
            self._bytes -= removed_bytes
            if self._full and self._rows < self.max_rows and self._bytes < self.max_bytes:
                self._full = False
                if self._dropped_since_log:
                    log.warning(
                        "spool %s: %d more results dropped before it drained",
                        self.path,
                        self._dropped_since_log,
                    )
                    self._dropped_since_log = 0

    def _recount(self) -> None:
        rows, size = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(key) + LENGTH(value)), 0) FROM spool"
        ).fetchone()
        self._rows, self._bytes = rows, size

    def close(self) -> None:
        """Close the database (the file and its rows stay)."""
        with self._lock:
            self._db.close()
