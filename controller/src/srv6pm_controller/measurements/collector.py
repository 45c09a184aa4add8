"""Subscribing to the nodes' result streams.

One long-lived ``SRv6PM.StreamResults`` call per sender node carries the results of every
measurement that node sends for. When the call breaks (node restarted, network down) it is made
again with exponential backoff, asking the node to replay blocks newer than the oldest "last block
stored" among its measurements; results already stored are recognised by (measurement id, block
number) and dropped, so a reconnect neither loses nor duplicates a block the node still has.
Blocks before a measurement's first block (the node's results of an earlier, deleted measurement
of the same id) are not collected.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pb_grpc

from ..services.nodes import NodeRegistry
from ..store import Store

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.2
BACKOFF_MAX = 5.0
STREAM_BATCH = 256  # results per message from a node: batches keep thousands of measurements cheap


@dataclass(frozen=True)
class StreamStats:
    """The result stream of one sender node: open now, and how often it was opened."""

    up: bool
    connects: int


@dataclass(frozen=True)
class CollectorStats:
    """Totals since start: new results stored, results a node sent again; the streams by node."""

    collected: int
    repeated: int
    streams: dict[str, StreamStats]


class _NodeStream:
    """The result stream of one sender node, kept alive by its own thread."""

    def __init__(self, collector: ResultCollector, node: str, ids: frozenset[str]) -> None:
        self.collector, self.node, self.ids = collector, node, ids
        self._stop = threading.Event()
        self._call: grpc.Future | None = None
        self._lock = threading.Lock()
        self.connects = 0
        self.up = False  # a call is open and has not broken
        self._thread = threading.Thread(target=self._run, name=f"results-{node}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (``join`` waits for it)."""
        self._stop.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()

    def join(self) -> None:
        # No timeout: once this returns, nothing more is stored or handed on, so a result can
        # never be stored without reaching the sinks (a stored block is not asked for again).
        # Each step is bounded: the call is cancelled, a batch takes milliseconds to store and a
        # send to Kafka blocks at most the producer's max_block_ms.
        self._thread.join()

    def _run(self) -> None:
        backoff = BACKOFF_MIN
        store = self.collector.store
        while not self._stop.is_set():
            since = min(max(store.last_block(m), store.first_block(m) - 1) for m in self.ids)
            request = pb.StreamResultsRequest(
                measurement_ids=sorted(self.ids), since_block=since, max_batch=STREAM_BATCH
            )
            try:
                stub = pb_grpc.SRv6PMStub(self.collector.registry.channel(self.node))
                with self._lock:
                    if self._stop.is_set():
                        return
                    self._call = stub.StreamResults(request)
                self.connects += 1
                self.up = True
                log.info(
                    "result stream open",
                    extra={"node": self.node, "since_block": since, "measurements": len(self.ids)},
                )
                for response in self._call:
                    backoff = BACKOFF_MIN  # the stream works: start over from a short wait next time
                    # batched as asked; a node that ignores max_batch answers one at a time
                    batch = response.results or ([response.result] if response.HasField("result") else [])
                    if self._stop.is_set():
                        return  # not stored: the node sends it again on the next start
                    self.collector.handle(batch)
                self.up = False  # the node ended the stream (it is shutting down): open it again
            except grpc.RpcError as exc:
                self.up = False
                if self._stop.is_set():
                    return
                code = exc.code() if isinstance(exc, grpc.Call) else None
                log.warning(
                    "result stream broken, reconnecting",
                    extra={"node": self.node, "code": getattr(code, "name", "?"), "retry_in": backoff},
                )
            except Exception:  # e.g. the node was removed meanwhile: retry, the refresh will stop us
                self.up = False
                if self._stop.is_set():
                    return
                log.exception("result stream failed", extra={"node": self.node})
            self._stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)


class ResultCollector:
    """Keeps one stream per sender node with running measurements; stores and forwards results."""

    def __init__(
        self, registry: NodeRegistry, store: Store, on_result: Callable[[pb.BlockResult], None]
    ) -> None:
        self.registry = registry
        self.store = store
        self.on_result = on_result
        self._streams: dict[str, _NodeStream] = {}
        self._lock = threading.Lock()  # the streams dict
        self._refresh_lock = threading.Lock()  # one refresh (or close) at a time
        self._stats_lock = threading.Lock()
        self._collected = 0
        self._repeated = 0

    def handle(self, results: Sequence[pb.BlockResult]) -> None:
        """Store a node's results (one transaction); forward those that are new. The store leaves
        out duplicates, results of measurements deleted meanwhile, and blocks of an earlier
        measurement of the same id which the node still remembers."""
        new = self.store.add_results(results)
        with self._stats_lock:  # one stream thread per node calls this
            self._collected += len(new)
            self._repeated += len(results) - len(new)
        for result in new:
            self.on_result(result)

    def refresh(self) -> None:
        """Align the streams with the measurements in the store (after create/delete, at start)."""
        with self._refresh_lock:
            wanted: dict[str, set[str]] = {}
            for m in self.store.measurements():
                if m.state == pb.MEASUREMENT_STATE_RUNNING:
                    wanted.setdefault(m.sender_node, set()).add(m.spec.measurement_id)
            with self._lock:
                stale = [
                    self._streams.pop(node)
                    for node, stream in list(self._streams.items())
                    if frozenset(wanted.get(node, ())) != stream.ids
                ]
            # Stopped before their replacements open (which ask for what the old ones did not store).
            self._stop_all(stale)
            with self._lock:
                for node, ids in wanted.items():
                    if node not in self._streams:
                        self._streams[node] = _NodeStream(self, node, frozenset(ids))

    def connects(self, node: str) -> int:
        """How many times the stream of ``node`` was (re)opened (for status and tests)."""
        with self._lock:
            stream = self._streams.get(node)
        return stream.connects if stream else 0

    def stats(self) -> CollectorStats:
        """Counters for the metrics endpoint."""
        with self._lock:
            streams = {n: StreamStats(s.up, s.connects) for n, s in sorted(self._streams.items())}
        with self._stats_lock:
            return CollectorStats(self._collected, self._repeated, streams)

    def close(self) -> None:
        """Stop every stream; when this returns, no result is stored or handed on any more."""
        with self._refresh_lock, self._lock:
            streams = list(self._streams.values())
            self._streams.clear()
        self._stop_all(streams)

    @staticmethod
    def _stop_all(streams: list[_NodeStream]) -> None:
        # Never while holding a lock a stream thread may need (handle() takes _stats_lock).
        for stream in streams:  # all at once: not one wait after another
            stream.stop()
        for stream in streams:
            stream.join()
