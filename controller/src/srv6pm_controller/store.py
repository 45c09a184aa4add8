"""The controller's persistent state: registered nodes and provisioned tunnels, in SQLite.

Records are the API's own protobuf messages, serialised; the database file is created with
mode 0600 because node credentials (keys, tokens) are kept in it to reconnect after a restart.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from google.protobuf.message import Message

from srv6pm.controller.v1 import measurement_service_pb2, node_service_pb2, tunnel_service_pb2
from srv6pm.node.v1 import srv6_pm_pb2

M = TypeVar("M", bound=Message)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS tunnels (name TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (name TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    measurement_id TEXT NOT NULL,
    block_number INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (measurement_id, block_number)
);
CREATE TABLE IF NOT EXISTS measurement_starts (name TEXT PRIMARY KEY, first_block INTEGER NOT NULL);
"""

# Results kept per measurement for GetMeasurement and for resuming streams; the full history
# lives downstream (Kafka -> InfluxDB). Older ones are deleted every PRUNE_EVERY blocks, not at
# every insert (each delete walks KEEP_RESULTS index entries): between KEEP_RESULTS and
# KEEP_RESULTS + PRUNE_EVERY are kept.
KEEP_RESULTS = 1000
PRUNE_EVERY = 100


def default_state_dir() -> Path:
    """Per-user state directory: $XDG_STATE_HOME/srv6pm, else ~/.local/state/srv6pm."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "srv6pm"


class Store:
    """Nodes, tunnels, measurements and recent results. Thread-safe; every write is one committed
    transaction."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = state_dir / "controller.sqlite3"
        if not path.exists():
            path.touch(mode=0o600)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        # WAL without a sync per commit: a result write costs no fsync (a crash of the process
        # loses nothing; a power cut may lose the last commits, which the nodes still have).
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self.path = path

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def _put(self, table: str, name: str, record: Message) -> None:
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO {table} (name, record) VALUES (?, ?)",
                (name, record.SerializeToString()),
            )

    def _get(self, table: str, name: str, cls: type[M]) -> M | None:
        with self._lock:
            row = self._db.execute(f"SELECT record FROM {table} WHERE name = ?", (name,)).fetchone()
        return cls.FromString(row[0]) if row else None

    def _all(self, table: str, cls: type[M]) -> list[M]:
        with self._lock:
            rows = self._db.execute(f"SELECT record FROM {table} ORDER BY name").fetchall()
        return [cls.FromString(r[0]) for r in rows]

    def _delete(self, table: str, name: str) -> bool:
        with self._lock:
            return self._db.execute(f"DELETE FROM {table} WHERE name = ?", (name,)).rowcount > 0

    def put_node(self, node: node_service_pb2.Node) -> None:
        """Insert or replace a node (with its credentials)."""
        self._put("nodes", node.name, node)

    def get_node(self, name: str) -> node_service_pb2.Node | None:
        """A node by name, or None."""
        return self._get("nodes", name, node_service_pb2.Node)

    def nodes(self) -> list[node_service_pb2.Node]:
        """All nodes, by name."""
        return self._all("nodes", node_service_pb2.Node)

    def delete_node(self, name: str) -> bool:
        """Forget a node; False if unknown."""
        return self._delete("nodes", name)

    def put_tunnel(self, tunnel: tunnel_service_pb2.Tunnel) -> None:
        """Insert or replace a tunnel."""
        self._put("tunnels", tunnel.name, tunnel)

    def get_tunnel(self, name: str) -> tunnel_service_pb2.Tunnel | None:
        """A tunnel by name, or None."""
        return self._get("tunnels", name, tunnel_service_pb2.Tunnel)

    def tunnels(self) -> list[tunnel_service_pb2.Tunnel]:
        """All tunnels, by name."""
        return self._all("tunnels", tunnel_service_pb2.Tunnel)

    def delete_tunnel(self, name: str) -> bool:
        """Forget a tunnel; False if unknown."""
        return self._delete("tunnels", name)

    def put_measurement(self, m: measurement_service_pb2.Measurement) -> None:
        """Insert or replace a measurement."""
        self._put("measurements", m.spec.measurement_id, m)

    def get_measurement(self, mid: str) -> measurement_service_pb2.Measurement | None:
        """A measurement by id, or None."""
        return self._get("measurements", mid, measurement_service_pb2.Measurement)

    def measurements(self) -> list[measurement_service_pb2.Measurement]:
        """All measurements, by id."""
        return self._all("measurements", measurement_service_pb2.Measurement)

    def delete_measurement(self, mid: str) -> bool:
        """Forget a measurement and its stored results; False if unknown."""
        with self._lock:
            self._db.execute("DELETE FROM results WHERE measurement_id = ?", (mid,))
            self._db.execute("DELETE FROM measurement_starts WHERE name = ?", (mid,))
        return self._delete("measurements", mid)

    def set_first_block(self, mid: str, block: int) -> None:
        """The first block of this run of a measurement on its sender node: a node keeps the
        results of an earlier measurement of the same id, which belong to nobody now."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO measurement_starts (name, first_block) VALUES (?, ?)", (mid, block)
            )

    def first_block(self, mid: str) -> int:
        """The first block of a measurement's run (0 if unknown: every block is its own)."""
        with self._lock:
            row = self._db.execute(
                "SELECT first_block FROM measurement_starts WHERE name = ?", (mid,)
            ).fetchone()
        return row[0] if row else 0

    def add_result(self, result: srv6_pm_pb2.BlockResult) -> bool:
        """Store a block result; False if it was not stored (see :meth:`add_results`)."""
        return bool(self.add_results([result]))

    def add_results(self, results: Iterable[srv6_pm_pb2.BlockResult]) -> list[srv6_pm_pb2.BlockResult]:
        """Store block results in one transaction; the ones newly stored, in order. Left out: a
        (measurement, block) already stored, a measurement not (or no longer) registered, and
        blocks before a measurement's first block (an earlier measurement of the same id)."""
        new = []
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for r in results:
                    mid, n = r.measurement_id, r.block_number
                    cur = self._db.execute(
                        "INSERT OR IGNORE INTO results (measurement_id, block_number, record) "
                        "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM measurements WHERE name = ?) "
                        "AND ? >= COALESCE((SELECT first_block FROM measurement_starts WHERE name = ?), 0)",
                        (mid, n, r.SerializeToString(), mid, n, mid),
                    )
                    if cur.rowcount:
                        new.append(r)
                for mid in {r.measurement_id for r in new if r.block_number % PRUNE_EVERY == 0}:
                    self._db.execute(
                        "DELETE FROM results WHERE measurement_id = ? AND block_number <= ("
                        "SELECT block_number FROM results WHERE measurement_id = ? "
                        "ORDER BY block_number DESC LIMIT 1 OFFSET ?)",
                        (mid, mid, KEEP_RESULTS),
                    )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return new

    def recent_results(self, mid: str, limit: int) -> list[srv6_pm_pb2.BlockResult]:
        """The newest ``limit`` results of a measurement, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT record FROM results WHERE measurement_id = ? ORDER BY block_number DESC LIMIT ?",
                (mid, limit),
            ).fetchall()
        return [srv6_pm_pb2.BlockResult.FromString(r[0]) for r in reversed(rows)]

    def results_since(self, mid: str, since_block: int) -> list[srv6_pm_pb2.BlockResult]:
        """The stored results of a measurement with block_number > ``since_block``, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT record FROM results WHERE measurement_id = ? AND block_number > ? "
                "ORDER BY block_number",
                (mid, since_block),
            ).fetchall()
        return [srv6_pm_pb2.BlockResult.FromString(r[0]) for r in rows]

    def last_block(self, mid: str) -> int:
        """The newest stored block number of a measurement (0 if none)."""
        with self._lock:
            row = self._db.execute(
                "SELECT MAX(block_number) FROM results WHERE measurement_id = ?", (mid,)
            ).fetchone()
        return row[0] or 0
