"""What the node's measurement engine keeps across restarts, in SQLite under its state directory.

* the node configuration (driver, interfaces, colour bit, ports);
* every measurement it runs, by (id, role), with its spec and state — restarted at boot;
* each sender measurement's last counter snapshot per colour (the loss chains), so the first
  exchange after a restart is diffed against the last one before it: no block silently lost;
* when each monitored flow's counters were created (their epoch: a counter that is removed and
  created again restarts from zero, and the far end must be able to tell);
* the per-block results (the last ``KEEP_RESULTS`` per measurement), for GetResults and for
  replaying a result stream from ``since_block``.

Records are the API's protobuf messages, serialised. Only the engine thread writes.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from srv6pm.node.v1 import srv6_pm_pb2 as pb

KEEP_RESULTS = 10_000

_SCHEMA = """
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS config (id INTEGER PRIMARY KEY CHECK (id = 0), record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    measurement_id TEXT NOT NULL, role INTEGER NOT NULL, record BLOB NOT NULL,
    PRIMARY KEY (measurement_id, role)
);
CREATE TABLE IF NOT EXISTS chains (
    measurement_id TEXT NOT NULL, colour INTEGER NOT NULL, block INTEGER NOT NULL,
    s_txc INTEGER NOT NULL, r_rxc INTEGER NOT NULL, r_txc INTEGER, s_rxc INTEGER,
    s_epoch INTEGER NOT NULL, r_epoch INTEGER,
    PRIMARY KEY (measurement_id, colour)
);
CREATE TABLE IF NOT EXISTS flow_epochs (
    direction TEXT NOT NULL, sids TEXT NOT NULL, epoch INTEGER NOT NULL,
    PRIMARY KEY (direction, sids)
);
CREATE TABLE IF NOT EXISTS results (
    measurement_id TEXT NOT NULL, block_number INTEGER NOT NULL, record BLOB NOT NULL,
    PRIMARY KEY (measurement_id, block_number)
);
"""


def default_state_dir() -> Path:
    """/var/lib/srv6pm-node for root, else $XDG_STATE_HOME/srv6pm-node (~/.local/state/…)."""
    if os.geteuid() == 0:
        return Path("/var/lib/srv6pm-node")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "srv6pm-node"


@dataclass(frozen=True)
class ChainPoint:
    """Cumulative counters of one colour as of one block's exchange (32-bit wire values), and
    the epochs of the counters they came from (sender's, reflector's; None: not told)."""

    block: int
    s_txc: int
    r_rxc: int
    r_txc: int | None
    s_rxc: int | None
    s_epoch: int = 0
    r_epoch: int | None = None


class State:
    """The engine's SQLite database. Thread-safe."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = state_dir / "pm.sqlite3"
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # --- configuration ----------------------------------------------------------------------

    def config(self) -> pb.NodeConfig | None:
        """The stored node configuration, if any."""
        with self._lock:
            row = self._db.execute("SELECT record FROM config WHERE id = 0").fetchone()
        return pb.NodeConfig.FromString(row[0]) if row else None

    def put_config(self, config: pb.NodeConfig) -> None:
        """Store the node configuration."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO config (id, record) VALUES (0, ?)", (config.SerializeToString(),)
            )

    # --- measurements -----------------------------------------------------------------------

    def measurements(self) -> list[pb.MeasurementStatus]:
        """Every stored measurement status (running and stopped)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT record FROM measurements ORDER BY measurement_id, role"
            ).fetchall()
        return [pb.MeasurementStatus.FromString(r[0]) for r in rows]

    def put_measurement(self, status: pb.MeasurementStatus) -> None:
        """Store a measurement status (keyed by id and role)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO measurements VALUES (?, ?, ?)",
                (status.spec.measurement_id, status.role, status.SerializeToString()),
            )

    def forget_chains(self, measurement_id: str) -> None:
        """Drop a measurement's loss chains (a fresh start measures from a new baseline)."""
        with self._lock:
            self._db.execute("DELETE FROM chains WHERE measurement_id = ?", (measurement_id,))

    # --- loss chains ------------------------------------------------------------------------

    def chains(self, measurement_id: str) -> dict[int, ChainPoint]:
        """The last snapshot per colour."""
        with self._lock:
            rows = self._db.execute(
                "SELECT colour, block, s_txc, r_rxc, r_txc, s_rxc, s_epoch, r_epoch FROM chains "
                "WHERE measurement_id = ?",
                (measurement_id,),
            ).fetchall()
        return {r[0]: ChainPoint(*r[1:]) for r in rows}

    # --- flow epochs ------------------------------------------------------------------------

    def flow_epoch(self, direction: str, sids: tuple[str, ...]) -> int | None:
        """When a monitored flow's counters were created (Unix ns), if recorded."""
        with self._lock:
            row = self._db.execute(
                "SELECT epoch FROM flow_epochs WHERE direction = ? AND sids = ?", (direction, ",".join(sids))
            ).fetchone()
        return row[0] if row else None

    def put_flow_epoch(self, direction: str, sids: tuple[str, ...], epoch: int | None) -> None:
        """Record (or, with None, forget) a flow's epoch."""
        with self._lock:
            if epoch is None:
                self._db.execute(
                    "DELETE FROM flow_epochs WHERE direction = ? AND sids = ?", (direction, ",".join(sids))
                )
            else:
                self._db.execute(
                    "INSERT OR REPLACE INTO flow_epochs VALUES (?, ?, ?)", (direction, ",".join(sids), epoch)
                )

    # --- results ----------------------------------------------------------------------------

    def add_blocks(
        self, items: Iterable[tuple[pb.BlockResult | None, tuple[str, int, ChainPoint] | None]]
    ) -> None:
        """Store block results and chain points, all in one transaction (never a result without its
        chain point or the other way round: a restart must not re-measure a block it already
        reported, nor skip one). The engine writes each loop tick's blocks together."""
        with self._lock:
            self._db.execute("BEGIN")  # autocommit connection: one explicit transaction
            try:
                for result, chain in items:
                    if result is not None:
                        self._db.execute(
                            "INSERT OR REPLACE INTO results VALUES (?, ?, ?)",
                            (result.measurement_id, result.block_number, result.SerializeToString()),
                        )
                    if chain is not None:
                        mid, colour, p = chain
                        self._db.execute(
                            "INSERT OR REPLACE INTO chains VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (mid, colour, p.block, p.s_txc, p.r_rxc, p.r_txc, p.s_rxc, p.s_epoch, p.r_epoch),
                        )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def prune(self, measurement_ids: Iterable[str]) -> None:
        """Keep the last KEEP_RESULTS results per measurement."""
        with self._lock, self._db:
            for mid in measurement_ids:
                self._db.execute(
                    "DELETE FROM results WHERE measurement_id = ? AND block_number <= "
                    "(SELECT block_number FROM results WHERE measurement_id = ? "
                    "ORDER BY block_number DESC LIMIT 1 OFFSET ?)",
                    (mid, mid, KEEP_RESULTS),
                )

    def results(self, measurement_id: str, since_block: int = 0, limit: int = 0) -> list[pb.BlockResult]:
        """Stored results with block_number > since_block, oldest first; the newest ``limit``."""
        with self._lock:
            if limit:
                rows = self._db.execute(
                    "SELECT record FROM (SELECT block_number, record FROM results WHERE measurement_id = ? "
                    "AND block_number > ? ORDER BY block_number DESC LIMIT ?) ORDER BY block_number",
                    (measurement_id, since_block, limit),
                ).fetchall()
            else:
                rows = self._db.execute(
                    "SELECT record FROM results WHERE measurement_id = ? AND block_number > ? "
                    "ORDER BY block_number",
                    (measurement_id, since_block),
                ).fetchall()
        return [pb.BlockResult.FromString(r[0]) for r in rows]

    def last_block(self, measurement_id: str) -> int:
        """The newest stored block number of a measurement (0 if none)."""
        with self._lock:
            row = self._db.execute(
                "SELECT MAX(block_number) FROM results WHERE measurement_id = ?", (measurement_id,)
            ).fetchone()
        return row[0] or 0
