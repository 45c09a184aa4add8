"""Fan-out of new block results to northbound streams and to sinks (the Kafka publisher)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable

from srv6pm.node.v1 import srv6_pm_pb2 as pb

log = logging.getLogger(__name__)

Sink = Callable[[pb.BlockResult], None]


class Subscription:
    """A queue of results for one northbound stream, optionally filtered by measurement id."""

    def __init__(self, bus: ResultBus, ids: Iterable[str], maxsize: int = 10_000) -> None:
        self._bus = bus
        self.ids = frozenset(ids)
        self.queue: queue.Queue[pb.BlockResult] = queue.Queue(maxsize)
        self.dropped = 0

    def offer(self, result: pb.BlockResult) -> None:
        if self.ids and result.measurement_id not in self.ids:
            return
        try:
            self.queue.put_nowait(result)
        except queue.Full:  # a stalled client must not stall collection
            self.dropped += 1

    def get(self, timeout: float) -> pb.BlockResult | None:
        """The next result, or None after ``timeout`` seconds."""
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop receiving."""
        self._bus.unsubscribe(self)


class ResultBus:
    """Delivers each new result to every subscription and sink."""

    def __init__(self, sinks: Iterable[Sink] = ()) -> None:
        self._lock = threading.Lock()
        self._subs: list[Subscription] = []
        self.sinks = list(sinks)

    def subscribe(self, ids: Iterable[str] = ()) -> Subscription:
        """A new subscription (close it when done)."""
        sub = Subscription(self, ids)
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def publish(self, result: pb.BlockResult) -> None:
        """Hand ``result`` to every sink and subscription; a failing sink is logged, not fatal."""
        for sink in self.sinks:
            try:
                sink(result)
            except Exception:
                log.exception("result sink failed", extra={"measurement_id": result.measurement_id})
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub.offer(result)
