"""Fan-out of new block results to northbound streams and to sinks (the Kafka publisher)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_common.result_queue import ResultQueue

log = logging.getLogger(__name__)

Sink = Callable[[pb.BlockResult], None]
SUBSCRIPTION_BACKLOG = 10_000  # results a northbound reader may fall behind before its stream ends


class ResultBus:
    """Delivers each new result to every subscription and sink."""

    def __init__(self, sinks: Iterable[Sink] = ()) -> None:
        self._lock = threading.Lock()
        self._subs: list[ResultQueue] = []
        self.sinks = list(sinks)

    def subscribe(self, ids: Iterable[str] = ()) -> ResultQueue:
        """A new subscription (close it when done)."""
        sub = ResultQueue(ids, SUBSCRIPTION_BACKLOG, on_close=self.unsubscribe)
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: ResultQueue) -> None:
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
