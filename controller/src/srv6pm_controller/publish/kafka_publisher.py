"""Publish block results to Kafka: one long-lived batched producer, with an on-disk spool.

Routing, in one sentence: a result goes straight to the producer while Kafka is healthy and the
spool is empty; otherwise it goes to the spool, and a worker thread drains the spool, oldest
first, whenever no direct send is in flight.

Why that shape:

- **Order.** A result is never sent directly while older ones wait in the spool, and the spool is
  only drained once every direct send has been acknowledged or has failed (a failed one is
  spooled under the sequence number it was published with, so it lands in its original place).
  Within Kafka, order per key (= measurement id = partition) comes from the idempotent producer
  (sequence numbers per partition; kafka-python then also keeps one batch per partition in flight).
- **No loss.** A send counts as published only once Kafka acknowledged it with ``acks=all``; any
  failure puts the result in the spool (up to its bound). :meth:`ResultPublisher.close` spools
  whatever Kafka did not acknowledge, and the spool file is re-read on the next start.
- **No duplicates.** Identity is (measurement id, block number): a block published again while
  this process remembers it (a bounded window) or while it is spooled is ignored and counted.
  A spooled row is deleted as soon as Kafka acknowledged it, so nothing is sent twice.
  Residual cases, inherent to any producer: a send whose acknowledgement was lost on the wire
  is re-sent (InfluxDB absorbs it: same point), and if one send of a batch fails while a later
  one succeeds, the failed one arrives later (late, not lost, not doubled).
- **Kafka down at start.** The producer is created in the worker thread with retries; until then
  every result is spooled, so the daemon never blocks on an absent broker.

Metrics: :meth:`ResultPublisher.metrics` returns plain counters for the daemon to report.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from srv6pm.node.v1 import srv6_pm_pb2
from srv6pm_controller.publish.schema import (
    CONTENT_TYPE,
    MEASUREMENT,
    SCHEMA_VERSION,
    EncodedResult,
    SchemaError,
    encode,
)
from srv6pm_controller.publish.spool import Spool

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "srv6pm.results"

# Headers let a non-Telegraf consumer tell what the value is without parsing it.
_HEADERS = [
    ("content-type", CONTENT_TYPE.encode()),
    ("srv6pm-schema", f"{MEASUREMENT}/{SCHEMA_VERSION}".encode()),
]

# Producer settings. Timeouts are short on purpose: they bound how long a result can sit in the
# producer's memory before an outage is noticed and it moves to the (durable) spool.
DEFAULT_PRODUCER_CONFIG: dict[str, Any] = {
    "client_id": "srv6pm-controller",
    "acks": "all",
    # Idempotence keeps each partition (= measurement) in order and free of retry duplicates
    # with up to 5 requests in flight; 1 in flight would cost ~25 % of the throughput here.
    "enable_idempotence": True,
    "max_in_flight_requests_per_connection": 5,
    "linger_ms": 20,
    "batch_size": 256 * 1024,
    "max_block_ms": 5000,
    "request_timeout_ms": 5000,
    "delivery_timeout_ms": 15000,
    "bootstrap_timeout_ms": 5000,
    "retry_backoff_ms": 200,
    "reconnect_backoff_max_ms": 2000,
}

ProducerFactory = Callable[..., Any]


class ResultPublisher:
    """Publishes :class:`BlockResult` messages to one Kafka topic, spooling while Kafka is away.

    Thread-safe: :meth:`publish` may be called from any thread (e.g. one per node stream).
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        spool_path: str | Path,
        *,
        topic: str = DEFAULT_TOPIC,
        max_spool_rows: int = 1_000_000,
        max_spool_bytes: int = 512 * 2**20,
        producer_config: Mapping[str, Any] | None = None,
        retry_interval: float = 0.5,
        max_retry_interval: float = 5.0,
        drain_batch: int = 2000,
        dedupe_window: int = 200_000,
        producer_factory: ProducerFactory = KafkaProducer,
    ) -> None:
        """Open the spool at ``spool_path`` and start connecting to ``bootstrap_servers``.

        ``producer_config`` overrides :data:`DEFAULT_PRODUCER_CONFIG` (kafka-python names).
        ``retry_interval`` .. ``max_retry_interval``: back-off between reconnect/drain attempts.
        ``dedupe_window``: how many recent block identities are remembered to ignore re-publishes.
        """
        self.topic = topic
        self._config = {
            **DEFAULT_PRODUCER_CONFIG,
            **(producer_config or {}),
            "bootstrap_servers": bootstrap_servers,
        }
        self._factory = producer_factory
        self._retry_interval = retry_interval
        self._max_retry_interval = max_retry_interval
        self._drain_batch = drain_batch
        self._dedupe_window = dedupe_window
        self.spool = Spool(spool_path, max_rows=max_spool_rows, max_bytes=max_spool_bytes)
        # Sequence numbers continue after the spool's, so rows from a previous run stay first.
        self._seq = itertools.count(self.spool.max_seq() + 1)
        self._lock = threading.Lock()  # routing: degraded flag, seq, dedupe window, producer.send
        self._cb_lock = threading.Lock()  # counters touched by the producer's I/O thread
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._producer: Any = None
        self._degraded = True  # True: results go to the spool (no producer yet, or Kafka failing)
        # Direct sends not yet acknowledged, by publish seq: what close() must spool if Kafka
        # does not answer in time.
        self._pending: dict[int, EncodedResult] = {}
        self._outage_logged = False
        self.published = 0
        self.duplicates = 0
        self.invalid = 0
        self.send_failures = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="srv6pm-kafka-publisher", daemon=True)
        self._worker.start()

    # --- public API ----------------------------------------------------------------------------------

    def publish(self, result: srv6_pm_pb2.BlockResult) -> bool:
        """Hand one block result over for delivery.

        Never waits for Kafka while it is known to be away (results then go to the spool); while
        it is up, kafka-python may block up to ``max_block_ms`` (5 s) if its buffer is full.

        Returns False if it was not accepted: not encodable (counted in ``invalid``, logged) or a
        duplicate of a block already handed over (counted in ``duplicates``).
        """
        if self._stop.is_set():
            raise RuntimeError("the publisher is closed")  # a caller bug: never drop results silently
        try:
            record = encode(result)
        except SchemaError as exc:
            with self._cb_lock:
                self.invalid += 1
            log.error("block result not published (invalid): %s", exc)
            return False
        ident = (record.measurement_id, record.block_number)
        with self._lock:
            if ident in self._seen:
                with self._cb_lock:
                    self.duplicates += 1
                return False
            self._seen[ident] = None
            if len(self._seen) > self._dedupe_window:
                self._seen.popitem(last=False)
            seq = next(self._seq)
            if self._degraded or self.spool.depth:
                return self._to_spool(seq, record)  # False: already spooled (by a previous run)
            self._send_direct(seq, record)
        return True

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything handed over is acknowledged by Kafka (spool drained).

        Returns False if the deadline passed first (e.g. Kafka is still down).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cb_lock:
                idle = not self._pending
            if idle and self.spool.depth == 0:
                return True
            producer = self._producer
            if producer is not None and not idle:
                with contextlib.suppress(KafkaError):
                    producer.flush(timeout=max(deadline - time.monotonic(), 0.0))
            self._wake.set()
            time.sleep(0.02)
        return False

    def wait_connected(self, timeout: float = 10.0) -> bool:
        """Wait until results go straight to Kafka (producer connected, spool empty)."""
        deadline = time.monotonic() + timeout
        while self._degraded:
            if time.monotonic() >= deadline:
                return False
            self._wake.set()
            time.sleep(0.02)
        return True

    def metrics(self) -> dict[str, int]:
        """Counters for the daemon: totals since start, plus current spool depth and in-flight sends."""
        with self._cb_lock:
            inflight = len(self._pending)
        return {
            "published": self.published,
            "spooled": self.spool.spooled_total,
            "spool_depth": self.spool.depth,
            "spool_bytes": self.spool.size_bytes,
            "dropped": self.spool.dropped_total,
            "duplicates": self.duplicates + self.spool.duplicates_total,
            "invalid": self.invalid,
            "send_failures": self.send_failures,
            "in_flight": inflight,
            "kafka_up": int(not self._degraded),
        }

    def close(self, timeout: float = 10.0) -> None:
        """Stop: wait up to ``timeout`` for sends in flight, spool the rest, close the spool.

        Results still in the spool stay in its file and are delivered by the next publisher
        opened on the same path. Waiting for a drain is :meth:`flush`'s job, not close's: a
        controller must be able to stop promptly while Kafka is down.
        """
        self._stop.set()
        self._wake.set()
        self._worker.join()
        producer, self._producer = self._producer, None
        if producer is not None:
            # Kafka not answering in time is not an error here: what is pending is spooled below.
            with contextlib.suppress(KafkaError):
                producer.flush(timeout=timeout)
            with self._cb_lock:
                leftovers = sorted(self._pending.items())
                self._pending.clear()  # late errbacks now find nothing to spool
            for seq, record in leftovers:
                self.spool.add(seq, record)
            if leftovers:
                log.warning("closing with Kafka unavailable: %d unacknowledged results spooled to %s",
                            len(leftovers), self.spool.path)
            self._abandon(producer)
        self.spool.close()

    def __enter__(self) -> ResultPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- direct path -------------------------------------------------------------------------------

    def _send_direct(self, seq: int, record: EncodedResult) -> None:
        """Send through the producer (caller holds self._lock); fall back to the spool on error."""
        with self._cb_lock:
            self._pending[seq] = record
        try:
            future = self._producer.send(self.topic, key=record.key, value=record.value, headers=_HEADERS)
        except (KafkaError, BufferError) as exc:  # no metadata within max_block_ms, buffer full
            with self._cb_lock:
                del self._pending[seq]
            self._enter_outage(exc)
            self._to_spool(seq, record)
            return
        future.add_callback(self._on_ack, seq)
        future.add_errback(self._on_error, seq)

    def _on_ack(self, seq: int, _metadata: object) -> None:
        with self._cb_lock:
            self._pending.pop(seq, None)
            self.published += 1

    def _on_error(self, seq: int, exc: BaseException) -> None:
        # Runs on the producer's I/O thread: take only the spool's and the counters' locks.
        with self._cb_lock:
            record = self._pending.get(seq)
        if record is None:  # close() already spooled it
            return
        self._enter_outage(exc)
        try:
            self._to_spool(seq, record)
        finally:
            with self._cb_lock:
                # Only after spooling: the worker drains only once nothing is pending.
                self._pending.pop(seq, None)
                self.send_failures += 1

    def _to_spool(self, seq: int, record: EncodedResult) -> bool:
        added = self.spool.add(seq, record)
        self._wake.set()
        return added

    def _enter_outage(self, exc: BaseException) -> None:
        self._degraded = True
        if not self._outage_logged:
            self._outage_logged = True
            log.warning("Kafka unavailable (%s): spooling block results to %s", exc, self.spool.path)

    # --- worker: connect, then drain the spool ---------------------------------------------------

    def _run(self) -> None:
        backoff = self._retry_interval
        batch = 1  # one probe record after a failure, then growing batches
        while not self._stop.is_set():
            if self._producer is None and not self._connect():
                self._sleep(backoff)
                backoff = min(backoff * 2, self._max_retry_interval)
                continue
            if self.spool.depth == 0:
                with self._lock:
                    if self.spool.depth == 0 and self._degraded:
                        self._degraded = False
                        if self._outage_logged:
                            log.info("Kafka available: publishing directly again")
                        self._outage_logged = False
                self._sleep(self._max_retry_interval)
                continue
            with self._cb_lock:
                busy = bool(self._pending)
            if busy:  # let direct sends settle first, failures land before newer rows
                self._sleep(0.05)
                continue
            if self._drain(batch):
                backoff = self._retry_interval
                batch = min(batch * 4, self._drain_batch)
            else:
                self._reset_producer()
                self._sleep(backoff)
                backoff = min(backoff * 2, self._max_retry_interval)
                batch = 1

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _connect(self) -> bool:
        try:
            self._producer = self._factory(**self._config)
        except Exception as exc:  # NoBrokersAvailable, DNS errors, ...: keep spooling, retry later
            self._enter_outage(exc)
            return False
        log.info("Kafka producer connected to %s (topic %s)", self._config["bootstrap_servers"], self.topic)
        return True

    @staticmethod
    def _abandon(producer: Any) -> None:
        """Close a producer without waiting for Kafka.

        kafka-python 3.0's close() first flushes and raises if that times out, never reaching its
        force-close; so force the sender closed first (a private attribute, hence the guard).
        """
        sender = getattr(producer, "_sender", None)
        if sender is not None and hasattr(sender, "force_close"):
            sender.force_close()
            sender.join(5)
        try:
            producer.close(timeout=0)
        except Exception as exc:  # a broken producer must not stop the controller's shutdown
            log.debug("closing producer: %s", exc)

    def _reset_producer(self) -> None:
        # A fresh producer after a failed drain: reconnects cleanly and never inherits a producer
        # id/epoch the broker may have fenced during the outage. Nothing is in flight here.
        producer, self._producer = self._producer, None
        if producer is not None:
            self._abandon(producer)

    def _drain(self, limit: int) -> bool:
        """Send the oldest ``limit`` spooled rows and wait for them; True if all were delivered."""
        rows = self.spool.peek(limit)
        sent: list[tuple[int, Any]] = []
        ok = True
        for row in rows:
            try:
                future = self._producer.send(
                    self.topic, key=row.record.key, value=row.record.value, headers=_HEADERS
                )
            except (KafkaError, BufferError) as exc:
                self._enter_outage(exc)
                ok = False
                break
            sent.append((row.seq, future))
        timeout = self._config["delivery_timeout_ms"] / 1000 + 5
        try:
            self._producer.flush(timeout=timeout)
        except KafkaError as exc:
            self._enter_outage(exc)
        delivered = [seq for seq, future in sent if future.is_done and future.succeeded()]
        self.spool.remove(delivered)
        with self._cb_lock:
            self.published += len(delivered)
        if len(delivered) < len(sent):
            failed = next(f for _, f in sent if not (f.is_done and f.succeeded()))
            self._enter_outage(failed.exception or TimeoutError("not acknowledged in time"))
            with self._cb_lock:
                self.send_failures += len(sent) - len(delivered)
            ok = False
        return ok and len(delivered) == len(rows)
